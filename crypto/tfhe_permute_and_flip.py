"""FedDPSyn's Primitive 3 (TFHE-EM, Section 4 and Appendix C) as permute-and-flip in a hidden
order: private selection of one attribute pair under TFHE, with SubRoutine 1's (TFHE-EXP)
fixed-point weights sampled as Bernoulli trials.

Input: every candidate pair's encrypted InDif score as binary digits (Primitive 2,
``crypto.indif`` with ``output="bits"``). Output: an encrypted one-hot vector; the key server
decrypts it and learns the chosen index, nothing else. The paper's Primitive 3 samples the
exponential mechanism; permute-and-flip (McKenna and Sheldon, NeurIPS 2020;
``dp.permute_and_flip`` is its exact plaintext sampler) takes its place, with the same
(eps + 4 e') shape of guarantee (Theorem C.1), shown below.

**Guarantee.** One selection at PF epsilon eps is (eps + 4 eta)-DP, eta the exact worst-case
deviation of the fixed-point weights (:func:`step_eta`); :func:`plan_step` charges
rho = (eps + 4 eta)^2 / 2. Each server's view is its own data-independent randomness plus one
PF sample. ``tests/crypto/test_selection.py`` checks the circuit against :func:`select_plaintext`
and the claim on neighbouring scores; ``tests/crypto/test_selection_views.py`` enumerates both
views.

The arithmetic, per selection (S candidates, scores quantised to q = floor(InDif / 2^t)):

1. **Encrypted maximum**, most significant digit first: ``alive_r`` marks the candidates whose
   prefix equals the maximum's so far; the maximum's digit m_j is the OR over alive candidates
   of their digit (an OR tree of 3-input sums, so no lookup is wider than 3 bits).
2. **A_r = q_max - q_r** by a ripple-borrow subtraction of digits (two 3-bit lookups a digit).
3. **TFHE-EXP as a product of Bernoulli trials.** SubRoutine 1 multiplies, for every set bit
   j of A (n_b bits, A clamped at 2^n_b - 1), by the rounding constant
   c_j / 2^kappa'_j, c_j = round(2^kappa'_j exp(-gamma 2^j)). Permute-and-flip only needs to
   *accept* candidate r with probability W(A_r) = prod_{j: bit j of A_r} c_j / 2^kappa'_j, and
   a product of probabilities is the probability that independent trials all succeed: bit j
   "passes" if it is 0 or if a uniform kappa'_j-bit R_rj is < c_j. So the product is exact
   (SubRoutine 1's intermediate rounding to kappa bits disappears) and costs no wide lookup:
   the comparison R < c with a clear c is a chain of 3-bit lookups. The clamp: if A has a bit
   at or above n_b, every one of the n_b trials must pass (A = 2^n_b - 1).
4. **Permute-and-flip's first acceptance in a hidden order.** Permute-and-flip outputs the
   first accepted candidate in a uniformly random order; since the order is independent of
   the coins, that is a uniformly random member of the accepted set. Here every position i
   carries an encrypted priority pi_KS(i), a fresh uniform permutation of 0..S-1 drawn by the
   key server, and the compute server places candidate tau(i) at position i in its own secret
   uniform order tau. The output is the accepted candidate of least priority (an encrypted
   minimum, most significant priority bit first, like the maximum of step 1). Candidate r's
   priority is pi_KS(tau^-1(r)): a uniform permutation given pi_KS (tau is unknown to the key
   server) and given tau (pi_KS is unknown to the compute server). Priorities are distinct,
   so exactly one output is 1 (the best candidate, A = 0, always accepts): no ties, no
   statistical slack. The compute server puts the outputs back in candidate order before the
   key server decrypts them.

**Whose randomness, and each server's view.** Both servers learn the chosen pair, so neither
may know the coins or the order: a server that knows the order learns from the output that
every candidate ahead of it rejected, and the best candidate never rejects, so some
(order, output) pairs would have probability 0 on one table and not on a neighbour. Every
R_rj is R^KS_rj XOR R^CS_rj: the key server encrypts fresh uniform bits R^KS, the compute
server XORs its own clear bits in (a leveled operation). A server's view is its own
randomness (R^CS and tau, or R^KS and pi_KS; ``crypto.selection_randomness``), ciphertexts
(computationally hidden) and the output. Given its own randomness, the trials' bits R are
uniform and the priorities a uniform permutation, so the output is distributed exactly as
permute-and-flip with weights W: the view is (its own data-independent randomness, a PF
sample), and the bound below holds for it.

**Privacy** (our derivation, in the style of McKenna and Sheldon's proof). With acceptance
probabilities p_r = h(A_r), PF outputs r with probability p_r * integral_0^1
prod_{s != r} (1 - p_s x) dx. If p_s >= lam p'_s for every s, the integral grows by at most
1/lam (substitute x -> lam x). For neighbours D, D' (each quantised score moves by at most
1, so A_r and A_s move with the maximum's move cancelling between the two factors) and
h(A) = exp(-gamma A + delta(A)) with |delta| <= eta, delta(0) = 0:
P_r(D) / P_r(D') <= exp(gamma (A'_r - A_r) + 2 eta) * exp(gamma (A_s - A'_s) + 2 eta)
<= exp(2 gamma + 4 eta). With gamma = eps / 2 the step is (eps + 4 eta)-DP, eta the exact
worst case over every A (``crypto.exp_privacy.bernoulli_product_eta``): Theorem C.1's
"eps + 4e'" shape, shown here for permute-and-flip. Clamping A is 1-Lipschitz and keeps the
bound. Quantising InDif (sensitivity 1, add/remove) by floor(. / 2^t) keeps sensitivity 1.

The same round runs by candidate batches (``crypto.selection_batches``) with the same output
and views; ``crypto.private_selection`` compiles either form in one key set with Primitive 2,
and ``crypto.selection_cost`` counts its bootstraps.

>>> shape = SelectionShape(candidates=3, score_bits=4, drop_bits=0, nb=3, kappa_prime=(4, 4, 4))
>>> thresholds(shape, Fraction(1)), shape.priority_bits
([10, 6, 2], 2)
"""

