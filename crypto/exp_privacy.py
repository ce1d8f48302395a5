"""The extra privacy loss of the fixed-point exponential (TFHE-EXP), bounded and exact.

If every fixed-point weight W(A) is within a factor e^eta of the ideal weight
w(A) = 2^kappa exp(-eps A / 2^lambda), then for neighbouring inputs the exponential
mechanism's probability ratio W(A)/sum W(.) differs from the ideal one by at most e^(2 eta)
in the numerator and e^(2 eta) in the normaliser: the mechanism is (eps + 4 eta)-DP. This is
the shape of FedDPSyn's Theorem C.1, whose e' bounds eta:

    e' <= eps e_prev + sum_{j=0}^{n_b - 1} [ e_num(2^kappa'_j exp(-eps 2^(j - lambda)))
                                             + e_num(ybar_{j+1}) ],
    e_num(x) = -ln(1 - 1/(2x)),   ybar_{j+1} = min over inputs of y_{j+1}.

``bound`` evaluates that formula (with ybar from the exact integer model). ``exact``
enumerates every input A in [0, 2^n_b) through :func:`crypto.tfhe_exp.fixed_point_weights`
and returns eps e_prev + max_A |ln W(A) - ln w(A)|: the true worst case of *our* arithmetic,
never above the bound (asserted over a grid in ``tests/crypto/test_exp_privacy.py``). A weight that
rounds to 0 makes the loss infinite (a candidate that can never be chosen next to one that
can), and both functions then say so.

>>> row = numerics_row(ExpParams.uniform(1.0, nb=17, kappa=13, lam=13))
>>> row["exact"] <= row["bound"]
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from feddpsyn.crypto.tfhe_exp import (
    ExpParams,
    fixed_point_weights,
    ideal_log_weight,
    rounding_constants,
)

__all__ = ["e_num", "bound", "exact", "bernoulli_product_eta", "product_eta",
           "numerics_row"]


def e_num(x: float) -> float:
    """-ln(1 - 1/(2x)); infinite when x <= 1/2 (the rounding can reach zero)."""
    if x <= 0.5:
        return math.inf
    return -math.log1p(-1 / (2 * x))


def _min_partial_products(p: ExpParams) -> list[int]:
    """ybar_{j+1} for j = 0 .. n_b - 1: the smallest y_{j+1} over all inputs."""
    a = np.arange(2 ** p.nb, dtype=np.int64)
    y = np.full(a.shape, 2 ** p.kappa, dtype=np.int64)
    mins = []
    for j, (kp, c) in enumerate(zip(p.kappa_prime, rounding_constants(p))):
        t = (1 << kp) - ((a >> j) & 1) * ((1 << kp) - c)
        y = (y * t + (1 << (kp - 1))) >> kp
        mins.append(int(y.min()))
    return mins


def bound(p: ExpParams, e_prev: float = 0.0) -> float:
    """FedDPSyn Theorem C.1's bound on e'."""
    total = p.eps * e_prev
    for j, (kp, ybar) in enumerate(zip(p.kappa_prime, _min_partial_products(p))):
        total += e_num(2 ** kp * math.exp(-p.eps * 2 ** (j - p.lam))) + e_num(ybar)
    return total


def exact(p: ExpParams, e_prev: float = 0.0) -> float:
    """eps e_prev + max over every input of |ln W(A) - ln w(A)| (inf if some W(A) = 0)."""
    a = np.arange(2 ** p.nb, dtype=np.int64)
    w = fixed_point_weights(p, a)
    if (w <= 0).any():
        return math.inf
    deviation = np.abs(np.log(w.astype(float)) - ideal_log_weight(p, a))
    return p.eps * e_prev + float(deviation.max())


def bernoulli_product_eta(p: ExpParams, e_prev: float = 0.0) -> float:
    """The exact worst case for the weights our encrypted selection samples
    (``crypto.tfhe_permute_and_flip``): W(A) = prod over set bits j of c_j / 2^kappa'_j, the
    product taken exactly (no rounding of intermediate products to kappa bits), against the
    ideal exp(-eps A / 2^lambda); eps e_prev + max over every A in [0, 2^n_b) of the log-ratio,
    rounded up by 1e-12 so float error never understates it."""
    rates = [p.eps * 2.0 ** (j - p.lam) for j in range(p.nb)]
    return p.eps * e_prev + product_eta(rounding_constants(p), p.kappa_prime, rates)


def product_eta(constants: Sequence[int], kappa_prime: Sequence[int],
                rates: Sequence[float]) -> float:
    """max over every A in [0, 2^n_b) of |sum over set bits j of (ln(c_j / 2^kappa'_j) +
    rate_j)|, by enumeration, rounded up by 1e-12 so float error never understates it."""
    if min(constants) <= 0:
        return math.inf
    deviation = [math.log(c) - kp * math.log(2) + rate
                 for c, kp, rate in zip(constants, kappa_prime, rates)]
    a = np.arange(2 ** len(deviation), dtype=np.int64)
    per_input = sum(((a >> j) & 1) * d for j, d in enumerate(deviation))
    return float(np.abs(per_input).max()) + 1e-12


def numerics_row(p: ExpParams, e_prev: float = 0.0) -> dict[str, Any]:
    """One row of ``feddpsyn numerics --json``: the selection step is (eps + 4 e')-DP
    (``crypto.tfhe_permute_and_flip`` proves that shape for permute-and-flip too). ``exact`` is
    SubRoutine 1's integer arithmetic as the paper specifies it; ``exact_bernoulli`` is what
    our circuit samples with the same constants (the product evaluated exactly)."""
    b, x = bound(p, e_prev), exact(p, e_prev)
    ours = bernoulli_product_eta(p, e_prev)
    return {"eps": p.eps, "nb": p.nb, "kappa": p.kappa, "lambda": p.lam,
            "kappa_prime": list(p.kappa_prime), "e_prev": e_prev,
            "bound": b, "exact": x, "total": p.eps + 4 * x, "total_bound": p.eps + 4 * b,
            "exact_bernoulli": ours, "total_bernoulli": p.eps + 4 * ours}
