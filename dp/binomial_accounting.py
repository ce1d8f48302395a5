"""Exact privacy of Binomial(n, 1/2) - n/2 noise on a count (sensitivity 1), alone and in a
session with zCDP parts.

The "one noise for both views" release (``crypto.joint_noise``) adds Z = B - n/2,
B ~ Binomial(n, 1/2) (Dwork, Kenthapadi, McSherry, Mironov, Naor 2006). Its pmf is known
exactly, so its privacy is computed, not bounded by a closed form.

**The pair.** Neighbours move a count by 1. For counts c and c + 1 the output laws are
P(x) = C(n, x) / 2^n on x in {0..n} and Q(x) = C(n, x - 1) / 2^n on {1..n+1} (x = output
- c + n/2). The privacy loss is L(x) = ln(P(x) / Q(x)) = ln((n - x + 1) / x) for 1 <= x <= n,
and +inf at x = 0 (mass 2^-n: the one output only c can produce). The reverse pair (Q, P),
and c vs c - 1, give the same loss distribution (reflection x -> n + 1 - x), so (P, Q)
dominates every neighbouring pair and one privacy-loss distribution (PLD) describes the
mechanism: delta(eps) = 2^-n + sum over x of P(x) max(0, 1 - e^(eps - L(x))), which is the
hockey-stick sum of max(0, P(x) - e^eps Q(x)) over outputs.

**Composition of k releases (PLD).** Losses add under composition, so the composed PLD is
the convolution of the single ones. Numerically (:class:`PrivacyLossDistribution`): every
finite loss is rounded *up* to a multiple of ``grid`` (delta(eps) is increasing in each
loss, so this can only raise delta); mass in the lower tail is rounded up to the tail's
edge, mass in the upper tail beyond ``tail_mass`` is moved to +inf (counted in full in
delta). Both are pessimistic, so the computed curve upper-bounds the exact one; the
convolutions are direct sums of non-negative terms (:func:`_convolve`), whose float error is
relative, covered by the final upward margin ``_MARGIN``.

**Renyi divergence** is infinite at every order a > 1 (the 2^-n point), so rho = 2/n in
zCDP is *not* a valid charge. The session rule (:func:`session_epsilon`) combines both kinds
of release soundly by conditioning (an approximate-RDP argument, Bun and Steinke 2016,
Section 8, proved here for our case): fix neighbours D, D'. For every binomial release let
E_i exclude its 2^-n point under D; P_D(S) <= P_D(S and all E_i) + sum_i 2^-n_i, and the
sub-probability P_D 1_E is pointwise below the adaptive composition of the per-release
*conditioned* laws P_i|E_i (each normalised at its own step). That composition is compared
with D' by RDP: at every order a, D_a <= sum over binomial releases of
D_a(P_i|E_i || Q_i) (enumerated, finite: supports now nested) + a rho for the zCDP parts
(their definition). The CKS20 conversion (as :mod:`dp.accounting`) turns that curve into
delta_rdp(eps), and the session is (eps, delta_rdp(eps) + sum_i 2^-n_i)-DP. The direction
D' vs D is the same by reflection. A second sound route is basic composition of the
binomial part's exact PLD curve with the zCDP part's conversion, splitting eps;
:func:`session_epsilon` reports the smaller of the two.

**Any finite noise.** Nothing above uses more than the pmf: :class:`LossDistribution` holds
one release's pair (P, Q) for any integer noise pmf and any integer shift (the binomial is
one instance; ``dp.joint_noise_accounting`` builds the others), and the PLD, the conditioned
Renyi divergences and the session rule work on it. A pmf with more than one point of large
loss (a sum of uniforms has a polynomial edge, not one 2^-n point) conditions on excluding
its largest losses up to a stated ``tail`` mass, which is charged to delta like 2^-n above:
the argument holds for any event E_i fixed in advance.

>>> pld = PrivacyLossDistribution.binomial(64)
>>> 0 < pld.delta(1.0) < 1e-3
True
>>> pair = LossDistribution.from_counts([1, 2, 1], shift=1)  # Binomial(2, 1/2)
>>> pair.infinite, abs(pair.delta(0.0) - binomial_delta(2, 0.0)) < 1e-9
(0.25, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = ["binomial_losses", "binomial_delta", "LossDistribution", "PrivacyLossDistribution",
           "conditioned_renyi", "rdp_to_delta", "session_delta", "session_delta_of",
           "session_epsilon", "session_epsilon_of", "smallest_n", "gaussian_delta"]

# Relative upward margin on every reported delta and epsilon: covers float error (lgamma,
# exp, sums of non-negative terms: ~1e-13 relative at the sizes used) with a wide berth.
_MARGIN = 1e-9
# Orders at which the session's RDP curve is evaluated (any set is sound; this one is dense
# where the optimum lies for deltas 1e-5 .. 1e-12).
RDP_ORDERS = tuple(sorted({1 + i / 16 for i in range(1, 32)} | {3 + i / 4 for i in range(29)}
                          | {float(a) for a in range(11, 65)}
                          | {64 * 1.25 ** i for i in range(1, 25)}))


def _up(x: float) -> float:
    return min(1.0, x * (1 + _MARGIN) + 5e-324) if x < 1 else 1.0


def binomial_losses(n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(finite losses L(x), their P-masses, the +inf mass 2^-n) for x = 1..n."""
    if n < 1:
        raise ValueError("n must be >= 1")
    x = np.arange(1, n + 1, dtype=float)
    losses = np.log(n - x + 1) - np.log(x)
    log_p = (math.lgamma(n + 1) - np.array([math.lgamma(v + 1) + math.lgamma(n - v + 1)
                                            for v in x]) - n * math.log(2))
    return losses, np.exp(log_p), 2.0 ** -n


