"""The PLD accountant against exact enumeration on tiny sessions, and its calibration."""

import math
from fractions import Fraction

import pytest

from feddpsyn.dp.joint_noise_accounting import JointNoiseShape
from feddpsyn.dp.pld_accounting import (
    GRID,
    DiscreteGaussian,
    PureStep,
    UniformSum,
    calibrate,
    delta_of,
    epsilon_of,
)


def _loss_law(pmf: dict[int, float]) -> dict[float, float]:
    """The exact privacy-loss law of a count with noise ``pmf`` (neighbour shifted by 1):
    loss ln(P(x) / P(x - 1)) under P, +inf where only this side reaches."""
    law: dict[float, float] = {}
    for x, p in pmf.items():
        q = pmf.get(x - 1, 0.0)
        loss = math.inf if q == 0 else math.log(p / q)
        law[loss] = law.get(loss, 0.0) + p
    return law


def _compose(a: dict[float, float], b: dict[float, float]) -> dict[float, float]:
    out: dict[float, float] = {}
    for la, pa in a.items():
        for lb, pb in b.items():
            key = la + lb
            out[key] = out.get(key, 0.0) + pa * pb
    return out


def _exact_delta(law: dict[float, float], eps: float) -> float:
    return sum(p if loss == math.inf else p * max(0.0, 1 - math.exp(eps - loss))
               for loss, p in law.items())


def _uniform_sum_pmf(uniforms: int, bits: int) -> dict[int, float]:
    counts = JointNoiseShape(uniforms, bits).counts()
    total = 2 ** (uniforms * bits)
    return {x: c / total for x, c in enumerate(counts)}


def _gaussian_pmf(sigma2: float, reach: int) -> dict[int, float]:
    weights = {x: math.exp(-x * x / (2 * sigma2)) for x in range(-reach, reach + 1)}
    norm = sum(weights.values())
    return {x: w / norm for x, w in weights.items()}


def _pure_law(eps: float) -> dict[float, float]:
    # Randomized response at eps: the dominating pair of any pure eps-DP step.
    return {eps: math.exp(eps) / (1 + math.exp(eps)), -eps: 1 / (1 + math.exp(eps))}


TINY = [UniformSum("u", 2, 2, 2), DiscreteGaussian("g", Fraction(3, 2), 1), PureStep("p", 0.3, 2)]


def _tiny_law() -> dict[float, float]:
    law = {0.0: 1.0}
    uniform = _loss_law(_uniform_sum_pmf(2, 2))
    gaussian = _loss_law(_gaussian_pmf(1.5, 30))  # mass beyond 30 is below e^-300
    for part in (uniform, uniform, gaussian, _pure_law(0.3), _pure_law(0.3)):
        law = _compose(law, part)
    return law


@pytest.mark.parametrize("eps", [0.0, 0.5, 1.0, 2.0, 3.0])
def test_the_accountant_bounds_the_exact_delta_of_a_tiny_session_and_is_tight(eps):
    exact = _tiny_law()
    accounted = delta_of(TINY, eps)
    # Pessimistic: never below the exact hockey-stick divergence ...
    assert accounted >= _exact_delta(exact, eps) - 1e-12
    # ... and no looser than the loss grid allows (one step of loss per composed count).
    steps = 2 + 1 + 2
    assert accounted <= _exact_delta(exact, eps - steps * GRID) + 1e-12


def test_epsilon_at_delta_is_the_smallest_eps_whose_exact_delta_fits():
    exact = _tiny_law()
    # Above the two coins' edges (mass 0.121): a finite eps exists.
    eps = epsilon_of(TINY, 0.2)
    assert 0 < eps < math.inf
    assert _exact_delta(exact, eps) <= 0.2 + 1e-12
    assert _exact_delta(exact, eps - 0.01) > 0.2  # tight: a little less eps does not hold


def test_a_uniform_sums_edge_is_infinite_loss_inside_delta():
    # Two 1-bit coins: the output only one neighbour reaches has mass 1/4.
    assert delta_of([UniformSum("coins", 2, 1, 1)], 50.0) == pytest.approx(0.25, rel=1e-9)


def test_pure_steps_compose_as_randomized_response():
    # Two eps-DP steps at delta 0 are exactly 2 eps-DP (basic composition is tight for RR).
    assert delta_of([PureStep("r", 0.4, 2)], 0.8 + 2 * GRID) == pytest.approx(0.0, abs=1e-12)
    assert delta_of([PureStep("r", 0.4, 2)], 0.79) > 0


def test_calibration_finds_the_largest_scale_within_eps_and_stays_sound():
    def epsilon_at(rho):  # a Gaussian-like curve with a flat step, increasing
        return 2 * math.sqrt(float(rho)) + (0.01 if rho > Fraction(1, 5) else 0.0)

    scale, eps = calibrate(epsilon_at, 1.0, Fraction(1, 10))
    assert eps == epsilon_at(scale) <= 1.0
    assert eps >= 0.985


def test_calibration_fails_closed_when_no_scale_fits():
    with pytest.raises(ValueError, match="no budget scale"):
        calibrate(lambda rho: 5.0, 1.0, Fraction(1, 10), steps=3)