from __future__ import annotations

import functools
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any, cast

import numpy as np
from concrete import fhe

from feddpsyn.crypto._concrete import ensure_tag_stack, lookup, table
from feddpsyn.crypto.exp_privacy import product_eta
from feddpsyn.crypto.selection_randomness import random_priorities, random_share, secure_order

__all__ = ["SelectionShape", "SelectionStep", "plan_step", "choose_shape", "step_eta",
           "thresholds", "threshold_bits", "clear_arguments", "acceptance_weights",
           "select_plaintext", "select_core", "compile_selection", "em_rounds_model",
           # the pieces the batched round (``crypto.selection_batches``) is built from
           "quantised_scores", "priority_values", "accepted_plaintext", "encrypted_maximum",
           "encrypted_acceptances", "least_priority", "or_elements", "AND_TABLE"]

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class SelectionShape:
    """The widths one compiled selection circuit serves.

    ``score_bits``: digits of the InDif input; ``drop_bits`` (t): low digits ignored
    (q = floor(InDif / 2^t)); ``nb``: bits of A before the clamp; ``kappa_prime``: random bits
    per Bernoulli trial, one per bit of A (SubRoutine 1's kappa'_j).
    """

    candidates: int
    score_bits: int
    drop_bits: int
    nb: int
    kappa_prime: tuple[int, ...]
    batch: int = 1  # independent selections per run (the tests' frequency checks use many)
    # Random bits each comparison lookup consumes (the lookup is trial_bits + 1 wide). 3 saves
    # 17% of the bootstraps but its 4-bit lookups need N = 2048: complexity only -3% (lean
    # set, Fed-Heart widths, concrete 2.11's optimiser), so 2.
    trial_bits: int = 2

    def __post_init__(self) -> None:
        if self.candidates < 2:
            raise ValueError("selection needs at least 2 candidates")
        if not 0 <= self.drop_bits < self.score_bits:
            raise ValueError("drop_bits must leave at least one score digit")
        if len(self.kappa_prime) != self.nb or self.nb < 1 or min(self.kappa_prime) < 1:
            raise ValueError("need n_b >= 1 and one kappa'_j >= 1 per bit of A")
        if not 1 <= self.trial_bits <= 3:
            raise ValueError("a comparison lookup consumes 1 to 3 random bits")

    @property
    def quantised_bits(self) -> int:
        return self.score_bits - self.drop_bits

    @property
    def random_bits(self) -> int:
        return sum(self.kappa_prime)

    @property
    def priority_bits(self) -> int:
        """Digits of a position's priority, a value in 0..S-1."""
        return max(1, (self.candidates - 1).bit_length())