def binomial_delta(n: int, epsilon: float) -> float:
    """delta(eps) of one release, by enumeration of the pmf, rounded up."""
    losses, masses, infinite = binomial_losses(n)
    above = losses > epsilon
    value = infinite + float(np.sum(masses[above] * -np.expm1(epsilon - losses[above])))
    return _up(value)


@dataclass(frozen=True)
class LossDistribution:
    """One release's pair (P, Q): the finite losses ln(P(x)/Q(x)) over P's support where
    Q > 0, their log P-masses, and the P-mass ``infinite`` where Q = 0.

    For a noise pmf p on {0..L} and neighbours moving the query by ``shift``: P(x) = p(x),
    Q(x) = p(x - shift). A symmetric pmf gives the reverse pair (Q, P) the same distribution
    (reflection x -> L + shift - x), so this one pair describes both directions.
    """

    losses: np.ndarray
    log_masses: np.ndarray
    infinite: float

    @classmethod
    def binomial(cls, n: int) -> LossDistribution:
        losses, masses, infinite = binomial_losses(n)
        x = np.arange(1, n + 1, dtype=float)
        log_p = (math.lgamma(n + 1) - np.array([math.lgamma(v + 1) + math.lgamma(n - v + 1)
                                                for v in x]) - n * math.log(2))
        return cls(losses, log_p, infinite)

    @classmethod
    def from_counts(cls, counts: list[int], shift: int = 1) -> LossDistribution:
        """The pair of the pmf counts[x] / sum(counts) (exact integers, symmetric: checked).
        Ratios of big integers are correctly rounded floats, so each loss and log-mass is
        within a few ulps of the exact value (covered by ``_MARGIN`` and the PLD's upward
        grid)."""
        if shift < 1 or shift >= len(counts):
            raise ValueError("shift must be in [1, support size)")
        if any(c <= 0 for c in counts) or list(counts) != list(reversed(counts)):
            raise ValueError("counts must be positive and symmetric (one pair for both "
                             "directions)")
        total = sum(counts)
        log_total = math.log(total)
        losses = np.array([math.log(counts[x] / counts[x - shift])
                           for x in range(shift, len(counts))])
        log_masses = np.array([math.log(counts[x]) - log_total
                               for x in range(shift, len(counts))])
        exact = Fraction(sum(counts[:shift]), total)
        infinite = float(exact)
        if Fraction(infinite) < exact:  # float() rounds to nearest: take the float above
            infinite = math.nextafter(infinite, 1.0)
        return cls(losses, log_masses, infinite)

    def delta(self, epsilon: float) -> float:
        """delta(eps) of one release, by enumeration, rounded up."""
        above = self.losses > epsilon
        value = self.infinite + float(np.sum(np.exp(self.log_masses[above])
                                             * -np.expm1(epsilon - self.losses[above])))
        return _up(value)

    def conditioning(self, tail: float = 0.0) -> np.ndarray:
        """The event E: a mask over the finite points, dropping the largest losses while the
        dropped finite mass stays <= ``tail`` (the +inf point is always dropped)."""
        keep = np.ones(len(self.losses), dtype=bool)
        if tail > 0:
            order = np.argsort(-self.losses, kind="stable")
            dropped = np.cumsum(np.exp(self.log_masses[order]))
            keep[order[:int(np.searchsorted(dropped, tail, side="right"))]] = False
        return keep

    def failure(self, tail: float = 0.0) -> float:
        """P(not E): the mass charged to delta when the release is conditioned on E."""
        keep = self.conditioning(tail)
        return _up(self.infinite + float(np.exp(self.log_masses[~keep]).sum()))

    def conditioned_renyi(self, orders, tail: float = 0.0) -> dict[float, float]:
        """D_a(P|E || Q) at each order a > 1, rounded up:
        [ln sum_E P(x) e^((a-1) L(x)) - a ln P(E)] / (a - 1), in log space."""
        keep = self.conditioning(tail)
        log_p, losses = self.log_masses[keep], self.losses[keep]
        failure = self.failure(tail)
        if failure >= 1:
            raise ValueError("the conditioning event has no mass")
        log_e = math.log1p(-failure)  # failure is rounded up, so P(E) is rounded down
        out = {}
        for a in orders:
            if a <= 1:
                raise ValueError("orders must be > 1")
            terms = log_p + (a - 1) * losses
            top = float(terms.max())
            value = (top + math.log(float(np.exp(terms - top).sum())) - a * log_e) / (a - 1)
            out[a] = max(value, 0.0) * (1 + _MARGIN) + 1e-15
        return out


