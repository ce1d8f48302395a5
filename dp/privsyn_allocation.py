"""PrivSyn's allocation of the 2-way budget over the selected pairs, and its greedy rule.

PrivSyn (Zhang et al. 2021, Section 5.2) publishes marginal i with a share of the budget
proportional to c_i^(2/3) (c_i its cell count): that minimises the expected total L1 noise
sum_i sqrt(2/pi) c_i sigma_i under sum_i 1 / (2 sigma_i^2) = rho. Its greedy selection uses
the same allocation to price each candidate set.

Design concern: **exact shares.** The weights are positive rationals (c^(2/3) rounded to a
1e-6 grid), so the shares of ``rho`` add up to ``rho`` exactly and a session spends exactly
its budget. Pairs of equal size share one group (one noise level, hence one joint shape):
a group of M pairs of weight w each gets rho M w / W (W the selected pairs' total weight),
so its per-pair budget is rho w / W and its Gaussian reference sigma2 = W / (2 rho w).

>>> cells = {(0, 1): 8, (0, 2): 8, (1, 2): 27}
>>> [(pairs, str(rho)) for pairs, rho in allocation_groups(cells, [(0, 1), (1, 2)], 1)]
[([(0, 1)], '4/13'), ([(1, 2)], '9/13')]
"""

from __future__ import annotations

import math
from fractions import Fraction

from dp.pair_selection import greedy_by_error

__all__ = ["allocation_weight", "allocation_groups", "greedy_select_allocated"]

# c^(2/3) weights rounded to multiples of 1e-6 (as the bench's central PrivSyn).
WEIGHT_GRID = 10 ** 6


def allocation_weight(cells: int) -> Fraction:
    """PrivSyn's c^(2/3), as a positive rational (any positive weights keep the sum exact)."""
    return Fraction(max(1, round(cells ** (2 / 3) * WEIGHT_GRID)), WEIGHT_GRID)


def allocation_groups(cells: dict[tuple[int, int], int], chosen: list[tuple[int, int]],
                      rho: Fraction | int) -> list[tuple[list[tuple[int, int]], Fraction]]:
    """The chosen pairs grouped by cell count (ascending), each group with its exact share
    of ``rho`` (module docstring); the shares add up to ``rho``."""
    weight = {p: allocation_weight(cells[p]) for p in chosen}
    total = sum(weight.values(), start=Fraction(0))
    groups: dict[int, list[tuple[int, int]]] = {}
    for p in chosen:
        groups.setdefault(cells[p], []).append(p)
    return [(pairs, Fraction(rho) * sum((weight[p] for p in pairs), start=Fraction(0)) / total)
            for _, pairs in sorted(groups.items())]


def greedy_select_allocated(scores: dict[tuple[int, int], float],
                            cells: dict[tuple[int, int], int],
                            rho: Fraction) -> list[tuple[int, int]]:
    """PrivSyn's greedy rule priced with its own allocation of ``rho`` over the selected
    pairs: pair i's expected L1 noise is sqrt(2/pi) c_i sigma_i, sigma_i^2 = W / (2 rho w_i)."""
    weight = {p: float(allocation_weight(c)) for p, c in cells.items()}
    scale = math.sqrt(2 / math.pi)

    def total_error(selected: list[tuple[int, int]]) -> float:
        total = sum(weight[p] for p in selected)
        noise = sum(scale * cells[p] * math.sqrt(total / (2 * float(rho) * weight[p]))
                    for p in selected)
        return sum(v for p, v in scores.items() if p not in selected) + noise

    return greedy_by_error(list(scores), total_error)