def thresholds(shape: SelectionShape, epsilon: Fraction) -> list[int]:
    """c_j = round(2^kappa'_j exp(-gamma 2^j)), gamma = eps / 2 (sensitivity 1), computed at 50
    digits so no platform's libm decides a public constant; every c_j must be >= 1 (a zero
    weight would make the loss unbounded)."""
    out = []
    with localcontext() as ctx:
        ctx.prec = 50
        gamma = Decimal(epsilon.numerator) / Decimal(epsilon.denominator) / 2
        for j, kp in enumerate(shape.kappa_prime):
            c = int((Decimal(2) ** kp * (-(gamma * 2 ** j)).exp())
                    .to_integral_value(rounding="ROUND_HALF_EVEN"))
            if c < 1:
                raise ValueError(f"kappa'_{j} = {kp} rounds weight bit {j} to 0 at eps = "
                                 f"{float(epsilon):g}: raise kappa'_{j} or lower n_b")
            out.append(c)
    return out


def acceptance_weights(shape: SelectionShape, c: list[int]) -> list[Fraction]:
    """W(A) for every A in [0, 2^n_b): the exact acceptance probability of a candidate."""
    out = []
    for a in range(2 ** shape.nb):
        w = Fraction(1)
        for j, kp in enumerate(shape.kappa_prime):
            if (a >> j) & 1:
                w *= Fraction(c[j], 2 ** kp)
        out.append(w)
    return out


def step_eta(shape: SelectionShape, epsilon: Fraction) -> float:
    """eta: the exact worst-case |ln W(A) + gamma A| of this shape's weights at ``epsilon``."""
    gamma = float(epsilon) / 2
    return product_eta(thresholds(shape, epsilon), shape.kappa_prime,
                       [gamma * 2 ** j for j in range(shape.nb)])


@dataclass(frozen=True)
class SelectionStep:
    """One selection's budget: PF at ``epsilon`` with fixed-point weights is
    (epsilon + 4 eta)-DP; the ledger charges rho = (epsilon + 4 eta)^2 / 2 (pure DP to zCDP)."""

    epsilon: Fraction
    eta: float
    epsilon_total: Fraction  # epsilon + 4 eta, rounded up
    rho: Fraction            # charged, rounded up

    @classmethod
    def of(cls, epsilon: Fraction, eta: float) -> SelectionStep:
        """The step of PF epsilon ``epsilon`` with weights' deviation ``eta``: its total
        rounded up to the 1e-12 grid, charged total^2 / 2."""
        total = Fraction(math.ceil((float(epsilon) + 4 * eta) * _STEP_GRID) + 1, _STEP_GRID)
        return cls(epsilon, eta, total, total * total / 2)


# The grid of a step's epsilon and of its rounded-up total.
_STEP_GRID = 10 ** 12


