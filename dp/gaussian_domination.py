"""Whether a count's noise is at least as private as a Gaussian mechanism, up to a small
delta: the test that lets a release decided at run time be accounted exactly.

A noise Z on a count of sensitivity 1 gives the pair (P, Q) = (Z, Z + 1). We say it is
**(mu, eta)-Gaussian-dominated** when its trade-off function is at least that of the
Gaussian mechanism G_mu (Dong, Roth, Su 2022) composed with f_{0, eta}, the mechanism that
reveals the record with probability eta. By the duality between trade-off functions and
privacy profiles, that holds exactly when, for every eps >= 0,

    delta_Z(eps) <= eta + (1 - eta) delta_mu(eps),
    delta_mu(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu),

(the noises here are symmetric, so eps >= 0 covers both directions of the pair).

Why it matters: trade-off functions compose by the tensor product, which is monotone, and
G_a (x) G_b = G_sqrt(a^2 + b^2). A release whose groups are decided at run time (noisy-greedy's
split 2-way release) gives each group a budget mu_g with sum_g M_g mu_g^2 = mu^2 fixed by the
plan, and each group a noise that is (mu_g, eta_g)-dominated: whatever the selection, the
release is then G_mu (x) f_{0, sum eta}-DP, a *fixed* trade-off function. Composition with the
session's other (fixed) noises is then ordinary adaptive composition of fixed dominating pairs,
so the session's PLD is exact up to the library's pessimistic rounding
(``docs/privacy-plan.md``, "The split 2-way release").

**The check is exact up to float rounding, which is charged conservatively.** delta_Z is
piecewise of the form A - e^eps B between consecutive privacy losses of Z (A, B the P- and
Q-masses of the points whose loss exceeds eps), so on each piece the gap
g(eps) - (A - e^eps B) is convex in t = e^eps (the Gaussian's hockey stick is convex in t);
its minimum on the piece is at the stationary point (1 - eta) Phi(-mu/2 - eps/mu) = B, or
at an end. Every piece is checked at that point, with the float error of both sides
subtracted from the gap.

>>> from feddpsyn.dp.joint_noise_accounting import JointNoiseShape
>>> shape = JointNoiseShape(16, 6)          # sigma 73.9, a support of 1,009 points
>>> dominated(shape.pair(), 1 / 65, 1e-6)   # its tails cost: a Gaussian of sigma 65 ...
True
>>> dominated(shape.pair(), 1 / 70, 1e-6)   # ... but not 70, at eta 1e-6
False
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np
from scipy.special import log_ndtr, ndtr, ndtri

from feddpsyn.dp.binomial_accounting import LossDistribution

Array = np.ndarray[Any, Any]

__all__ = ["gaussian_delta", "bound_delta", "dominated", "shape_dominated", "mu_at_most",
           "mu_at_least"]

# Relative float error allowed on each side of the comparison: the masses are sums of at most
# ~1e6 correctly rounded terms, the Gaussian's terms are a few libm calls each.
_SLACK = 1e-12


def gaussian_delta(mu: float, eps: Array | float) -> Array:
    """delta_mu(eps) of the Gaussian mechanism G_mu."""
    eps = np.asarray(eps, dtype=float)
    first = ndtr(mu / 2 - eps / mu)
    second = np.exp(eps + log_ndtr(-mu / 2 - eps / mu))
    out: Array = np.maximum(first - second, 0.0)
    return out


def bound_delta(mu: float, eta: float, eps: Array | float) -> Array:
    """eta + (1 - eta) delta_mu(eps), lowered by its float error (a lower bound on it)."""
    eps = np.asarray(eps, dtype=float)
    error = 8 * np.finfo(float).eps * ndtr(mu / 2 - eps / mu)
    out: Array = eta + (1 - eta) * np.maximum(gaussian_delta(mu, eps) - error, 0.0)
    return out


def dominated(pair: LossDistribution, mu: float, eta: float) -> bool:
    """Whether the noise of ``pair`` is (mu, eta)-Gaussian-dominated (module docstring)."""
    if not (mu > 0 and 0 <= eta < 1):
        raise ValueError("need mu > 0 and 0 <= eta < 1")
    if pair.infinite > eta * (1 - _SLACK):
        return False  # the points only one neighbour can produce: delta_Z(inf) = their mass
    losses = np.asarray(pair.losses, dtype=float)
    keep = losses > 0
    if not keep.any():
        return True
    order = np.argsort(-losses[keep])
    loss = losses[keep][order]
    p = np.exp(np.asarray(pair.log_masses, dtype=float)[keep][order])
    q = np.exp(np.asarray(pair.log_masses, dtype=float)[keep][order] - loss)
    a = pair.infinite + np.cumsum(p)  # P-mass of the points with loss >= loss[k]
    b = np.cumsum(q)                  # their Q-mass
    hi = loss                          # piece k: eps in [lo_k, hi_k], the points 0..k above it
    lo = np.append(loss[1:], 0.0)
    # The stationary point of the convex gap on each piece, clipped to it.
    target = np.clip(b / (1 - eta), 1e-300, 1.0)
    stationary = -mu * (ndtri(target) + mu / 2)
    points = np.stack([lo, hi, np.clip(stationary, lo, hi)])
    shape_delta = a[None, :] - np.exp(points) * b[None, :]
    shape_delta = shape_delta + _SLACK * (a[None, :] + np.exp(points) * b[None, :])
    return bool(np.all(shape_delta <= bound_delta(mu, eta, points)))


@functools.lru_cache(maxsize=1 << 14)
def shape_dominated(uniforms: int, bits: int, mu: float, eta: float, wider: int = 0) -> bool:
    """:func:`dominated` for a joint shape (``dp.joint_noise_accounting.JointNoiseShape``:
    ``wider`` uniforms of bits + 1 beside the others), cached: a plan's searches ask for the
    same shapes at the same budgets."""
    from feddpsyn.dp.joint_noise_accounting import JointNoiseShape

    return dominated(JointNoiseShape(uniforms, bits, wider).pair(), mu, eta)


def mu_at_most(rho: Fraction | float) -> float:
    """A float mu <= sqrt(2 rho): a group checked against it is dominated by G_sqrt(2 rho)
    too (a smaller mu is the stronger claim)."""
    mu = math.sqrt(2 * float(rho))
    return math.nextafter(mu, 0.0) if mu > 0 else mu


def mu_at_least(rho: Fraction | float) -> float:
    """A float mu >= sqrt(2 rho): the bound a release is accounted with (a weaker claim)."""
    return math.nextafter(math.sqrt(2 * float(rho)), math.inf)
