"""Privacy loss across sessions: the published privacy records of every session one table
joined, composed into one (epsilon, delta) (an owner's lifetime budget: ``clients.odometer``,
and the key server's cap per owner: ``keyserver.owner_caps``).

Claim: a table that joined sessions S_1..S_n, each publishing a record whose mechanisms M_i
(with ``accounting: pld``) are (eps, delta_i(eps) + r_i)-DP with r_i its reserved delta
terms, is (eps, delta_PLD(eps) + sum r_i)-DP over all n, where delta_PLD is the hockey-stick
curve of every M_i composed (adaptive composition of dominating pairs, as within one
session: ``dp.pld_accounting``). So the composed eps at delta is the PLD's eps at
delta - sum r_i, pessimistic like every eps this project reports. A record accounted
``rdp`` (planned before the PLD calibration) lists only part of its noise as mechanisms; it
is composed by its own (epsilon, delta) with basic composition (eps and delta add), which
is sound for any mechanism. Nothing here sums the eps of PLD records: two default
Fed-Heart-Disease sessions at eps 1 compose to about 1.48, where a sum says 2.

>>> from feddpsyn.common import wire
>>> one = wire.PrivacyRecord(epsilon=1.0, delta=1e-5, delta_reserved=0.0, accounting="pld",
...                          mechanisms=[wire.DiscreteGaussianMechanism(
...                              name="one_way", sigma2="40", counts_per_record=4)])
>>> single = composed_epsilon([one], 1e-5)
>>> single < composed_epsilon([one, one], 1e-5) < 2 * single
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from feddpsyn.common import wire
from feddpsyn.dp.pld_accounting import (
    DiscreteGaussian,
    GaussianBound,
    Mechanism,
    PureStep,
    UniformSum,
    grid_for,
    session_pld,
)

__all__ = ["record_mechanisms", "composed_epsilon", "composed_delta_reserved"]


def record_mechanisms(record: wire.PrivacyRecord) -> list[Mechanism]:
    """The accountant's mechanisms a published record lists."""
    out: list[Mechanism] = []
    for m in record.mechanisms:
        if isinstance(m, wire.UniformSumMechanism):
            out.append(UniformSum(m.name, m.uniforms, m.bits, m.counts_per_record))
        elif isinstance(m, wire.DiscreteGaussianMechanism):
            out.append(DiscreteGaussian(m.name, Fraction(m.sigma2), m.counts_per_record))
        elif isinstance(m, wire.GaussianBoundMechanism):
            out.append(GaussianBound(m.name, Fraction(m.rho), m.eta))
        else:
            out.append(PureStep(m.name, m.epsilon, m.count))
    return out


def composed_delta_reserved(records: Sequence[wire.PrivacyRecord]) -> float:
    """The delta the records hold outside their mechanisms, added up (rounded up)."""
    return math.fsum(r.delta_reserved for r in records) * (1 + 1e-12)


def composed_epsilon(records: Sequence[wire.PrivacyRecord], delta: float) -> float:
    """The eps at ``delta`` of every session of ``records`` together (module docstring);
    inf when the reserved terms and the rdp records' deltas leave no delta for the rest."""
    if not 0 < delta < 1:
        raise ValueError("delta must lie in (0, 1)")
    if not records:
        return 0.0
    exact = [r for r in records if r.accounting == "pld" and r.mechanisms]
    basic = [r for r in records if not (r.accounting == "pld" and r.mechanisms)]
    left = delta - composed_delta_reserved(exact) - math.fsum(r.delta for r in basic) * (
        1 + 1e-12)
    if left <= 0:
        return math.inf
    eps_basic = math.fsum(r.epsilon for r in basic)
    if not exact:
        return eps_basic
    mechanisms = [m for r in exact for m in record_mechanisms(r)]
    grid = grid_for(max(r.epsilon for r in exact))
    return float(session_pld(mechanisms, grid).get_epsilon_for_delta(left)) + eps_basic
