import math
from fractions import Fraction

import pytest

from feddpsyn.dp.accounting import eps_delta_to_rho, gaussian_rho, gaussian_sigma2, rho_to_eps


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 2.0, 8.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-9])
def test_rho_from_eps_converts_back_within_budget(eps, delta):
    rho = eps_delta_to_rho(eps, delta)
    assert isinstance(rho, Fraction)
    assert rho_to_eps(rho, delta) <= eps
    # ... and is not needlessly small: a slightly larger rho would exceed eps.
    assert rho_to_eps(rho * Fraction(1001, 1000), delta) > eps


def test_cks_conversion_is_never_worse_than_the_simple_bound():
    for rho in (1e-4, 1e-2, 0.5, 3.0):
        simple = rho + 2 * math.sqrt(rho * math.log(1e5))
        assert rho_to_eps(rho, 1e-5) <= simple * (1 + 1e-8)


def test_conversion_is_a_valid_bound_at_some_order():
    """Recompute delta at the reported eps with an independent order scan: it must be <= delta."""
    rho, delta = 0.03, 1e-5
    eps = rho_to_eps(rho, delta)
    from scipy.optimize import minimize_scalar

    # CKS20 Corollary 13 in log form, minimised over the order a by an independent method.
    def log_delta(a: float) -> float:
        return (a - 1) * (a * rho - eps) + a * math.log1p(-1 / a) - math.log(a - 1)

    best = minimize_scalar(log_delta, bounds=(1.0001, 1e4), method="bounded",
                           options={"xatol": 1e-10})
    assert best.fun <= math.log(delta)


def test_gaussian_calibration_is_exact():
    rho = Fraction(1, 50)
    sigma2 = gaussian_sigma2(rho, sensitivity2=15)
    assert sigma2 == Fraction(15 * 50, 2)
    assert gaussian_rho(sigma2, 15) == rho


def test_bad_arguments():
    with pytest.raises(ValueError):
        eps_delta_to_rho(0, 1e-5)
    with pytest.raises(ValueError):
        rho_to_eps(0.1, 0)
    with pytest.raises(ValueError):
        gaussian_sigma2(Fraction(0), 1)
