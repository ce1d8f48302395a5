"""TFHE-EXP (FedDPSyn, Appendix C, SubRoutine 1): fixed-point exp(-eps * A / 2^lambda).

SubRoutine 1, for an encrypted non-positive score U (fixed point, U ~ 2^lambda u):

    U <- max(U, -(2^n_b - 1));  y_0 <- 2^kappa
    for j in 0 .. n_b - 1:
        b_j <- bit j of -U
        c_j <- round(2^kappa'_j * exp(-eps * 2^(j - lambda)))   (public constant)
        t_j <- 2^kappa'_j - b_j (2^kappa'_j - c_j)
        y_{j+1} <- (y_j t_j + 2^(kappa'_j - 1)) >> kappa'_j     (rounded product)
    return y_{n_b}                                               (~ 2^kappa exp(eps U / 2^lambda))

This module is the exact integer model of that arithmetic, vectorised over every input at
once: it is what the encrypted circuit must reproduce bit for bit, and what the privacy-loss
numerics (:mod:`crypto.exp_privacy`) enumerate.

>>> p = ExpParams(eps=1.0, nb=4, kappa=8, kappa_prime=(8, 8, 8, 8), lam=2)
>>> fixed_point_weights(p).tolist()[:4]   # A = 0, 1, 2, 3: ~ 256 exp(-A / 4)
[256, 199, 155, 120]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, localcontext
from typing import Any

import numpy as np

__all__ = ["ExpParams", "rounding_constants", "fixed_point_weights", "fixed_point_weight"]

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class ExpParams:
    """Parameters of SubRoutine 1 (``kappa_prime`` holds one kappa'_j per bit j)."""

    eps: float
    nb: int
    kappa: int
    kappa_prime: tuple[int, ...]
    lam: int

    def __post_init__(self) -> None:
        if self.nb < 1 or len(self.kappa_prime) != self.nb:
            raise ValueError("need n_b >= 1 and one kappa'_j per bit")
        if self.kappa < 1 or min(self.kappa_prime) < 1:
            raise ValueError("kappa and kappa'_j must be >= 1")
        if not self.eps > 0:
            raise ValueError("eps must be > 0")
        if self.kappa + max(self.kappa_prime) > 62:
            raise ValueError("kappa + kappa' must stay below 63 bits (int64 model)")

    @classmethod
    def uniform(cls, eps: float, nb: int, kappa: int, lam: int,
                kappa_prime: int | None = None) -> ExpParams:
        kp = kappa if kappa_prime is None else kappa_prime
        return cls(eps=eps, nb=nb, kappa=kappa, kappa_prime=(kp,) * nb, lam=lam)


def rounding_constants(p: ExpParams) -> list[int]:
    """c_j = round(2^kappa'_j exp(-eps 2^(j - lambda))), computed at 50 significant digits
    so that the public constants do not depend on the platform's libm."""
    out = []
    with localcontext() as ctx:
        ctx.prec = 50
        for j, kp in enumerate(p.kappa_prime):
            x = Decimal(2) ** kp * (-(Decimal(repr(p.eps)) * Decimal(2) ** (j - p.lam))).exp()
            out.append(int(x.to_integral_value(rounding="ROUND_HALF_EVEN")))
    return out


def fixed_point_weights(p: ExpParams, a: Array | None = None) -> Array:
    """y_{n_b} for every A = -U in ``a`` (default: all of [0, 2^n_b - 1])."""
    a = np.arange(2 ** p.nb, dtype=np.int64) if a is None else np.asarray(a, dtype=np.int64)
    a = np.clip(a, 0, 2 ** p.nb - 1)  # line 2: the clamp at -(2^n_b - 1)
    y = np.full(a.shape, 2 ** p.kappa, dtype=np.int64)
    for j, (kp, c) in enumerate(zip(p.kappa_prime, rounding_constants(p))):
        bit = (a >> j) & 1
        t = (1 << kp) - bit * ((1 << kp) - c)
        y = (y * t + (1 << (kp - 1))) >> kp
    return y


def fixed_point_weight(p: ExpParams, a: int) -> int:
    """Scalar version with Python integers (no overflow at any width), for cross-checks."""
    a = min(max(int(a), 0), 2 ** p.nb - 1)
    y: int = 2 ** p.kappa
    for j, (kp, c) in enumerate(zip(p.kappa_prime, rounding_constants(p))):
        t = (1 << kp) - ((a >> j) & 1) * ((1 << kp) - c)
        y = (y * t + (1 << (kp - 1))) >> kp
    return y


def ideal_log_weight(p: ExpParams, a: Array) -> Array:
    """ln(2^kappa exp(-eps A / 2^lambda)), the weight TFHE-EXP approximates."""
    out: Array = p.kappa * math.log(2) - p.eps * np.asarray(a, dtype=float) / 2 ** p.lam
    return out