@dataclass(frozen=True)
class PrivacyLossDistribution:
    """A pessimistic PLD: mass ``masses[i]`` at loss (offset + i) * grid, plus ``infinite``."""

    grid: float
    offset: int
    masses: np.ndarray
    infinite: float

    @classmethod
    def binomial(cls, n: int, grid: float = 1e-4,
                 tail_mass: float = 1e-15) -> PrivacyLossDistribution:
        losses, masses, infinite = binomial_losses(n)
        return cls._from(losses, masses, infinite, grid, tail_mass)

    @classmethod
    def of(cls, pair: LossDistribution, grid: float = 1e-4,
           tail_mass: float = 1e-15) -> PrivacyLossDistribution:
        """The pessimistic PLD of any release's pair."""
        return cls._from(pair.losses, np.exp(pair.log_masses), pair.infinite, grid, tail_mass)

    @classmethod
    def _from(cls, losses: np.ndarray, masses: np.ndarray, infinite: float, grid: float,
              tail_mass: float) -> PrivacyLossDistribution:
        index = np.ceil(losses / grid).astype(np.int64)  # rounded up
        # Float log may land a hair below an exact multiple; never round down: bump any index
        # whose grid value is below the computed loss.
        index = np.where(index * grid < losses, index + 1, index)
        lo, hi = int(index.min()), int(index.max())
        dense = np.zeros(hi - lo + 1)
        np.add.at(dense, index - lo, masses)
        return cls(grid, lo, dense, infinite)._truncated(tail_mass)

    def _truncated(self, tail_mass: float) -> PrivacyLossDistribution:
        """Upper tail (mass <= tail_mass) to +inf, lower tail (same) up to its edge."""
        m = self.masses
        upper = np.cumsum(m[::-1])[::-1]
        # The first index whose suffix mass is <= tail_mass: that suffix goes to +inf.
        keep_hi = max(int(np.searchsorted(-upper, -tail_mass, side="left")), 1)
        moved_up = float(m[keep_hi:].sum())
        m = m[:keep_hi]
        lower = np.cumsum(m)
        cut = int(np.searchsorted(lower, tail_mass, side="right"))
        cut = min(cut, len(m) - 1)
        head = float(m[:cut + 1].sum())
        body = m[cut:].copy()
        body[0] = head
        return PrivacyLossDistribution(self.grid, self.offset + cut, body,
                                       self.infinite + moved_up)

    def compose(self, other: PrivacyLossDistribution,
                tail_mass: float = 1e-15) -> PrivacyLossDistribution:
        if other.grid != self.grid:
            raise ValueError("compose PLDs on the same grid")
        masses = _convolve(self.masses, other.masses)
        finite = 1 - self.infinite
        infinite = self.infinite + other.infinite * finite
        return PrivacyLossDistribution(self.grid, self.offset + other.offset, masses,
                                       infinite)._truncated(tail_mass)

    def self_compose(self, k: int, tail_mass: float = 1e-15) -> PrivacyLossDistribution:
        """k-fold composition by repeated squaring (at most 2 log2 k convolutions)."""
        if k < 1:
            raise ValueError("k must be >= 1")
        result, power = None, self
        for _ in range(k.bit_length()):  # bounded by the bits of k
            if k & 1:
                result = power if result is None else result.compose(power, tail_mass)
            k >>= 1
            if k:
                power = power.compose(power, tail_mass)
        return result

    def delta(self, epsilon: float) -> float:
        """Hockey-stick divergence at eps (an upper bound on the exact curve), rounded up."""
        losses = (self.offset + np.arange(len(self.masses))) * self.grid
        above = losses > epsilon
        value = self.infinite + float(np.sum(self.masses[above]
                                             * -np.expm1(epsilon - losses[above])))
        return _up(value)

    def epsilon(self, delta: float) -> float:
        """Smallest eps on a bisection (to 1e-9) with delta(eps) <= delta; rounded up."""
        if self.delta(0.0) <= delta:
            return 0.0
        hi = float((self.offset + len(self.masses)) * self.grid) + 1.0
        if self.delta(hi) > delta:
            return math.inf
        return _smallest_holding(lambda eps: self.delta(eps) <= delta, 0.0, hi, 100, 1e-9)