@functools.lru_cache(maxsize=256)
def plan_step(rho_step: Fraction, shape: SelectionShape) -> SelectionStep:
    """The largest PF epsilon (bisection on a 1e-12 grid, 60 steps) whose total loss,
    numerical error included, fits ``rho_step``; fails closed if none does. Cached: a plan's
    build asks for the same steps several times (its reserves' fixed point), and every
    session of the same plan asks again; the answer is a frozen value."""
    grid = _STEP_GRID

    def step(eps: Fraction) -> SelectionStep:
        return SelectionStep.of(eps, step_eta(shape, eps))

    low, high = 0, math.floor(math.sqrt(2 * float(rho_step)) * grid)
    best = None
    for _ in range(60):
        if high <= low:
            break
        middle = (low + high + 1) // 2
        try:
            candidate = step(Fraction(middle, grid))
        except ValueError:  # a weight rounds to 0 at this epsilon: smaller epsilons first
            high = middle - 1
            continue
        if candidate.rho <= rho_step:
            best, low = candidate, middle
        else:
            high = middle - 1
    if best is None:
        raise ValueError(f"no selection epsilon fits rho = {float(rho_step):.3g} with this "
                         "shape (raise kappa'_j)")
    return best


def choose_shape(candidates: int, score_bits: int, epsilon: float, *,
                 relative_loss: float = 0.01, clamp_exponent: float = 12.0,
                 batch: int = 1) -> SelectionShape:
    """Widths for a target PF epsilon: n_b so that the clamp only touches weights below
    e^-clamp_exponent, and kappa'_j so that each c_j / 2^kappa'_j is within
    relative_loss * eps / (4 n_b) of exp(-gamma 2^j) (so 4 eta <= relative_loss * eps)."""
    gamma = epsilon / 2
    nb = 1
    while gamma * (2 ** nb - 1) < clamp_exponent and nb < score_bits:
        nb += 1
    per_bit = relative_loss * epsilon / (4 * nb)
    kappa_prime = tuple(max(2, math.ceil(math.log2(1 / (2 * per_bit)) + gamma * 2 ** j
                                         / math.log(2)))
                        for j in range(nb))
    return SelectionShape(candidates=candidates, score_bits=score_bits, drop_bits=0, nb=nb,
                          kappa_prime=kappa_prime, batch=batch)


def _bits_of(value: int, width: int) -> list[int]:
    return [(value >> i) & 1 for i in range(width)]


def threshold_bits(shape: SelectionShape, c: list[int]) -> Array:
    """The clear comparison constants: bits of c_j - 1 (test R <= c_j - 1), LSB first."""
    out = []
    for kp, cj in zip(shape.kappa_prime, c):
        if not 1 <= cj <= 2 ** kp:
            raise ValueError("c_j must lie in [1, 2^kappa'_j]")
        out += _bits_of(cj - 1, kp)
    return np.array(out, dtype=np.int64)


def select_plaintext(digits: Array, active: Array, r_ks: Array,
                     r_cs: Array, shape: SelectionShape, c: list[int],
                     priority: Array) -> Array:
    """The circuit's exact integer model: the one-hot output, in the input (position) order.
    ``priority``: each position's priority (a permutation of 0..S-1, or its bits (S, w))."""
    q = quantised_scores(digits, active, shape)
    accept = accepted_plaintext(q.max() - q, active, r_ks, r_cs, shape, c)
    priority = priority_values(priority)
    out = np.zeros(len(q), dtype=np.int64)
    # the accepted position of least priority (rejected ones rank after every accepted one)
    out[np.argmin(np.where(accept, priority, len(q) + priority))] = 1
    return out


def quantised_scores(digits: Array, active: Array, shape: SelectionShape) -> Array:
    """q = floor(InDif / 2^t) of one selection's digit vectors (S, n); 0 where inactive."""
    digits = np.asarray(digits, dtype=np.int64)  # (S, n): one selection
    out: Array = sum(digits[:, j] << (j - shape.drop_bits)
                     for j in range(shape.drop_bits, shape.score_bits)) * np.asarray(active)
    return out


