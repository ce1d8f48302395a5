"""Workload error of a synthetic table against the real union.

The average L1 distance between normalised marginals (each a probability vector, so the
error of one marginal lies in [0, 2]) over: every 1-way marginal, every 2-way marginal, and
a fixed random sample of 3-way marginals (seeded, so every run compares the same ones).

>>> real = np.array([[0, 0], [1, 1]]); synth = np.array([[0, 0], [0, 0]])
>>> workload_error(real, synth, (2, 2))["one_way"]
1.0
"""

from __future__ import annotations

import itertools

import numpy as np


def marginal(records: np.ndarray, attrs: tuple[int, ...], sizes: tuple[int, ...]) -> np.ndarray:
    flat = np.zeros(len(records), dtype=np.int64)
    size = 1
    for a in attrs:
        flat = flat * sizes[a] + records[:, a]
        size *= sizes[a]
    counts = np.bincount(flat, minlength=size).astype(float)
    return counts / max(counts.sum(), 1)


def _avg_l1(real, synth, sizes, cliques) -> float:
    if not cliques:
        return 0.0
    return float(np.mean([np.abs(marginal(real, c, sizes) - marginal(synth, c, sizes)).sum()
                          for c in cliques]))


def workload_error(real: np.ndarray, synth: np.ndarray, sizes: tuple[int, ...],
                   three_way_sample: int = 50, seed: int = 20240) -> dict[str, float]:
    d = len(sizes)
    triples = list(itertools.combinations(range(d), 3))
    rng = np.random.default_rng(seed)
    if len(triples) > three_way_sample:
        picked = rng.choice(len(triples), size=three_way_sample, replace=False)
        triples = [triples[i] for i in sorted(picked)]
    return {
        "one_way": _avg_l1(real, synth, sizes, [(a,) for a in range(d)]),
        "two_way": _avg_l1(real, synth, sizes, list(itertools.combinations(range(d), 2))),
        "three_way": _avg_l1(real, synth, sizes, triples),
    }