def _smallest_holding(holds, lo: float, hi: float, steps: int, tolerance: float) -> float:
    """Bounded bisection for the smallest eps in (lo, hi] where the monotone ``holds`` is
    true (it holds at hi), widened by _MARGIN so the result is never below it."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        if holds(mid):
            hi = mid
        else:
            lo = mid
        if hi - lo < tolerance:
            break
    return hi * (1 + _MARGIN)


def _convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Full convolution as direct sums of non-negative products: over the non-zero entries
    when they are few (small n spreads few masses over a long grid), else dense."""
    ia, ib = np.flatnonzero(a), np.flatnonzero(b)
    if len(ia) * len(ib) <= 4 * 10 ** 6:
        index = (ia[:, None] + ib[None, :]).ravel()
        weights = (a[ia][:, None] * b[ib][None, :]).ravel()
        return np.bincount(index, weights=weights, minlength=len(a) + len(b) - 1)
    return np.convolve(a, b)


def conditioned_renyi(n: int, order: float) -> float:
    """D_a(P|E || Q) for one release: P conditioned on excluding its 2^-n point (x = 0),
    Q unchanged; by enumeration in log space, rounded up."""
    if order <= 1:
        raise ValueError("order must be > 1")
    x = np.arange(1, n + 1, dtype=float)
    log_comb = math.lgamma(n + 1) - np.array([math.lgamma(v + 1) + math.lgamma(n - v + 1)
                                              for v in x])
    log_p = log_comb - n * math.log(2) - math.log1p(-2.0 ** -n)  # C(n, x) / (2^n - 1)
    log_q = log_comb + np.log(x) - np.log(n - x + 1) - n * math.log(2)  # C(n, x-1) / 2^n
    terms = order * log_p + (1 - order) * log_q
    top = float(terms.max())
    value = (top + math.log(float(np.exp(terms - top).sum()))) / (order - 1)
    return max(value, 0.0) * (1 + _MARGIN) + 1e-15


def rdp_to_delta(curve: dict[float, float], epsilon: float) -> float:
    """CKS20 Proposition 12 at each order, minimised: delta = exp((a-1)(D_a - eps)) / a
    * (1 - 1/a)^(a-1)."""
    best = 1.0
    for a, d in curve.items():
        log_delta = (a - 1) * (d - epsilon) - math.log(a) + (a - 1) * math.log1p(-1 / a)
        best = min(best, math.exp(min(log_delta, 0.0)))
    return _up(best)


def session_delta(binomial_ns: list[int], rho: Fraction | float, epsilon: float,
                  orders=RDP_ORDERS) -> float:
    """delta of a session at eps: binomial releases (one n per count query of sensitivity 1)
    plus zCDP parts of total rho, by the conditioning rule (module docstring), rounded up."""
    counts: dict[int, int] = {}
    for n in binomial_ns:
        counts[n] = counts.get(n, 0) + 1
    return session_delta_of([(LossDistribution.binomial(n), k, 0.0)
                             for n, k in sorted(counts.items())], rho, epsilon, orders)