def priority_values(priority: Array) -> Array:
    """Each position's priority as a value, from values or from their bits (S, w), least
    significant first."""
    priority = np.asarray(priority, dtype=np.int64)
    if priority.ndim == 2:
        # sum's start value 0 is returned only for no bits (w = 0); a priority has w >= 1.
        priority = cast(Array, sum(priority[:, i] << i for i in range(priority.shape[1])))
    return priority


def accepted_plaintext(a: Array, active: Array, r_ks: Array, r_cs: Array, shape: SelectionShape,
                       c: list[int]) -> Array:
    """Each candidate's acceptance given A = max - q: active, and every trial of a set bit of
    the clamped A passes (R = R_KS XOR R_CS <= c_j - 1)."""
    r = np.asarray(r_ks, dtype=np.int64) ^ np.asarray(r_cs, dtype=np.int64)
    accept = np.asarray(active, dtype=bool).copy()
    pos = 0
    clamped = np.minimum(a, 2 ** shape.nb - 1)
    for j, kp in enumerate(shape.kappa_prime):
        trial = sum(r[:, pos + i] << i for i in range(kp))
        pos += kp
        accept &= ~(((clamped >> j) & 1).astype(bool) & (trial >= c[j]))
    return accept


def clear_arguments(digits: Array, active: Array, r_ks: Array, r_cs: Array, priority: Array
                    ) -> tuple[Array, Array, Array, Array, Array, Array]:
    """The circuit's argument tuple from the natural inputs (see ``select_core``);
    ``priority``: the key server's priority bits, (batch, S, priority_bits)."""
    r_cs = np.asarray(r_cs, dtype=np.int64)
    return (np.asarray(digits, dtype=np.int64), np.asarray(active, dtype=np.int64),
            np.asarray(r_ks, dtype=np.int64), np.asarray(priority, dtype=np.int64),
            2 * r_cs, r_cs)


_NONZERO = table(lambda s: int(s > 0), 2)          # OR of up to 3 bits, from their sum
AND_TABLE = table(lambda i: int(i == 3), 2)         # x + 2y
_KEEP_ALIVE = table(lambda i: (i & 1) & int(((i >> 1) & 1) or not (i >> 2) & 1), 3)
_DIFF = table(lambda i: ((i & 1) - ((i >> 1) & 1) - (i >> 2)) % 2, 3)   # m + 2b + 4borrow
_BORROW = table(lambda i: int((i & 1) - ((i >> 1) & 1) - (i >> 2) < 0), 3)


def _le_table(d_bits: list[int]) -> fhe.LookupTable:
    """R <= d, ``len(d_bits)`` bits of R per lookup from the least significant: index
    r + 2^w le (r: those w bits of R; le: the lower bits of R are <= those of d)."""
    w = len(d_bits)
    d = sum(b << i for i, b in enumerate(d_bits))
    return table(lambda i: int((i % 2 ** w) < d or ((i % 2 ** w) == d and (i >> w) & 1)), w + 1)


_FAIL = table(lambda i: int(((i & 1) or ((i >> 1) & 1)) and not (i >> 2)), 3)  # a + 2sat + 4beta


def _or_columns(columns: list[Any]) -> Any:
    """OR of encrypted 0/1 vectors of equal length, three at a time (sums stay <= 3)."""
    columns = list(columns)
    while len(columns) > 1:
        grouped = []
        for i in range(0, len(columns), 3):
            part = columns[i:i + 3]
            total = part[0]
            for p in part[1:]:
                total = total + p
            grouped.append(lookup(_NONZERO, total) if len(part) > 1 else total)
        columns = grouped
    return columns[0]


def or_elements(matrix: Any, length: int) -> Any:
    """OR over the last axis of an encrypted 0/1 (batch, length) matrix."""
    return _or_columns([matrix[:, i] for i in range(length)])


def _selection_function(shape: SelectionShape, c: list[int]) -> Callable[..., tuple[Any, ...]]:
    def select(digits: Any, active: Any, r_ks: Any, priority: Any, xor_twice: Any,
               xor_shift: Any) -> tuple[Any, ...]:
        columns = [digits[:, :, j] for j in range(shape.score_bits)]
        return select_core(shape, c, columns, active, r_ks, priority, xor_twice, xor_shift)

    return select


