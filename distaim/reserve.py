"""The delta a DistAIM session keeps for its computations in MPC, and the one check of it:
when the session is created, on the least any run of its plan adds, and when the run ends,
on what it added.

Design concern: **a session that cannot meet its reserve is refused when it is created, not
after its MPC run.** The reserve is delta / 1000 (``distaim.plan.delta_reserve``). What a run
spends of it is (1 + e^eps) times the total variation between its computations and the ideal
mechanisms (the coupling argument of ``distaim.secure_noise``), in three parts:

* the validation's openings (``distaim.validation``): marginals x 2^-64, fixed by the plan;
* the exponential mechanism's sampler (``distaim.secure_selection``): per selection,
  candidates x ((2 r + 2) 2^-56 + 2^-60), r the bits of the clamped score gap, which grow as
  the round's eps falls and the scores' sensitivity rises. The plan fixes a floor: a
  fixed-rounds plan selects exactly T times, an annealing one at least once; every pool
  holds the workload's 1-ways (measured first, so inside the model's cliques,
  ``synthesis.aim``), so a selection has at least n_1 candidates and a sensitivity of at
  least the largest 1-way weight times 2^g; and no selection counted here has an eps above
  eps_0 <= sqrt(8 (1 - alpha) rho / T) (the first round's; a fixed-rounds plan's last
  round's is smaller, and annealing doubles later ones, so only the first is counted);
* the discrete Gaussian sampler (``distaim.secure_noise``): about 1e-19 per noisy cell, four
  orders below one selection, and its plan for a large sigma^2 takes seconds to build; it is
  left to the run's check.

For a fixed-rounds plan the floor is about half what a run adds (a run's pools hold the
whole completion, not only the 1-ways), so creation starts refusing within about one unit of
eps of where runs start failing; for an annealing plan, which counts one selection, about a
tenth. A run over the reserve still fails closed (``distaim.party``, exit 7). A refusal
names its remedy: the largest epsilon at which the same check passes (searched on the same
function), and the delta whose reserve would cover the extra delta found.

>>> extra = check_reserve(1.0, 1e-5, Fraction(1, 10**8), lambda eps: Fraction(1, 10**15))
>>> float(extra) < 1e-14
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import ROUND_DOWN, ROUND_UP, Decimal
from fractions import Fraction
from typing import TYPE_CHECKING

from feddpsyn.distaim.budget import session_rho
from feddpsyn.distaim.secure_selection import SelectionPlan
from feddpsyn.distaim.validation import validation_tv
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.synthesis.aim import ALPHA, workload_weights

if TYPE_CHECKING:
    from feddpsyn.distaim.plan import AnnealingPlan, FixedRoundsPlan

__all__ = ["ReserveExceeded", "tv_to_delta", "least_tv", "check_reserve", "check_plan"]


class ReserveExceeded(ValueError):
    """The extra delta of a session's computations in MPC exceeds its reserve."""


def tv_to_delta(epsilon: float) -> Fraction:
    """1 + e^eps, rounded up: a total variation times this is extra delta."""
    return 1 + Fraction(math.exp(epsilon) * (1 + 1e-12))


def least_tv(plan: FixedRoundsPlan | AnnealingPlan, epsilon: float | None = None) -> Fraction:
    """The total variation every run of ``plan`` adds at least (module docstring); at
    ``epsilon``, that of the same plan at another epsilon (its rho converted again)."""
    rho = Fraction(plan.rho) if epsilon is None else session_rho(epsilon, plan.delta)
    workload = [tuple(c) for c in plan.workload]
    cliques = MarginalLayout.for_workload(plan.domain_sizes, workload).cliques
    one_ways = [c for c in cliques if len(c) == 1]
    weight = int(max(workload_weights(one_ways, workload)))
    planned = plan.rounds if plan.rounds is not None else 16 * len(plan.domain_sizes)
    selections = plan.rounds if plan.rounds is not None else 1
    eps_0 = Fraction(math.sqrt(float(8 * (1 - ALPHA) * rho / planned))) * Fraction(
        10**9 + 1, 10**9)
    per_selection = SelectionPlan.build(eps_0, weight << plan.score_grid_bits,
                                        len(one_ways)).tv_bound
    return validation_tv(len(cliques)) + selections * per_selection


def _significant(x: float, rounding: str) -> float:
    """x to three significant digits, rounded down or up."""
    d = Decimal(repr(x))
    return float(d.quantize(Decimal(1).scaleb(d.adjusted() - 2), rounding=rounding))


def _largest_epsilon(reserve: Fraction, tv_at: Callable[[float], Fraction],
                     epsilon: float) -> float | None:
    """The largest eps (three significant digits) with tv_at(eps) (1 + e^eps) <= reserve,
    searched down from ``epsilon``; None if none fits (even eps -> 0 doubles the TV)."""
    tvs: dict[float, Fraction] = {}

    def tv(e: float) -> Fraction:
        if e not in tvs:
            tvs[e] = tv_at(e)
        return tvs[e]

    e = epsilon
    for _ in range(8):  # tv_at grows slowly as eps falls: a few steps settle
        ratio = (reserve / tv(e) - 1) / Fraction(1 + 1e-12)
        if ratio <= 1:
            return None
        e = _significant(min(math.log(ratio), e * (1 - 1e-3)), ROUND_DOWN)
        if tv(e) * tv_to_delta(e) <= reserve:
            return e
    return None


def check_reserve(epsilon: float, delta: float | None, reserve: Fraction,
                  tv_at: Callable[[float], Fraction],
                  source: str = "the total variation of the validation and samplers in MPC is"
                  ) -> Fraction:
    """The extra delta tv_at(epsilon) (1 + e^eps) if it is within ``reserve``; else
    ``ReserveExceeded`` naming the remedies: the largest epsilon at which it fits (tv_at
    gives the total variation at another epsilon), and the delta whose reserve (the same
    share of it) covers the extra delta found, where that is below 1."""
    tv = tv_at(epsilon)
    extra = tv * tv_to_delta(epsilon)
    if extra <= reserve:
        return extra
    remedies = []
    largest = _largest_epsilon(reserve, tv_at, epsilon)
    if largest is not None:
        remedies.append(f"lower epsilon to at most {largest:g}")
    if delta is not None:
        needed = _significant(float(Fraction(delta) * extra / reserve), ROUND_UP)
        if needed < 1:
            remedies.append(f"raise delta to at least {needed:g}")
    remedy = " or ".join(remedies) or "no epsilon or delta fits this plan"
    raise ReserveExceeded(
        f"extra delta {float(extra):.3e} exceeds the reserve {float(reserve):.3e}: {source} "
        f"{float(tv):.3e}, times 1 + e^{epsilon:g}; {remedy}")


def check_plan(plan: FixedRoundsPlan | AnnealingPlan) -> Fraction:
    """``check_reserve`` on the least any run of ``plan`` adds: what a session is refused on
    at creation (``distaim.plan.build_plan``)."""
    return check_reserve(plan.epsilon, plan.delta, Fraction(plan.delta_reserve),
                         lambda eps: least_tv(plan, None if eps == plan.epsilon else eps),
                         source="the validation and samplers in MPC of any run of this "
                                "plan add a total variation of at least")
