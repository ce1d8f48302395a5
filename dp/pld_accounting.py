"""A session's privacy, exactly: privacy-loss distributions of the noises it publishes.

Every noise a session adds is known exactly before any data arrives: a centred sum of
uniforms (the joint noise, ``crypto.joint_noise``), a discrete Gaussian (the two servers'
noise: each view is protected by the other server's Gaussian alone), or a pure eps-DP step
(a permute-and-flip round of ``em``). Each is a *mechanism* of the public privacy record
(``docs/privacy.md``, "The privacy record"): its noise, and how many of its counts one record
of the union moves by 1 (add/remove neighbours, sensitivity 1 per count).

This module turns such a record into Google's ``dp-accounting`` privacy-loss distributions
(PLDs, Koskela et al. 2020; Doroshenko et al. 2022) and composes them, with the library's
*pessimistic* estimate throughout: every privacy loss is rounded up to the discretisation
grid, so the composed hockey-stick curve is an upper bound on the exact one and
:func:`epsilon_of` never under-reports. Adaptive composition holds for PLDs of dominating
pairs (Zhu, Dong, Wang 2022): each mechanism here is a count query with fixed noise, whose
pair (noise, noise + 1) dominates every neighbouring pair of its count (the noises are
symmetric, so removing a record gives the same loss distribution), and a pure eps-DP step
is dominated by randomized response at eps.

Conservative conversions:

* a discrete Gaussian's sigma is the float just below sqrt(sigma2) (less noise: more loss);
* the library truncates a discrete Gaussian's support where its mass beyond is below 1e-30
  and counts the rest as infinite loss, so that tail is inside the reported delta;
* a sum of uniforms is exact: its integer pmf (``JointNoiseShape.counts``) goes in as
  log-masses; the outputs only one neighbour can produce (its edges) are infinite loss,
  counted in full in delta, so no conditioning is needed here;
* a release decided at run time enters as its Gaussian bound (:class:`GaussianBound`): the
  Gaussian mechanism with mu = sqrt(2 rho) rounded up, composed with a reveal of probability
  eta (``dp.gaussian_domination`` proves each run-time noise within it).

Tightness is the point of this module: the zCDP conversion (``dp.accounting``) leaves about
a tenth of the noise scale unspent at eps near 1; the plan calibrates its budget against
:func:`epsilon_of` instead (``params.session_plan``), and anyone can re-account a published
record with the library alone.

>>> record = [DiscreteGaussian("one_way", Fraction(50), 10)]
>>> 0.9 < epsilon_of(record, 1e-5) < 2.5
True
>>> epsilon_of([PureStep("round", 0.5, 2)], 1e-9) <= 1.0
True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction

from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld.common import DifferentialPrivacyParameters

from feddpsyn.dp.gaussian_domination import mu_at_least
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape

__all__ = ["UniformSum", "DiscreteGaussian", "PureStep", "GaussianBound", "Mechanism", "GRID",
           "mechanism_pld", "session_pld", "epsilon_of", "delta_of", "calibrate", "grid_for"]

# The PLDs' loss grid. Each composition's pessimistic rounding costs at most one grid step of
# loss per mechanism, so a session of ~200 counts loses at most ~0.02 in eps to it; 1e-4 is
# the library's default and keeps a session's accounting under a second.
GRID = 1e-4


@dataclass(frozen=True)
class UniformSum:
    """A centred sum of ``uniforms`` iid uniforms on {0..2^bits - 1} on each of
    ``counts_per_record`` counts a record moves."""

    name: str
    uniforms: int
    bits: int
    counts_per_record: int


@dataclass(frozen=True)
class DiscreteGaussian:
    """N_Z(0, sigma2) on each of ``counts_per_record`` counts a record moves."""

    name: str
    sigma2: Fraction
    counts_per_record: int


@dataclass(frozen=True)
class PureStep:
    """``count`` steps, each pure ``epsilon``-DP (a permute-and-flip round)."""

    name: str
    epsilon: float
    count: int


@dataclass(frozen=True)
class GaussianBound:
    """A release decided at run time, dominated whatever the run time decides by the Gaussian
    mechanism G_mu, mu = sqrt(2 rho) (sensitivity 1), composed with f_(0, eta), the mechanism
    that reveals the record with probability ``eta`` (``dp.gaussian_domination``)."""

    name: str
    rho: Fraction
    eta: float


Mechanism = UniformSum | DiscreteGaussian | PureStep | GaussianBound


@functools.lru_cache(maxsize=256)
def _uniform_sum_pld(uniforms: int, bits: int, grid: float) -> pld_lib.PrivacyLossDistribution:
    counts = JointNoiseShape(uniforms, bits).counts()
    log_total = uniforms * bits * math.log(2)
    log_pmf = {x: math.log(c) - log_total for x, c in enumerate(counts) if c}
    shifted = {x + 1: v for x, v in log_pmf.items()}
    return pld_lib.from_two_probability_mass_functions(
        log_pmf, shifted, pessimistic_estimate=True, value_discretization_interval=grid)


@functools.lru_cache(maxsize=256)
def _gaussian_pld(sigma2: Fraction, grid: float) -> pld_lib.PrivacyLossDistribution:
    sigma = math.sqrt(float(sigma2))
    if sigma * sigma > sigma2:  # the float below sqrt(sigma2): never more noise than drawn
        sigma = math.nextafter(sigma, 0.0)
    while sigma * sigma > sigma2:  # bounded: float rounding is off by at most a few ulps
        sigma = math.nextafter(sigma, 0.0)
    return pld_lib.from_discrete_gaussian_mechanism(
        sigma, sensitivity=1, pessimistic_estimate=True, value_discretization_interval=grid)


@functools.lru_cache(maxsize=256)
def _pure_pld(epsilon: float, grid: float) -> pld_lib.PrivacyLossDistribution:
    return pld_lib.from_privacy_parameters(DifferentialPrivacyParameters(epsilon, 0.0),
                                           value_discretization_interval=grid)


@functools.lru_cache(maxsize=256)
def _bound_pld(rho: Fraction, eta: float, grid: float) -> pld_lib.PrivacyLossDistribution:
    # sigma = 1 / mu with mu rounded up: the bound's Gaussian never has more noise than stated.
    sigma = 1 / mu_at_least(rho)
    while sigma * sigma * 2 * rho > 1:  # bounded: float rounding is off by a few ulps
        sigma = math.nextafter(sigma, 0.0)
    gaussian = pld_lib.from_gaussian_mechanism(
        sigma, sensitivity=1, pessimistic_estimate=True, value_discretization_interval=grid)
    if eta <= 0:
        return gaussian
    reveal = pld_lib.from_privacy_parameters(DifferentialPrivacyParameters(0.0, float(eta)),
                                             value_discretization_interval=grid)
    return gaussian.compose(reveal)


def mechanism_pld(mechanism: Mechanism, grid: float = GRID) -> pld_lib.PrivacyLossDistribution:
    """The composed PLD of one mechanism of the record (all of its counts or steps)."""
    if isinstance(mechanism, UniformSum):
        one, times = _uniform_sum_pld(mechanism.uniforms, mechanism.bits, grid), \
            mechanism.counts_per_record
    elif isinstance(mechanism, DiscreteGaussian):
        one, times = _gaussian_pld(Fraction(mechanism.sigma2), grid), mechanism.counts_per_record
    elif isinstance(mechanism, PureStep):
        one, times = _pure_pld(float(mechanism.epsilon), grid), mechanism.count
    elif isinstance(mechanism, GaussianBound):
        one, times = _bound_pld(Fraction(mechanism.rho), float(mechanism.eta), grid), 1
    else:
        raise TypeError(f"not a mechanism of the privacy record: {mechanism!r}")
    if times < 1:
        raise ValueError(f"mechanism {mechanism.name!r} moves no count: nothing to account")
    return one if times == 1 else one.self_compose(times)


def session_pld(mechanisms: list[Mechanism] | tuple[Mechanism, ...],
                grid: float = GRID) -> pld_lib.PrivacyLossDistribution:
    """The PLD of every mechanism of a session, composed (a record's loss adds up)."""
    if not mechanisms:
        raise ValueError("a session with no mechanism publishes nothing")
    plds = [mechanism_pld(m, grid) for m in mechanisms]
    total = plds[0]
    for other in plds[1:]:
        total = total.compose(other)
    return total


def grid_for(epsilon: float) -> float:
    """The loss grid for a session planned at ``epsilon``: :data:`GRID`, coarser at a large
    eps (a PLD's support spans the losses up to about eps, so a fixed grid costs time linear
    in eps; rounding each count's loss up by at most 5e-5 eps keeps the looseness below
    about 1% of eps for 200 counts). Any grid is sound: the rounding is pessimistic."""
    return max(GRID, float(epsilon) * 5e-5)


def epsilon_of(mechanisms: Iterable[Mechanism], delta: float, grid: float = GRID) -> float:
    """The session's eps at ``delta`` (pessimistic: an upper bound on the exact eps)."""
    if not 0 < delta < 1:
        raise ValueError("delta must lie in (0, 1)")
    return _epsilon_of(tuple(mechanisms), float(delta), float(grid))


# The ledger and the status table ask for the same records again; a record is a tuple of
# frozen mechanisms, so its accounted eps is kept once computed.
@functools.lru_cache(maxsize=1024)
def _epsilon_of(mechanisms: tuple[Mechanism, ...], delta: float, grid: float) -> float:
    return float(session_pld(mechanisms, grid).get_epsilon_for_delta(delta))


def delta_of(mechanisms: list[Mechanism] | tuple[Mechanism, ...], epsilon: float,
             grid: float = GRID) -> float:
    """The session's delta at ``epsilon`` (pessimistic: an upper bound on the exact delta)."""
    return float(session_pld(mechanisms, grid).get_delta_for_epsilon(epsilon))


def calibrate(epsilon_at: Callable[[Fraction], float], epsilon: float, start: Fraction, *,
              low: float = 0.985, steps: int = 8) -> tuple[Fraction, float]:
    """The largest scale s found (within ``steps`` trials) with ``epsilon_at(s) <= epsilon``,
    and its eps, aiming at ``[low, 1] x epsilon``.

    ``epsilon_at`` maps a budget scale (a zCDP rho standing for the whole plan) to the plan's
    accounted eps; it is increasing in s. Each trial moves s by the square of the eps ratio
    (a Gaussian's eps is about linear in sqrt(rho)), then bisects once a bracket exists.
    Every returned scale was accounted, so the result is sound whatever the shape of
    ``epsilon_at``; a start whose eps is already above ``epsilon`` is shrunk until one is not
    (fails closed if none is found)."""
    if epsilon <= 0 or start <= 0:
        raise ValueError("need epsilon > 0 and a positive starting scale")
    best: tuple[Fraction, float] | None = None
    below, above = None, None  # the bracket: largest scale within eps, smallest above it
    scale = Fraction(start)
    for _ in range(steps):  # bounded: each trial accounts one plan
        eps = epsilon_at(scale)
        if eps <= epsilon:
            if best is None or scale > best[0]:
                best = (scale, eps)
            below = scale if below is None else max(below, scale)
            if eps >= low * epsilon:
                break
        else:
            above = scale if above is None else min(above, scale)
        if below is not None and above is not None:
            scale = (below + above) / 2
        else:
            ratio = (epsilon * (1 + low) / 2) / max(eps, 1e-12)
            scale = scale * Fraction(ratio * ratio).limit_denominator(10 ** 9)
        scale = Fraction(math.floor(scale * 2 ** 40), 2 ** 40)  # a short rational
    if best is None:
        raise ValueError(f"no budget scale was found within eps {epsilon} "
                         f"({steps} trials from rho {float(start):.4g})")
    return best
