"""Utility metrics of a synthetic table against the real union (encoded records).

* ``range_query_error`` (HeteroFedSyn, Section 6): random queries over ``dims`` attributes;
  a categorical attribute gets a random non-empty key set, an ordered (binned continuous)
  attribute a random range [lo, hi] of bins; the answer is the fraction of records that
  satisfy every condition; the error is the mean absolute difference of answers.
* ``wasserstein_one_way``: per attribute, the 1-Wasserstein distance between the real and
  synthetic distributions: over bin positions scaled to [0, 1] for ordered attributes (the
  L1 distance of the CDFs), and the total-variation distance for categorical ones (W1 under
  the 0/1 metric). Averaged over attributes.
* Workload errors (1-, 2- and sampled 3-way L1) are :func:`synthesis.evaluate.workload_error`.

>>> real = np.array([[0, 0], [1, 1]]); synth = np.array([[0, 0], [0, 1]])
>>> wasserstein_one_way(real, synth, (2, 2), ordered=(True, False))
0.25
"""

from __future__ import annotations

import numpy as np

__all__ = ["random_range_queries", "range_query_error", "wasserstein_one_way"]


def random_range_queries(domain_sizes: tuple[int, ...], ordered: tuple[bool, ...], dims: int,
                         count: int, rng: np.random.Generator
                         ) -> list[list[tuple[int, np.ndarray]]]:
    """``count`` queries; each a list of (attribute, boolean mask over its values)."""
    queries = []
    for _ in range(count):
        attrs = rng.choice(len(domain_sizes), size=dims, replace=False)
        query = []
        for a in sorted(attrs.tolist()):
            size = domain_sizes[a]
            mask = np.zeros(size, dtype=bool)
            if ordered[a]:
                lo, hi = sorted(rng.integers(0, size, 2).tolist())
                mask[lo:hi + 1] = True
            else:
                keys = rng.choice(size, size=int(rng.integers(1, size + 1)), replace=False)
                mask[keys] = True
            query.append((a, mask))
        queries.append(query)
    return queries


def _answer(records: np.ndarray, query) -> float:
    keep = np.ones(len(records), dtype=bool)
    for a, mask in query:
        keep &= mask[records[:, a]]
    return float(keep.mean()) if len(records) else 0.0


def range_query_error(real: np.ndarray, synth: np.ndarray, queries) -> float:
    return float(np.mean([abs(_answer(real, q) - _answer(synth, q)) for q in queries]))


def wasserstein_one_way(real: np.ndarray, synth: np.ndarray, domain_sizes: tuple[int, ...],
                        ordered: tuple[bool, ...]) -> float:
    out = []
    for a, size in enumerate(domain_sizes):
        p = np.bincount(real[:, a], minlength=size) / max(len(real), 1)
        q = np.bincount(synth[:, a], minlength=size) / max(len(synth), 1)
        if ordered[a] and size > 1:
            # W1 on positions 0, 1/(size-1), ..., 1: sum of |CDF differences| times the step.
            out.append(float(np.abs(np.cumsum(p - q))[:-1].sum() / (size - 1)))
        else:
            out.append(float(0.5 * np.abs(p - q).sum()))
    return float(np.mean(out))
