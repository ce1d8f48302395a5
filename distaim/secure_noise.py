"""Discrete Gaussian noise generated inside MPC, so that no server knows it.

AIM measures a marginal with Gaussian noise of the variance sigma^2 its budget asks for (FLAIM
paper, Algorithm 2 line 14; DistAIM, Algorithm 3: "measure ... with Gaussian noise" inside
SMC). Our target is the discrete Gaussian N_Z(0, sigma^2) (Canonne, Kamath, Steinke 2020): on
an integer query of L2 sensitivity 1 (one marginal, add/remove one record) it is
1/(2 sigma^2)-zCDP, exactly as ``dp.discrete_gaussian`` used by the TFHE path.

Sampler (our construction). Every random bit is an MPyC secure random bit (PRSS: uniform and
known to no coalition of t = 1 server). A *level* is Walker's alias method on a table of
K = 2^k slots: k secret bits pick a slot as a secret one-hot vector (K - 1 secure
multiplications, built bit by bit), the slot's public threshold T, primary value and alias
value are read by inner products with the public table (local), and a secret b-bit uniform
U gives the coin [U < T] (one secure comparison) selecting primary or alias. The table is
built with exact integer arithmetic from weights w_y = round(P(y) K 2^b), so the sampler's
distribution is exactly w_y / (K 2^b). For large sigma one table would be too long, so
the noise is s * Z_1 + Z_0 with Z_l ~ N_Z(0, tau_l^2) from two tables, tau_0 >= 3 s (the fine
level smooths the coarse lattice s Z) and s^2 tau_1^2 + tau_0^2 = sigma^2 exactly, applied
recursively to Z_1 when it is still too wide.

Precision and privacy claim. The distance from the target is computed, not assumed:
TV(sampler, N_Z(0, sigma^2)) <= sum over levels of TV(table_l, N_Z(0, tau_l^2)) (rounding of
the weights plus the mass beyond the table, both evaluated with 80-digit decimals) +
TV(s N_Z(0, tau_1^2) + N_Z(0, tau_0^2), N_Z(0, sigma^2)) (the convolution, evaluated term by
term), rounded up. ``GaussianPlan.tv_bound`` is that per-sample bound; a release of n noisy
cells is within n * tv_bound of the ideal Gaussian mechanism, so it is rho-zCDP for the ideal
plus an *extra delta* of (1 + e^eps) * n * tv_bound after conversion to (eps, delta)
(coupling argument: P[M'(D) in S] <= P[M(D) in S] + gamma). With b = 60 the bound is about
1e-17 per sample.

Documented option (not the default): ``distributed_gaussian_inputs`` has each server input
its own N_Z(0, sigma^2 / 2) sample (``dp.discrete_gaussian``); any single server still
faces two honest samples (variance sigma^2), but the total variance is 1.5 sigma^2, and the
sum of two discrete Gaussians is itself only close to one (its distance is reported by
``convolution_tv``).

>>> plan = GaussianPlan.for_sigma2(Fraction(25))
>>> [level.scale for level in plan.levels], plan.tv_bound < Fraction(1, 10**15)
([1], True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from functools import lru_cache

import numpy as np

__all__ = ["AliasTable", "GaussianLevel", "GaussianPlan", "discrete_gaussian_pmf",
           "convolution_tv", "secure_discrete_gaussian", "distributed_gaussian_inputs"]

_PREC = 80
# Tables cover |y| <= TAIL_SIGMAS * tau: the mass beyond is below e^{-TAIL^2/2} ~ 1e-31.
TAIL_SIGMAS = 12
THRESHOLD_BITS = 60           # b: the coin's resolution (needs b + 1 <= the secint's bits)
TAU_BASE = 20                 # tau of every level but the last: tables of <= 2^9 slots
MAX_TABLE_BITS = 9
_SMOOTHING = 3                # tau_0 >= 3 s: the lattice-smoothing error is below e^{-170}
MIN_INNER_TAU = 2
MAX_TV = Fraction(1, 10**15)  # a plan farther than this from N_Z is refused (fail closed)


def _dec(x: Fraction) -> Decimal:
    return Decimal(x.numerator) / Decimal(x.denominator)


def discrete_gaussian_pmf(sigma2: Fraction, y_max: int) -> tuple[list[Decimal], Decimal]:
    """P(y) of N_Z(0, sigma2) for |y| <= y_max (index y + y_max), and an upper bound on the
    total mass beyond, both with 80-digit decimals."""
    with localcontext() as ctx:
        ctx.prec = _PREC
        s2 = _dec(Fraction(sigma2))
        kernel = [(-Decimal(y * y) / (2 * s2)).exp() for y in range(y_max + 1)]
        # sum_{y > y_max} e^{-y^2/2s2} <= e^{-(y_max+1)^2/2s2} / (1 - e^{-(y_max+1)/s2})
        first = Decimal(y_max + 1)
        tail = (-(first * first) / (2 * s2)).exp() / (1 - (-first / s2).exp())
        inner = kernel[0] + 2 * sum(kernel[1:])
        norm = inner + 2 * tail
        pmf = [kernel[abs(y)] / inner for y in range(-y_max, y_max + 1)]
        # mass beyond (relative to the true normaliser), and the renormalisation it causes
        beyond = 2 * tail / norm
        return pmf, beyond * 2


@dataclass(frozen=True)
class AliasTable:
    """Walker's alias table with 2^k slots and b-bit thresholds, built exactly.

    Slot j yields ``primary[j]`` with probability thresholds[j] / 2^b, else ``alias[j]``.
    """

    k: int
    b: int
    thresholds: tuple[int, ...]
    primary: tuple[int, ...]
    alias: tuple[int, ...]

    @classmethod
    def from_weights(cls, values: list[int], weights: list[int], k: int, b: int) -> AliasTable:
        slots, unit = 1 << k, 1 << b
        if sum(weights) != slots * unit or len(values) > slots or min(weights) < 0:
            raise ValueError("weights must be >= 0, at most 2^k of them, summing to 2^(k+b)")
        values = list(values) + [0] * (slots - len(values))
        weights = list(weights) + [0] * (slots - len(weights))
        small = [i for i, w in enumerate(weights) if w < unit]
        large = [i for i, w in enumerate(weights) if w >= unit]
        thresholds, primary, alias = [0] * slots, [0] * slots, [0] * slots
        slot = 0
        w = list(weights)
        for _ in range(slots):  # each pass fills exactly one slot
            if small and large:
                s, g = small.pop(), large[-1]
                thresholds[slot], primary[slot], alias[slot] = w[s], values[s], values[g]
                w[g] -= unit - w[s]
                if w[g] < unit:
                    small.append(large.pop())
            else:
                i = (large or small).pop()
                if w[i] != unit:
                    raise ArithmeticError("alias construction lost mass")
                thresholds[slot], primary[slot], alias[slot] = unit, values[i], values[i]
            slot += 1
        return cls(k, b, tuple(thresholds), tuple(primary), tuple(alias))

    def distribution(self) -> dict[int, Fraction]:
        """The exact output distribution of this table."""
        out: dict[int, Fraction] = {}
        total = Fraction(1, (1 << self.k) << self.b)
        for t, p, a in zip(self.thresholds, self.primary, self.alias):
            out[p] = out.get(p, 0) + t * total
            out[a] = out.get(a, 0) + ((1 << self.b) - t) * total
        return {y: q for y, q in out.items() if q}


def _gaussian_table(tau2: Fraction, b: int) -> tuple[AliasTable, Fraction]:
    """An alias table for N_Z(0, tau2) and an upper bound on its TV distance from it."""
    y_max = math.ceil(TAIL_SIGMAS * math.sqrt(tau2)) + 1
    pmf, beyond = discrete_gaussian_pmf(tau2, y_max)
    k = max(1, (2 * y_max + 1 - 1).bit_length())
    if k > MAX_TABLE_BITS:
        raise ValueError("table too long; use more levels")
    with localcontext() as ctx:
        ctx.prec = _PREC
        scale = Decimal((1 << k) << b)
        weights = [int((p * scale).to_integral_value()) for p in pmf]
        weights[y_max] += int(scale) - sum(weights)  # the mode absorbs the rounding slack
        realized = [Decimal(w) / scale for w in weights]
        tv = sum(abs(r - p) for r, p in zip(realized, pmf)) / 2 + beyond
    table = AliasTable.from_weights(list(range(-y_max, y_max + 1)), weights, k, b)
    return table, _round_up(tv)


def _round_up(x: Decimal) -> Fraction:
    # to a Fraction >= x, with a margin far above the 80-digit arithmetic's error
    return Fraction(str(x)) + Fraction(1, 10**60)


def convolution_tv(scale: int, tau2_coarse: Fraction, tau2_fine: Fraction,
                   sigma2: Fraction) -> Fraction:
    """Upper bound on TV(scale * N_Z(0, tau2_coarse) + N_Z(0, tau2_fine), N_Z(0, sigma2))."""
    yc = math.ceil(TAIL_SIGMAS * math.sqrt(tau2_coarse)) + 1
    yf = math.ceil(TAIL_SIGMAS * math.sqrt(tau2_fine)) + 1
    pc, bc = discrete_gaussian_pmf(tau2_coarse, yc)
    pf, bf = discrete_gaussian_pmf(tau2_fine, yf)
    reach = scale * yc + yf
    target, bt = discrete_gaussian_pmf(sigma2, reach)
    with localcontext() as ctx:
        ctx.prec = _PREC
        total = Decimal(0)
        for y in range(-reach, reach + 1):
            acc = Decimal(0)
            lo, hi = math.ceil((y - yf) / scale), math.floor((y + yf) / scale)
            for z in range(max(lo, -yc), min(hi, yc) + 1):
                acc += pc[z + yc] * pf[y - scale * z + yf]
            total += abs(acc - target[y + reach])
        # mass of either distribution outside the evaluated window
        tv = total / 2 + bc + bf + bt
    return _round_up(tv)


@dataclass(frozen=True)
class GaussianLevel:
    scale: int
    tau2: Fraction
    table: AliasTable
    tv: Fraction


@dataclass(frozen=True)
class GaussianPlan:
    """How N_Z(0, sigma2) is sampled in MPC, and its per-sample TV bound from the target."""

    sigma2: Fraction
    levels: tuple[GaussianLevel, ...]
    tv_bound: Fraction

    @staticmethod
    @lru_cache(maxsize=64)
    def for_sigma2(sigma2: Fraction, b: int = THRESHOLD_BITS) -> GaussianPlan:
        """Levels Z_0 + s (Z_1 + s (Z_2 + ...)): every level but the last has tau = TAU_BASE,
        so every table has at most 2^9 slots; the TV bound adds up level by level
        (TV(Z_0 + s W, target) <= TV(W, G) + TV(Z_0 + s G, target) for G the ideal of W)."""
        sigma2 = Fraction(sigma2)
        if sigma2 <= 0:
            raise ValueError("sigma2 must be > 0")
        if sigma2 <= TAU_BASE**2:
            table, tv = _gaussian_table(sigma2, b)
            return GaussianPlan(sigma2, (GaussianLevel(1, sigma2, table, tv),), tv)
        scale = TAU_BASE // _SMOOTHING
        # The coarse level must not be nearly constant (s tau_1 tau_0 / sigma has to exceed
        # the smoothing parameter of Z too), so tau_1 >= MIN_INNER_TAU; tau_0 takes the rest.
        inner_sigma2 = max((sigma2 - TAU_BASE**2) / scale**2, Fraction(MIN_INNER_TAU) ** 2)
        tau0 = sigma2 - scale**2 * inner_sigma2
        inner = GaussianPlan.for_sigma2(inner_sigma2, b)
        fine, tv0 = _gaussian_table(tau0, b)
        tv = tv0 + inner.tv_bound + convolution_tv(scale, inner_sigma2, tau0, sigma2)
        if tv > MAX_TV:
            raise ArithmeticError(f"sampler for sigma2={float(sigma2)} too far from N_Z")
        levels = (GaussianLevel(1, tau0, fine, tv0),) + tuple(
            GaussianLevel(scale * lv.scale, lv.tau2, lv.table, lv.tv) for lv in inner.levels)
        return GaussianPlan(sigma2, levels, tv)


def _secure_alias(rt, secint, table: AliasTable, n: int):
    """n independent draws from ``table`` as a secure array (all randomness secret)."""
    k, b = table.k, table.b
    bits = rt.np_random_bits(secint, n * k).reshape(n, k)
    onehot = rt.np_concatenate((1 - bits[:, 0:1], bits[:, 0:1]), axis=1)
    for j in range(1, k):  # slot index = sum_j bit_j 2^j
        upper = onehot * bits[:, j:j + 1]
        onehot = rt.np_concatenate((onehot - upper, upper), axis=1)
    threshold = onehot @ np.array(table.thresholds, dtype=object)
    primary = onehot @ np.array(table.primary, dtype=object)
    alias = onehot @ np.array(table.alias, dtype=object)
    ubits = rt.np_random_bits(secint, n * b).reshape(n, b)
    uniform = ubits @ np.array([1 << i for i in range(b)], dtype=object)
    coin = rt.np_sgn(uniform - threshold, l=b + 1, LT=True)  # [U < T]
    return alias + coin * (primary - alias)


def secure_discrete_gaussian(rt, secint, plan: GaussianPlan, n: int):
    """n secret samples of N_Z(0, plan.sigma2) (within plan.tv_bound each) in ``secint``."""
    if secint.bit_length < THRESHOLD_BITS + 2:
        raise ValueError("secure type too short for the coin comparison")
    noise = None
    for level in plan.levels:
        part = _secure_alias(rt, secint, level.table, n) * level.scale
        noise = part if noise is None else noise + part
    return noise


def distributed_gaussian_inputs(rt, secint, sigma2: Fraction, n: int, sampler=None):
    """Documented option: each party inputs N_Z(0, sigma2/2) noise of its own; the sum.

    Any single server knows its own part, so against it the noise is the sum of the other
    two (variance sigma2); the published total has variance 1.5 sigma2.
    """
    from feddpsyn.dp.discrete_gaussian import CSPRNG
    sampler = sampler or CSPRNG
    own = sampler.discrete_gaussian_vector(Fraction(sigma2) / 2, n)
    parts = rt.input(secint.array(own.astype(object)), senders=list(range(len(rt.parties))))
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return total
