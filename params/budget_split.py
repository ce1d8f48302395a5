"""How a session shares its budget when the operator does not say: the curator's rule.

PrivSyn (Zhang et al. 2021, Section 4.3) shares a publication budget over marginals to
minimise the expected L1 error of the noisy counts: a marginal of c cells with Gaussian noise
of variance 1 / (2 rho_i) has expected L1 error proportional to c / sqrt(rho_i), and the
Lagrangian optimum under sum rho_i = rho is rho_i proportional to c^(2/3).

Our releases give every marginal of one release the same noise (one shape, sensitivity M for
M marginals), so the rule applies to the releases as groups: release g with M_g marginals of
C_g cells in all has error C_g sqrt(M_g / (2 rho_g)), and the same Lagrangian gives rho_g
proportional to (C_g sqrt(M_g))^(2/3) (with one marginal per group, PrivSyn's own rule).
em's and noisy-greedy's selections read the noisy 1-ways (the expected counts of InDif, the
row bound), so the 1-ways are released before the pairs are known. em keeps PrivSyn's fixed
tenth (``DEFAULT_SPLITS``). noisy-greedy tops its 1-ways up after the selection to their
c^(2/3) share of the publication (``params.run_time``, the 1-way top-up), so its first
1-way release matters twice: its precision is what the scores' expected counts are made of,
and it is a floor the top-up cannot take back. Where the table is small against its noise
(few rows, many cells, small eps) the scores need precise 1-ways and few pairs are kept, so
the 1-ways' final share is large anyway: the first release takes 30%. Where the table is
large against its noise, most pairs are kept, the 1-ways' c^(2/3) share is 3-7%, and a 30%
floor takes a quarter of the budget from the pairs: the first release then takes only what
the scores need. :func:`first_one_way_share` sizes it so that the release's noise per count
is at most ``SCORE_PRECISION`` of a mean 1-way cell's count at ``max_rows``, within 10-30%,
from public inputs only (the schema, eps, delta and the stated ``max_rows``). Measured
against the fixed 30% on the servers' plan, 5 repeats (``docs/privacy-plan.md``, "The first
1-way release").

>>> split = default_split("none", [10, 10], [100])
>>> round(split["one_way"], 3), round(split["two_way"], 3)
(0.301, 0.699)
"""

from __future__ import annotations

import math

from feddpsyn.dp.accounting import eps_delta_to_rho
from feddpsyn.params.modes import SelectionMode
from feddpsyn.params.selection_plan import DEFAULT_SPLITS

__all__ = ["FIRST_ONE_WAY_RANGE", "SCORE_PRECISION", "default_split", "first_one_way_share",
           "group_weight"]

# noisy-greedy's first 1-way release: its noise per count, relative to a mean 1-way cell's
# count at max_rows, that the scores' expected counts can take; and the share's range.
SCORE_PRECISION = 0.06
FIRST_ONE_WAY_RANGE = (0.1, 0.3)

# The shares are floats (``params.release_spec.split_share`` rounds them down to 1e-12);
# the 1-ways' is rounded down here to 1e-9 and the 2-ways take the rest, so that they add
# up to exactly 1.
_SHARE_GRID = 10 ** 9


def group_weight(cells: list[int]) -> float:
    """(C sqrt(M))^(2/3) of a release of ``cells`` (each marginal's cell count)."""
    return (sum(cells) * math.sqrt(len(cells))) ** (2 / 3)


def first_one_way_share(one_way_cells: list[int], epsilon: float, delta: float,
                        max_rows: int) -> float:
    """noisy-greedy's first 1-way release's share (module docstring): the least share s at
    which the release's Gaussian (d 1-ways, sensitivity d, variance d / (2 rho s)) has a
    standard deviation per count of at most ``SCORE_PRECISION`` x max_rows / (mean cells),
    with rho the zCDP conversion of (eps, delta) (a public estimate of the budget the
    calibration refines), clamped to ``FIRST_ONE_WAY_RANGE`` and rounded up to 1e-3.

    >>> [first_one_way_share([2] * 10, 1.0, 1e-5, rows) for rows in (100, 10 ** 6)]
    [0.3, 0.1]
    """
    low, high = FIRST_ONE_WAY_RANGE
    d = len(one_way_cells)
    mean_cells = sum(one_way_cells) / d
    rho = float(eps_delta_to_rho(epsilon, delta))
    target_sd = SCORE_PRECISION * max(max_rows, 1) / mean_cells
    share = d / (2 * rho * target_sd ** 2)
    return min(high, max(low, math.ceil(share * 1000) / 1000))


def default_split(selection: SelectionMode | str, one_way_cells: list[int],
                  two_way_cells: list[int], epsilon: float | None = None,
                  delta: float | None = None,
                  max_rows: int | None = None) -> dict[str, float]:
    """The budget's shares by release (module docstring); noisy-greedy's depend on the
    budget and ``max_rows`` (:func:`first_one_way_share`)."""
    if selection == SelectionMode.NOISY_GREEDY:
        if epsilon is None or delta is None or max_rows is None:
            raise ValueError("noisy-greedy's split depends on epsilon, delta and max_rows")
        fixed = DEFAULT_SPLITS[SelectionMode.NOISY_GREEDY]
        one = first_one_way_share(one_way_cells, epsilon, delta, max_rows)
        return {"one_way": one, "selection": fixed["selection"],
                "two_way": round(1 - fixed["selection"] - one, 12)}
    if selection != SelectionMode.NONE:
        return dict(DEFAULT_SPLITS[SelectionMode(selection)])
    one, two = group_weight(one_way_cells), group_weight(two_way_cells)
    units = math.floor(one / (one + two) * _SHARE_GRID)
    # Integer units of 1e-9, so the two shares' decimals add up to exactly 1.
    return {"one_way": units / _SHARE_GRID, "two_way": (_SHARE_GRID - units) / _SHARE_GRID}