def select_core(shape: SelectionShape, c: list[int], columns: list[Any], active: Any, r_ks: Any,
                priority: Any, xor_twice: Any, xor_shift: Any) -> tuple[Any, ...]:
    """The traced arithmetic; ``columns[j]`` is digit j of every candidate, (batch, S);
    ``priority`` the key server's encrypted priority bits, (batch, S, priority_bits).

    concrete multiplies only when one side is encrypted, so the compute server passes its clear
    inputs pre-scaled (:func:`clear_arguments`): xor_twice = 2 R_cs, xor_shift = R_cs. The
    thresholds c_j are compiled in (one session, one epsilon per step), which lets each lookup
    of the comparisons consume two random bits."""
    s, n, t = shape.candidates, shape.score_bits, shape.drop_bits
    q = [columns[j] * active for j in range(t, n)]  # inactive candidates score 0
    # 1. the maximum, most significant digit first
    top = encrypted_maximum(q, active, s, shape.batch)
    accept = encrypted_acceptances(shape, c, q, top, active, r_ks, xor_twice, xor_shift)
    # 4. the accepted position of least priority, most significant priority bit first.
    # Every output is a _KEEP_ALIVE lookup, so all share one encoding and the compute server
    # may put them back in candidate order before decryption.
    lows = [1 - priority[:, :, j] for j in range(shape.priority_bits)]  # 1 where the bit is 0
    alive, _ = least_priority(accept, lows, s, shape.batch)
    return tuple(alive[:, i] for i in range(s))  # one (batch,) output per position


def encrypted_maximum(q: list[Any], active: Any, s: int, batch: int) -> list[Any]:
    """Digits of max_r q_r, most significant first: ``alive_r`` marks the candidates whose
    prefix equals the maximum's so far; each digit of the maximum, (batch, 1), broadcasts
    over the S candidates."""
    width = len(q)
    top: list[Any]  # None until the loop below sets each digit
    alive, top = None, [None] * width
    for j in reversed(range(width)):
        hits = q[j] if alive is None else lookup(AND_TABLE, alive + 2 * q[j])
        top[j] = or_elements(hits, s).reshape((batch, 1))  # broadcast over S
        alive = (lookup(_KEEP_ALIVE, active + 2 * q[j] + 4 * top[j]) if alive is None
                 else lookup(_KEEP_ALIVE, alive + 2 * q[j] + 4 * top[j]))
    return top


def encrypted_acceptances(shape: SelectionShape, c: list[int], q: list[Any], top: list[Any],
                          active: Any, r_ks: Any, xor_twice: Any, xor_shift: Any) -> Any:
    """Each candidate's acceptance, (batch, candidates): A = max - q by a ripple borrow, then
    one Bernoulli trial per bit of A."""
    d_bits = threshold_bits(shape, c).tolist()
    width = len(q)
    # 2. A = max - q, least significant digit first
    a_bits, borrow = [], None
    for j in range(width):
        index = top[j] + 2 * q[j] + (0 if borrow is None else 4 * borrow)
        a_bits.append(lookup(_DIFF, index))
        if j + 1 < width:
            borrow = lookup(_BORROW, index)
    saturated = (_or_columns(a_bits[shape.nb:]) if width > shape.nb else None)
    # 3. one Bernoulli trial per bit of A: R = R_ks XOR R_cs, pass iff R <= c_j - 1
    r = (r_ks + xor_shift) - r_ks * xor_twice  # XOR, never negative
    fails, pos = [], 0
    for j, kp in enumerate(shape.kappa_prime):
        le: Any = None  # no lower bits yet: "<=" holds
        for i in range(0, kp, shape.trial_bits):
            w = min(shape.trial_bits, kp - i)
            low = r[:, :, pos + i]
            for t in range(1, w):
                low = low + (2 ** t) * r[:, :, pos + i + t]
            le = lookup(_le_table(d_bits[pos + i:pos + i + w]),
                        low + 2 ** w * (1 if le is None else le))
        pos += kp
        a_j = a_bits[j] if j < width else 0 * r[:, :, 0]
        fails.append(lookup(_FAIL, a_j + 2 * (0 if saturated is None else saturated) + 4 * le))
    fails.append(fails[0] * 0 + 1 - active)
    return 1 - _or_columns(fails)


