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

**Marginals that already hold a budget.** Where the 1-ways were released before the pairs
were chosen (noisy-greedy's scores read them), PrivSyn's allocation of the whole publication
is reached by a second release: marginal i ends with f_i = max(floor_i, lam w_i), floor_i
what it already holds (0 for a pair), lam such that the extras f_i - floor_i add up to the
new budget (:func:`allocation_with_floors`, a water-fill solved exactly).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from fractions import Fraction
from typing import TypeVar

from feddpsyn.dp.pair_selection import greedy_by_error

__all__ = ["allocation_weight", "allocation_groups", "allocation_with_floors",
           "floored_groups", "greedy_select_allocated", "greedy_select_with_one_ways"]

K = TypeVar("K", bound=Hashable)

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


def allocation_with_floors(weights: dict[K, Fraction], floors: dict[K, Fraction],
                           budget: Fraction | int) -> dict[K, Fraction]:
    """Each marginal's extra budget f_i - floor_i, where f_i = max(floor_i, lam w_i) and lam
    is such that the extras add up to ``budget`` exactly (a marginal absent from ``floors``
    holds nothing yet). The water-fill in exact rationals: the marginals are activated in
    the order of floor_i / w_i (the lam above which they take more), and with the first k
    active, lam = (budget + their floors) / (their weights); the first k whose lam does not
    reach the next marginal's threshold is the answer.

    >>> one = {"a": Fraction(1), "b": Fraction(4)}
    >>> extra = allocation_with_floors({**one, "ab": Fraction(5)},
    ...                                {"a": Fraction(1, 2), "b": Fraction(1, 2)}, 2)
    >>> {k: str(v) for k, v in extra.items()}, sum(extra.values())
    ({'a': '0', 'b': '11/18', 'ab': '25/18'}, Fraction(2, 1))
    """
    budget = Fraction(budget)
    if budget < 0 or not weights or any(w <= 0 for w in weights.values()):
        raise ValueError("the water-fill needs a budget >= 0 and positive weights")
    floor = {k: Fraction(floors.get(k, 0)) for k in weights}
    order = sorted(weights, key=lambda k: floor[k] / weights[k])  # stable: ties keep order
    spent, weight, lam = Fraction(0), Fraction(0), Fraction(0)
    for n, key in enumerate(order):  # bounded: one pass per marginal
        spent += floor[key]
        weight += weights[key]
        lam = (budget + spent) / weight
        following = order[n + 1] if n + 1 < len(order) else None
        if following is None or lam <= floor[following] / weights[following]:
            break
    return {k: max(floor[k], lam * weights[k]) - floor[k] for k in weights}


def floored_groups(cells: dict[K, int], floors: dict[K, Fraction], chosen: list[K],
                   budget: Fraction | int) -> list[tuple[bool, list[K], Fraction]]:
    """:func:`allocation_with_floors` over the ``chosen`` marginals (c^(2/3) weights, cell
    counts ``cells``) as groups of equal extra per marginal: (whether its marginals held a
    floor, the marginals, the group's extra in all), pairs' groups first, each kind by cell
    count; marginals whose extra is 0 are left out. The groups' extras add up to ``budget``.

    >>> cells = {(0,): 8, (1,): 27, (0, 1): 216}  # weights 4, 9 and 36
    >>> floors = {(0,): Fraction(1, 10), (1,): Fraction(1, 10)}
    >>> [(held, keys, str(rho)) for held, keys, rho in floored_groups(
    ...     cells, floors, [(0,), (1,), (0, 1)], Fraction(1, 2))]
    [(False, [(0, 1)], '12/25'), (True, [(1,)], '1/50')]
    """
    weight = {k: allocation_weight(cells[k]) for k in chosen}
    extra = allocation_with_floors(weight, {k: floors[k] for k in chosen if k in floors},
                                   budget)
    groups: dict[tuple[bool, int, Fraction], list[K]] = {}
    for key in chosen:
        if extra[key] > 0:
            groups.setdefault((key in floors, cells[key], extra[key]), []).append(key)
    return [(held, keys, extra[keys[0]] * len(keys))
            for (held, _, _), keys in sorted(groups.items())]


def greedy_select_with_one_ways(scores: dict[tuple[int, int], float],
                                cells: dict[tuple[int, int], int], one_way_cells: list[int],
                                rho: Fraction, variance_ratio: Callable[[float], float]
                                ) -> list[tuple[int, int]]:
    """PrivSyn's greedy rule priced as PrivSyn prices a publication that holds the 1-ways
    too: a candidate set's kept pairs share ``rho`` (the 1-ways' and the pairs' budget) by
    c^(2/3) with the 1-ways (their weights in W, their floors left out), pair i's expected
    L1 noise sqrt(2/pi) c_i sqrt(ratio(rho_i) / (2 rho_i)) with rho_i = rho w_i / W, where
    ``variance_ratio`` gives the variance of the noise a marginal at rho_i carries over its
    Gaussian's 1 / (2 rho_i)."""
    weight = {p: float(allocation_weight(c)) for p, c in cells.items()}
    base = sum(float(allocation_weight(c)) for c in one_way_cells)
    scale = math.sqrt(2 / math.pi)

    def total_error(selected: list[tuple[int, int]]) -> float:
        total = base + sum(weight[p] for p in selected)
        noise = 0.0
        for p in selected:
            rho_p = float(rho) * weight[p] / total
            noise += scale * cells[p] * math.sqrt(variance_ratio(rho_p) / (2 * rho_p))
        return sum(v for p, v in scores.items() if p not in selected) + noise

    return greedy_by_error(list(scores), total_error)