def session_delta_of(parts: list[tuple[LossDistribution, int, float]], rho: Fraction | float,
                     epsilon: float, orders=RDP_ORDERS) -> float:
    """delta of a session at eps: ``parts`` are (pair, how many such releases a record's
    neighbours differ in, the conditioning tail of each), plus zCDP parts of total rho; the
    conditioning rule of the module docstring, rounded up."""
    curve, failure = _session_curve(parts, rho, orders)
    return _up(rdp_to_delta(curve, epsilon) + failure)


def _session_curve(parts, rho, orders) -> tuple[dict[float, float], float]:
    """The session's RDP curve (conditioned parts plus a rho) and its failure mass: neither
    depends on eps, so a search over eps computes them once."""
    rho = float(rho)
    curve = {a: a * rho for a in orders}
    failure = 0.0
    for pair, k, tail in parts:
        for a, d in pair.conditioned_renyi(orders, tail).items():
            curve[a] += k * d
        failure += k * pair.failure(tail)
    return curve, failure


def _zcdp_delta(rho: float, epsilon: float) -> float:
    if rho == 0:
        return 0.0
    return rdp_to_delta({a: a * rho for a in RDP_ORDERS}, epsilon)


def session_epsilon(binomial_ns: list[int], rho: Fraction | float, delta: float,
                    grid: float = 1e-4) -> float:
    """Smallest eps (bisection) with the session (eps, delta)-DP by either sound route: the
    conditioning rule, or basic composition of the binomial part's PLD (eps_1, delta_1) with
    the zCDP part's conversion (eps - eps_1, delta - delta_1). Rounded up."""
    counts: dict[int, int] = {}
    for n in binomial_ns:
        counts[n] = counts.get(n, 0) + 1
    return session_epsilon_of([(LossDistribution.binomial(n), k, 0.0)
                               for n, k in sorted(counts.items())], rho, delta, grid)


def session_epsilon_of(parts: list[tuple[LossDistribution, int, float]],
                       rho: Fraction | float, delta: float, grid: float = 1e-4) -> float:
    """:func:`session_epsilon` for any parts (as :func:`session_delta_of`). The PLD route
    needs no conditioning, so it composes each part's full pair."""
    pld = None
    for pair, k, _ in parts:
        part = PrivacyLossDistribution.of(pair, grid).self_compose(k)
        pld = part if pld is None else pld.compose(part)
    rho_f = float(rho)
    curve, failure = _session_curve(parts, rho_f, RDP_ORDERS)

    def holds(eps: float) -> bool:
        if _up(rdp_to_delta(curve, eps) + failure) <= delta:
            return True
        if pld is None:
            return False
        for share in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0):  # basic composition
            e1 = eps * share
            if pld.delta(e1) + _zcdp_delta(rho_f, eps - e1) <= delta:
                return True
        return False

    lo, hi = 0.0, 1.0
    for _ in range(60):  # bounded doubling
        if holds(hi):
            break
        lo, hi = hi, hi * 2
    else:
        return math.inf
    return _smallest_holding(holds, lo, hi, 60, 1e-7)


def smallest_n(epsilon: float, delta: float, releases: int = 1, grid: float = 1e-4,
               n_max: int = 1 << 26) -> int:
    """Smallest even n such that ``releases`` compositions of the noise are (eps, delta)-DP
    (exact PLD, pessimistic grid). Adding noise is post-processing, so delta(eps) falls as n
    grows and bisection is valid."""
    def ok(n: int) -> bool:
        pld = PrivacyLossDistribution.binomial(n, grid).self_compose(releases)
        return pld.delta(epsilon) <= delta

    lo, hi = 2, 2
    for _ in range(64):  # bounded doubling
        if ok(hi):
            break
        lo, hi = hi, hi * 2
        if hi > n_max:
            raise ValueError("no n up to n_max meets the target")
    if ok(lo):
        return lo
    while hi - lo > 2:  # bounded: the gap halves each pass
        mid = (lo + hi) // 4 * 2
        if mid in (lo, hi):
            break
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def gaussian_delta(sigma2: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """The continuous Gaussian's exact curve (Balle and Wang 2018), a reference only."""
    s = math.sqrt(sigma2)
    a, b = sensitivity / (2 * s), epsilon * s / sensitivity

    def phi(t: float) -> float:
        return 0.5 * math.erfc(-t / math.sqrt(2))

    return phi(a - b) - math.exp(epsilon) * phi(-a - b)
