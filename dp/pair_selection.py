"""Choosing 2-way marginals from dependency scores, in clear: the inputs the encrypted
selection needs (expected counts) and PrivSyn's greedy rule.

* :func:`expected_counts_for_pairs`: K = round(C_j C_k / N) from the released noisy 1-ways,
  scaled down if needed so that sum K <= max_rows (then InDif <= 2 max_rows, the width the
  selection circuit is compiled for). Post-processing of a release: no privacy cost.
* :func:`greedy_select`: PrivSyn's marginal selection (Zhang et al. 2021, Section 5.2), on
  noisy scores: add the pair that most lowers the total error, sum over unselected pairs of
  InDif plus sum over selected pairs of the expected L1 noise of publishing them,
  sqrt(2/pi) sigma(m) cells, with sigma(m)^2 = m / (2 rho) when m pairs share rho; stop when
  no pair lowers it. (PrivSyn splits rho by cells^(2/3); we split evenly, as our release
  does.)

The encrypted rounds' exact integer model is ``crypto.tfhe_permute_and_flip.em_rounds_model``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["expected_counts", "expected_counts_for_pairs", "indif_scores", "greedy_by_error",
           "greedy_select"]

Array = np.ndarray[Any, Any]


def expected_counts(one_way_j: Array, one_way_k: Array, total: float) -> Array:
    """K = round(C_j C_k / N) from released (noisy, public) 1-way marginals, clipped at 0."""
    cj = np.maximum(np.asarray(one_way_j, dtype=float), 0)
    ck = np.maximum(np.asarray(one_way_k, dtype=float), 0)
    n = max(float(total), 1.0)
    out: Array = np.rint(np.outer(cj, ck) / n).astype(np.int64).ravel()
    return out


def expected_counts_for_pairs(one_way: list[Array], pairs: list[tuple[int, int]],
                              max_rows: int) -> dict[tuple[int, int], Array]:
    total = float(np.mean([np.maximum(m, 0).sum() for m in one_way]))
    out = {}
    for a, b in pairs:
        k = expected_counts(one_way[a], one_way[b], total)
        if k.sum() > max_rows:  # keep InDif <= 2 max_rows (module docstring)
            k = np.floor(k * (max_rows / k.sum())).astype(np.int64)
        out[(a, b)] = k
    return out


def indif_scores(pair_counts: dict[tuple[int, int], Array],
                 expected: dict[tuple[int, int], Array]) -> dict[tuple[int, int], int]:
    return {p: int(np.abs(np.asarray(pair_counts[p]).ravel() - expected[p]).sum())
            for p in expected}


def greedy_by_error(candidates: list[tuple[int, int]],
                    error: Callable[[list[tuple[int, int]]], float]) -> list[tuple[int, int]]:
    """PrivSyn's greedy loop: add the candidate whose selection gives the least ``error``,
    while that lowers it (ties to the smaller pair); at most one pass per candidate."""
    chosen: list[tuple[int, int]] = []
    best = error(chosen)
    for _ in range(len(candidates)):  # bounded: one pair per pass
        options = [(error(chosen + [p]), p) for p in candidates if p not in chosen]
        if not options:
            break
        value, pick = min(options)
        if value >= best:
            break
        chosen.append(pick)
        best = value
    return chosen


def greedy_select(scores: dict[tuple[int, int], float], cells: dict[tuple[int, int], int],
                  rho_marginals: Fraction) -> list[tuple[int, int]]:
    """PrivSyn's rule with the pairs sharing ``rho_marginals`` evenly (module docstring)."""
    scale = math.sqrt(2 / math.pi)

    def total_error(selected: list[tuple[int, int]]) -> float:
        sigma = math.sqrt(len(selected) / (2 * float(rho_marginals)))
        return (sum(v for p, v in scores.items() if p not in selected)
                + scale * sigma * sum(cells[p] for p in selected))

    return greedy_by_error(list(scores), total_error)
