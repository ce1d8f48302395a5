"""Privacy accounting in zero-concentrated DP (zCDP), with conservative conversions.

Every release in feddpsyn adds discrete Gaussian noise, so the natural currency is rho
(zCDP, Bun and Steinke 2016): releases compose by adding their rho, and N_Z(0, sigma2) on a
query of L2 sensitivity Delta costs Delta^2 / (2 sigma2) (Canonne, Kamath, Steinke 2020).

Design concern: **every rounding goes the conservative way.** Budgets are exact
``Fraction``s. The only floating-point step is the zCDP -> (eps, delta) conversion
(CKS20, Proposition 12 / Corollary 13):

    delta = exp((a - 1)(a rho - eps)) / (a - 1) * (1 - 1/a)^a   for any a > 1,

which we solve for eps at a grid of orders a and minimise (any a gives a valid bound, so an
imperfect minimisation only loses tightness). The float result is rounded *up* by a margin far
above double-precision error, and ``eps_delta_to_rho`` rounds rho *down* to a rational and
re-checks the forward conversion.

>>> rho = eps_delta_to_rho(1, Fraction(1, 10**5))
>>> rho_to_eps(rho, Fraction(1, 10**5)) <= 1
True
>>> gaussian_sigma2(Fraction(1, 2), sensitivity2=1)
Fraction(1, 1)
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["rho_to_eps", "eps_delta_to_rho", "gaussian_sigma2", "gaussian_rho"]

# Relative upward margin on the converted epsilon: covers float error (~1e-15 relative)
# with a wide berth, and changes no reported digit that matters.
_EPS_MARGIN = 1e-9
# rho is rounded down to a multiple of 2^-40 (about 1e-12).
_RHO_GRID = 2 ** 40


def _eps_at_order(rho: float, log_inv_delta: float, a: float) -> float:
    return (a * rho
            + (log_inv_delta + (a - 1) * math.log1p(-1 / a) - math.log(a)) / (a - 1))


# The scan's orders: 2000 log-spaced between 1 + 1e-4 and 1 + 1e8.
_ORDERS = tuple(1 + 10 ** (-4 + 12 * i / 2000) for i in range(1, 2001))


@functools.lru_cache(maxsize=64)
def _order_grid(log_inv_delta: float) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The scan's orders a and the part of :func:`_eps_at_order` that does not depend on
    rho, per delta: ``a * rho + c`` is then that function's value bit for bit (the same
    float operations in the same order), for every rho at once. A conversion that searches
    rho at one delta (:func:`eps_delta_to_rho`) computes them once."""
    orders = np.array(_ORDERS)
    constant = np.array([(log_inv_delta + (a - 1) * math.log1p(-1 / a) - math.log(a)) / (a - 1)
                         for a in _ORDERS])
    orders.flags.writeable = constant.flags.writeable = False
    return orders, constant


def rho_to_eps(rho: Fraction | float, delta: Fraction | float) -> float:
    """Smallest eps (up to the search grid) with rho-zCDP => (eps, delta)-DP; rounded up."""
    rho_f, delta_f = float(rho), float(delta)
    if rho_f < 0 or not 0 < delta_f < 1:
        raise ValueError("need rho >= 0 and 0 < delta < 1")
    if rho_f == 0:
        return 0.0
    log_inv_delta = math.log(1 / delta_f)
    # The optimum order is near 1 + sqrt(log(1/delta) / rho); scan a log-spaced grid around
    # it, then refine by golden-section search on the (convex) objective.
    orders, constant = _order_grid(log_inv_delta)
    with np.errstate(over="ignore", invalid="ignore"):  # inf or nan: not kept, as below
        scan = orders * rho_f + constant
    kept = np.flatnonzero(scan < math.inf)  # what a strict "e < best" scan from inf keeps
    best_a, best = 2.0, math.inf
    if kept.size:
        first = int(kept[np.argmin(scan[kept])])  # argmin: the first of equal minima
        best, best_a = float(scan[first]), _ORDERS[first]
    lo, hi = 1 + (best_a - 1) / 1.02, 1 + (best_a - 1) * 1.02
    phi = (math.sqrt(5) - 1) / 2
    for _ in range(100):
        x1, x2 = hi - phi * (hi - lo), lo + phi * (hi - lo)
        if _eps_at_order(rho_f, log_inv_delta, x1) < _eps_at_order(rho_f, log_inv_delta, x2):
            hi = x2
        else:
            lo = x1
    best = min(best, _eps_at_order(rho_f, log_inv_delta, (lo + hi) / 2))
    # The simple bound rho + 2 sqrt(rho log(1/delta)) is also valid; never report worse.
    best = min(best, rho_f + 2 * math.sqrt(rho_f * log_inv_delta))
    return max(best, 0.0) * (1 + _EPS_MARGIN)


def eps_delta_to_rho(eps: Fraction | float, delta: Fraction | float) -> Fraction:
    """Largest rho (rounded down to a 2^-40 grid) whose conversion stays within (eps, delta)."""
    eps_f = float(eps)
    if eps_f <= 0:
        raise ValueError("epsilon must be > 0")
    lo, hi = 0.0, eps_f
    # Once lo and hi are adjacent floats the midpoint repeats: each one is converted once.
    fits: dict[float, bool] = {}
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid not in fits:
            fits[mid] = rho_to_eps(mid, delta) <= eps_f
        if fits[mid]:
            lo = mid
        else:
            hi = mid
    rho = Fraction(math.floor(lo * _RHO_GRID), _RHO_GRID)
    if rho <= 0 or rho_to_eps(rho, delta) > eps_f:
        raise ValueError(f"no positive rho fits eps={eps_f}, delta={float(delta)}")
    return rho


def gaussian_sigma2(rho: Fraction, sensitivity2: int | Fraction) -> Fraction:
    """Variance of N_Z(0, sigma2) giving rho-zCDP for squared L2 sensitivity ``sensitivity2``.

    Exact: sigma2 = sensitivity2 / (2 rho), a rational, so nothing is rounded at all.
    """
    rho = Fraction(rho)
    if rho <= 0:
        raise ValueError("rho must be > 0")
    return Fraction(sensitivity2) / (2 * rho)


def gaussian_rho(sigma2: Fraction, sensitivity2: int | Fraction) -> Fraction:
    """zCDP cost of N_Z(0, sigma2) for squared L2 sensitivity ``sensitivity2`` (exact)."""
    return Fraction(sensitivity2) / (2 * Fraction(sigma2))