def least_priority(alive: Any, lows: list[Any], s: int, batch: int) -> tuple[Any, list[Any]]:
    """The alive position of least priority, most significant priority bit first: a position
    stays alive while its prefix is 0 wherever some alive position's prefix is 0. ``lows[j]``:
    1 where bit j of a position's priority is 0, (batch, s). Returns the final alive, one-hot
    or all 0 when nothing was alive, and per bit j whether some alive position had a 0 there,
    (batch, 1): the least priority's bit j is its complement."""
    any_low: list[Any] = [None] * len(lows)
    for j in reversed(range(len(lows))):
        hits = lookup(AND_TABLE, alive + 2 * lows[j])
        any_low[j] = or_elements(hits, s).reshape((batch, 1))
        alive = lookup(_KEEP_ALIVE, alive + 2 * lows[j] + 4 * any_low[j])
    return alive, any_low


def compile_selection(shape: SelectionShape, c: list[int], p_error: float) -> fhe.Circuit:
    """Compile Primitive 3 for ``shape`` and thresholds ``c`` (every lookup at most 3 bits)."""
    ensure_tag_stack()
    compiler = fhe.Compiler(_selection_function(shape, c),
                            {"digits": "encrypted", "active": "clear", "r_ks": "encrypted",
                             "priority": "encrypted", "xor_twice": "clear", "xor_shift": "clear"})
    b, s, n, w = shape.batch, shape.candidates, shape.score_bits, shape.random_bits
    pw = shape.priority_bits
    rng = np.random.default_rng(0)
    inputset = []
    for i in range(12):
        inputset.append(clear_arguments(rng.integers(0, 2, (b, s, n)),
                                        rng.integers(0, 2, s) | (i % 2),
                                        rng.integers(0, 2, (b, s, w)),
                                        rng.integers(0, 2, (b, s, w)),
                                        rng.integers(0, 2, (b, s, pw))))
    ones = np.ones((b, s, w), dtype=np.int64)
    inputset.append(clear_arguments(np.ones((b, s, n), dtype=np.int64), ones[0, :, 0], ones,
                                    0 * ones, np.ones((b, s, pw), dtype=np.int64)))
    configuration = fhe.Configuration(p_error=p_error, global_p_error=None, show_progress=False,
                                      compress_evaluation_keys=True,
                                      compress_input_ciphertexts=True)
    return compiler.compile(inputset, configuration)


def em_rounds_model(scores: list[int], shape: SelectionShape, c: list[int], rounds: int,
                    randbits: Callable[[int], int] = secrets.randbits) -> list[int]:
    """Indices chosen by ``rounds`` encrypted selections, modelled exactly in clear: the
    compute server's order, joint random bits, the key server's priorities, the accepted
    candidate of least priority (the benchmark's simulation; tests prove each stage
    bit-identical to the circuits)."""
    s = shape.candidates
    if len(scores) != s:
        raise ValueError("one score per compiled candidate")
    digits = np.array([[(int(v) >> j) & 1 for j in range(shape.score_bits)] for v in scores])
    active = np.ones(s, dtype=np.int64)
    chosen = []
    for _ in range(rounds):
        order = secure_order(s, randbits)
        r_ks, r_cs = random_share(shape, randbits)[0], random_share(shape, randbits)[0]
        priority = random_priorities(shape, randbits)[0]
        one_hot = select_plaintext(digits[order], active[order], r_ks, r_cs, shape, c, priority)
        pick = order[int(np.argmax(one_hot))]
        chosen.append(pick)
        active[pick] = 0
    return chosen
