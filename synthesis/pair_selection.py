"""Choosing 2-way marginals from dependency scores, in clear: the inputs the encrypted
selection needs (expected counts), PrivSyn's greedy rule, and the exact integer model of the
encrypted rounds.

* :func:`expected_counts_for_pairs`: K = round(C_j C_k / N) from the released noisy 1-ways,
  scaled down if needed so that sum K <= max_rows (then InDif <= 2 max_rows, the width the
  selection circuit is compiled for). Post-processing of a release: no privacy cost.
* :func:`greedy_select`: PrivSyn's marginal selection (Zhang et al. 2021, Section 5.2), on
  noisy scores: add the pair that most lowers the total error, sum over unselected pairs of
  InDif plus sum over selected pairs of the expected L1 noise of publishing them,
  sqrt(2/pi) sigma(m) cells, with sigma(m)^2 = m / (2 rho) when m pairs share rho; stop when
  no pair lowers it. (PrivSyn splits rho by cells^(2/3); we split evenly, as our release
  does.)
* :func:`em_rounds_model`: the rounds of ``crypto.selection`` exactly as the servers run them
  (the compute server's order, joint random bits, the key server's priorities, the accepted
  candidate of least priority), in clear, for the benchmark's simulation; tests prove each
  stage bit-identical to the circuits.
"""

from __future__ import annotations

import math
import secrets
from fractions import Fraction

import numpy as np

from crypto.indif import expected_counts
from crypto.selection import (SelectionShape, random_priorities, random_share,
                              secure_order, select_plaintext)

__all__ = ["expected_counts_for_pairs", "indif_scores", "greedy_select", "em_rounds_model"]


def expected_counts_for_pairs(one_way: list[np.ndarray], pairs: list[tuple[int, int]],
                              max_rows: int) -> dict[tuple[int, int], np.ndarray]:
    total = float(np.mean([np.maximum(m, 0).sum() for m in one_way]))
    out = {}
    for a, b in pairs:
        k = expected_counts(one_way[a], one_way[b], total)
        if k.sum() > max_rows:  # keep InDif <= 2 max_rows (module docstring)
            k = np.floor(k * (max_rows / k.sum())).astype(np.int64)
        out[(a, b)] = k
    return out


def indif_scores(pair_counts: dict[tuple[int, int], np.ndarray],
                 expected: dict[tuple[int, int], np.ndarray]) -> dict[tuple[int, int], int]:
    return {p: int(np.abs(np.asarray(pair_counts[p]).ravel() - expected[p]).sum())
            for p in expected}


def greedy_select(scores: dict[tuple[int, int], float], cells: dict[tuple[int, int], int],
                  rho_marginals: Fraction) -> list[tuple[int, int]]:
    chosen: list[tuple[int, int]] = []
    remaining = dict(scores)
    scale = math.sqrt(2 / math.pi)

    def total_error(selected: list) -> float:
        sigma = math.sqrt(len(selected) / (2 * float(rho_marginals)))
        return (sum(v for p, v in scores.items() if p not in selected)
                + scale * sigma * sum(cells[p] for p in selected))

    best_error = total_error([])
    for _ in range(len(scores)):  # bounded: one pair per pass
        options = [(total_error(chosen + [p]), p) for p in remaining]
        if not options:
            break
        error, pick = min(options)
        if error >= best_error:
            break
        chosen.append(pick)
        del remaining[pick]
        best_error = error
    return chosen


def em_rounds_model(scores: list[int], shape: SelectionShape, c: list[int], rounds: int,
                    randbits=secrets.randbits) -> list[int]:
    """Indices chosen by ``rounds`` encrypted selections, modelled exactly in clear."""
    s = shape.candidates
    if len(scores) != s:
        raise ValueError("one score per compiled candidate")
    digits = np.array([[(int(v) >> j) & 1 for j in range(shape.score_bits)] for v in scores])
    active = np.ones(s, dtype=np.int64)
    chosen = []
    for _ in range(rounds):
        order = secure_order(s, randbits)
        r_ks, r_cs = random_share(shape, randbits)[0], random_share(shape, randbits)[0]
        priority = random_priorities(shape, randbits)[0]
        one_hot = select_plaintext(digits[order], active[order], r_ks, r_cs, shape, c, priority)
        pick = order[int(np.argmax(one_hot))]
        chosen.append(pick)
        active[pick] = 0
    return chosen
