"""Exact privacy of the joint noise (``crypto.joint_noise``): its shapes, their cost, and the
size that matches a release's zCDP budget.

A joint noise is a sum of independent fair coins with public weights,
Z = sum_j w_j c_j - sum_j w_j / 2, built from XOR-shared coins so that neither server knows
it. Two shapes (:class:`JointNoiseShape`):

* **coins** (``bits = 1``): n unit weights, Z = Binomial(n, 1/2) - n/2, variance n/4;
* **uniforms** (``bits = w``): n_u groups of weights 1, 2, ..., 2^(w-1), i.e. n_u independent
  uniforms on {0..2^w - 1} (each the XOR of two w-bit values, bit by bit), variance
  n_u (4^w - 1) / 12: a discrete Irwin-Hall shape. Each encrypted bit adds up to 4^(w-1) / 4
  of variance instead of 1/4, so a release needs far fewer ciphertexts;
* **mixed uniforms** (``wider = n_v > 0``): n_u uniforms of w bits and n_v of w + 1 bits,
  variance (n_u (4^w - 1) + n_v (4^(w+1) - 1)) / 12. With one width the variance moves in
  steps of a whole uniform and a cap on the bits per count caps the uniforms, so a budget
  between two widths gets too few uniforms of the wider one (a shape far from its Gaussian);
  two adjacent widths fill the cap (``params.noise_rules.dominated_shape``).

Design concern: **the privacy claim is computed from the exact pmf, never from a closed
form, and every rounding goes up.** The pmf is an exact integer count vector
(:meth:`JointNoiseShape.counts`), its release pair is ``dp.binomial_accounting``'s
:class:`LossDistribution`, and the session rule is that module's conditioning rule: a
release is charged its conditioned Renyi divergences at every order plus, in delta, the mass
it excludes (the points only one neighbour can produce, and for uniforms the extreme edge up
to ``tail``).

**Matching a zCDP budget.** A release planned as rho_R-zCDP over M marginals (one record
moves one cell of each by 1, so a record's neighbours differ in M counts) is replaced by a
joint noise whose M-fold conditioned curve stays below a * rho_R at every order a of
:func:`orders_for` (the orders where the session's conversion to (eps, delta) is decided).
A finite support makes the conditioned curve approach its largest loss (M ln n for
coins) instead of staying near a * 2M/n, so it crosses a * rho at high orders that the
conversion never uses; matching *every* order costs far more noise for nothing (the demo's
1-way release: 7,892 coins match the orders up to 40, all of ``RDP_ORDERS`` up to 13,553
would need 168,092). On the orders used the session's curve is pointwise below the
zCDP plan's, and :func:`session_epsilon_of` (``dp.binomial_accounting``, over every order)
confirms the session's eps end to end.

>>> shape = JointNoiseShape(uniforms=4, bits=2)
>>> shape.counts()[:4], shape.variance, shape.ciphertexts
([1, 4, 10, 20], Fraction(5, 1), 8)
>>> mixed = JointNoiseShape(uniforms=1, bits=1, wider=1)  # a coin plus a uniform on {0..3}
>>> mixed.counts(), mixed.weights(), mixed.label
([1, 2, 2, 2, 1], [1, 1, 2], '1x1+1x2')
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from feddpsyn.dp.binomial_accounting import RDP_ORDERS, LossDistribution

__all__ = ["JointNoiseShape", "orders_for", "release_matches", "smallest_coins",
           "cheapest_uniforms", "release_marginals"]

# Uniforms wider than this are never tried: a 2^16-point uniform per group already gives
# variance ~3.6e8 per group, far beyond any release of the project's budgets.
MAX_BITS = 16


@dataclass(frozen=True)
class JointNoiseShape:
    """Z = sum of ``uniforms`` iid uniforms on {0..2^bits - 1} and ``wider`` on
    {0..2^(bits+1) - 1}, all independent, centred (bits = 1, wider = 0: coins)."""

    uniforms: int
    bits: int
    wider: int = 0

    def __post_init__(self) -> None:
        if self.uniforms < 1 or not 1 <= self.bits <= MAX_BITS or self.wider < 0:
            raise ValueError("need uniforms >= 1, wider >= 0 and 1 <= bits <= MAX_BITS")
        if self.wider and self.bits + 1 > MAX_BITS:
            raise ValueError("the wider uniforms' bits + 1 must be at most MAX_BITS")
        if (self.uniforms + self.wider) % 2:
            # Every uniform's span 2^w - 1 is odd: the centring sum(w)/2 is an integer
            # exactly when the number of uniforms is even.
            raise ValueError("the centring sum(w)/2 must be an integer: use an even number "
                             "of uniforms")

    @property
    def kind(self) -> str:
        return "coins" if self.bits == 1 and not self.wider else "uniforms"

    @property
    def widths(self) -> tuple[tuple[int, int], ...]:
        """(uniforms, bits) of each width the shape sums, narrowest first."""
        return ((self.uniforms, self.bits),) + (((self.wider, self.bits + 1),)
                                                 if self.wider else ())

    @property
    def label(self) -> str:
        """``<uniforms>x<bits>``, then ``+<wider>x<bits + 1>`` for a mixed shape."""
        return "+".join(f"{n}x{w}" for n, w in self.widths)

    @property
    def ciphertexts(self) -> int:
        """Encrypted bits per released count (the key server's offline work)."""
        return sum(n * w for n, w in self.widths)

    @property
    def variance(self) -> Fraction:
        return Fraction(sum(n * (4 ** w - 1) for n, w in self.widths), 12)

    @property
    def span(self) -> int:
        """Z lies in [-span/2, span/2]: a hard bound, for the count width's room."""
        return sum(n * ((1 << w) - 1) for n, w in self.widths)

    @property
    def hoeffding_proxy(self) -> Fraction:
        """A sub-Gaussian variance proxy of Z: (2^w - 1)^2 / 4 per uniform (Hoeffding)."""
        return Fraction(sum(n * ((1 << w) - 1) ** 2 for n, w in self.widths), 4)

    def weights(self) -> list[int]:
        """The public weight of each encrypted bit, uniform by uniform, low bit first (the
        narrower uniforms first)."""
        return [1 << j for n, w in self.widths for _ in range(n) for j in range(w)]

    def counts(self) -> list[int]:
        """Exact pmf of Z + span/2 as integer counts over 2^ciphertexts: repeated
        convolution with each uniform's box, by prefix sums (one pass per uniform)."""
        return list(_shape_counts(self.uniforms, self.bits, self.wider))

    def pair(self, shift: int = 1) -> LossDistribution:
        """The release pair for neighbours moving the count by ``shift``."""
        return _shape_pair(self.uniforms, self.bits, shift, self.wider)


# A plan's rules try thousands of shapes, many of them again at every budget a calibration
# tries; a shape's pmf and pair are pure functions of it, so they are kept once computed.
@functools.lru_cache(maxsize=4096)
def _uniform_counts(uniforms: int, bits: int) -> tuple[int, ...]:
    return tuple(_convolved([1], [1 << bits] * uniforms))


def _convolved(counts: list[int], boxes: list[int]) -> list[int]:
    """``counts`` convolved with a box of each width in ``boxes``, exactly: Python integers
    (an object array), each pass a difference of prefix sums."""
    out = np.array([int(c) for c in counts], dtype=object)
    for width in boxes:  # bounded: one pass per uniform
        prefix = np.concatenate([np.zeros(1, dtype=object), np.cumsum(out, dtype=object)])
        lagged = np.concatenate([np.zeros(width - 1, dtype=object), prefix[:len(out)]])
        # prefix[x + 1] - prefix[x + 1 - width], both read as 0 before 0 and as the total
        # past the end.
        out = np.concatenate([prefix[1:], np.full(width - 1, prefix[-1], dtype=object)]) - lagged
    return [int(c) for c in out]


def _shape_counts(uniforms: int, bits: int, wider: int = 0) -> tuple[int, ...]:
    # Only one-width pmfs are cached: a search tries many wider counts on one narrower part,
    # and keeping each mixed pmf (thousands of big integers) would hold gigabytes.
    if not wider:
        return _uniform_counts(uniforms, bits)
    return tuple(_convolved(list(_uniform_counts(uniforms, bits)), [1 << (bits + 1)] * wider))


@functools.lru_cache(maxsize=4096)
def _uniform_pair(uniforms: int, bits: int, shift: int) -> LossDistribution:
    if bits == 1 and shift == 1:
        return LossDistribution.binomial(uniforms)  # closed-form losses, any n
    return LossDistribution.from_counts(list(_uniform_counts(uniforms, bits)), shift)


def _shape_pair(uniforms: int, bits: int, shift: int, wider: int = 0) -> LossDistribution:
    if not wider:
        return _uniform_pair(uniforms, bits, shift)
    return _mixed_pair(uniforms, bits, shift, wider)


# A pair is two float arrays over the support (~0.2 MB at the served plans' widest), so a
# few hundred are kept: a plan's groups and both servers' checks ask for the same ones.
@functools.lru_cache(maxsize=256)
def _mixed_pair(uniforms: int, bits: int, shift: int, wider: int) -> LossDistribution:
    return LossDistribution.from_counts(list(_shape_counts(uniforms, bits, wider)), shift)


@functools.lru_cache(maxsize=1 << 16)
def _conditioned_curve(shape: JointNoiseShape, orders: tuple[float, ...],
                       tail: float) -> tuple[tuple[float, float], ...]:
    return tuple(shape.pair().conditioned_renyi(orders, tail).items())


def orders_for(rho: Fraction | float, delta: float) -> tuple[float, ...]:
    """The orders of ``RDP_ORDERS`` up to twice the zCDP conversion's optimum,
    a* = 1 + sqrt(ln(1/delta) / rho): the optimum order of the session's curve sits near a*,
    so a curve below a * rho on these orders converts to the same eps (confirmed end to end
    by ``session_epsilon_of``)."""
    a_star = 1 + math.sqrt(math.log(1 / delta) / float(rho))
    return tuple(a for a in RDP_ORDERS if a <= 2 * a_star)


def release_marginals(rho: Fraction, sigma2: Fraction) -> int:
    """M of a planned release: its sigma2 = M / (2 rho) (``params.release_spec``)."""
    m = 2 * Fraction(rho) * Fraction(sigma2)
    if m.denominator != 1 or m < 1:
        raise ValueError("sigma2 is not M / (2 rho) for an integer M")
    return int(m)


def release_matches(shape: JointNoiseShape, marginals: int, rho: Fraction | float,
                    orders: Iterable[float], tail: float = 0.0) -> bool:
    """M * D_a(P|E || Q) <= a * rho at every order given (the release's conditioned curve;
    the divergences are rounded up, rho down to the float below it)."""
    curve = _conditioned_curve(shape, tuple(orders), tail)
    budget = _float_at_most(rho)
    return all(marginals * d <= a * budget for a, d in curve)


def _float_at_most(x: Fraction | float) -> float:
    value = float(x)
    return value if Fraction(value) <= Fraction(x) else math.nextafter(value, -math.inf)


def smallest_coins(marginals: int, rho: Fraction | float, orders: Iterable[float],
                   tail: float = 0.0, n_max: int = 1 << 24) -> JointNoiseShape:
    """The fewest (even) coins matching rho at ``orders``: bounded doubling, then bisection
    (the conditioned divergence falls as n grows; the answer is re-checked)."""
    def ok(n: int) -> bool:
        return release_matches(JointNoiseShape(n, 1), marginals, rho, orders, tail)

    lo, hi = 2, 2
    for _ in range(32):  # bounded doubling up to n_max
        if ok(hi):
            break
        lo, hi = hi, hi * 2
        if hi > n_max:
            raise ValueError("no coin count up to n_max matches the budget")
    while hi - lo > 2:  # bounded: the gap halves each pass
        mid = (lo + hi) // 4 * 2
        if mid in (lo, hi):
            break
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    n = lo if ok(lo) else hi
    if not ok(n):
        raise RuntimeError("coin search ended on a non-matching n")
    return JointNoiseShape(n, 1)


def cheapest_uniforms(marginals: int, rho: Fraction | float, orders: Iterable[float],
                      tail: float, max_variance: Fraction | float,
                      uniforms: tuple[int, ...] = tuple(range(2, 129, 2)), *,
                      max_bits: int | None = None,
                      max_span: int | None = None) -> JointNoiseShape:
    """The uniforms shape with the fewest encrypted bits that matches rho at ``orders`` with
    variance at most ``max_variance`` (ties: the smaller variance). Per number of uniforms
    only the least matching width can be the answer (one more bit multiplies the variance
    by ~4 and adds ciphertexts), so each is a scan of at most MAX_BITS widths. ``max_bits``
    and ``max_span`` cap the encrypted bits and the span searched."""
    best = None
    for n_u in uniforms:
        for bits in range(2, MAX_BITS + 1):
            shape = JointNoiseShape(n_u, bits)
            if shape.variance > max_variance or (
                    best is not None and shape.ciphertexts > best.ciphertexts) or (
                    max_bits is not None and shape.ciphertexts > max_bits) or (
                    max_span is not None and shape.span > max_span):
                break
            if release_matches(shape, marginals, rho, orders, tail):
                if best is None or (shape.ciphertexts, shape.variance) < (
                        best.ciphertexts, best.variance):
                    best = shape
                break
    if best is None:
        raise ValueError("no uniforms shape in the range matches the budget within the "
                         "variance allowed")
    return best
