"""How a session shares its budget when the operator does not say: the curator's rule.

PrivSyn (Zhang et al. 2021, Section 4.3) shares a publication budget over marginals to
minimise the expected L1 error of the noisy counts: a marginal of c cells with Gaussian noise
of variance 1 / (2 rho_i) has expected L1 error proportional to c / sqrt(rho_i), and the
Lagrangian optimum under sum rho_i = rho is rho_i proportional to c^(2/3).

Our releases give every marginal of one release the same noise (one shape, sensitivity M for
M marginals), so the rule applies to the releases as groups: release g with M_g marginals of
C_g cells in all has error C_g sqrt(M_g / (2 rho_g)), and the same Lagrangian gives rho_g
proportional to (C_g sqrt(M_g))^(2/3) (with one marginal per group, PrivSyn's own rule).
Every selection but ``none`` keeps fixed shares (``DEFAULT_SPLITS``): em's and
noisy-greedy's selections read the noisy 1-ways (the expected counts of InDif, the row
bound), so the 1-ways are released before the pairs are known. em keeps PrivSyn's tenth;
noisy-greedy gives them 30% (measured against the curator's c^(2/3) share on small tables:
``bench/results/gap_sources.md``).

>>> split = default_split("none", [10, 10], [100])
>>> round(split["one_way"], 3), round(split["two_way"], 3)
(0.301, 0.699)
"""

from __future__ import annotations

import math

from params.modes import SelectionMode
from params.selection_plan import DEFAULT_SPLITS

__all__ = ["default_split", "group_weight"]

# The shares are floats (``params.release_spec.split_share`` rounds them down to 1e-12);
# the 1-ways' is rounded down here to 1e-9 and the 2-ways take the rest, so that they add
# up to exactly 1.
_SHARE_GRID = 10 ** 9


def group_weight(cells: list[int]) -> float:
    """(C sqrt(M))^(2/3) of a release of ``cells`` (each marginal's cell count)."""
    return (sum(cells) * math.sqrt(len(cells))) ** (2 / 3)


def default_split(selection: SelectionMode | str, one_way_cells: list[int],
                  two_way_cells: list[int]) -> dict[str, float]:
    """The budget's shares by release (module docstring)."""
    if selection != SelectionMode.NONE:
        return dict(DEFAULT_SPLITS[SelectionMode(selection)])
    one, two = group_weight(one_way_cells), group_weight(two_way_cells)
    units = math.floor(one / (one + two) * _SHARE_GRID)
    # Integer units of 1e-9, so the two shares' decimals add up to exactly 1.
    return {"one_way": units / _SHARE_GRID, "two_way": (_SHARE_GRID - units) / _SHARE_GRID}
