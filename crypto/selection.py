"""Primitive 3 (FedDPSyn, Section 4 and Appendix C): private selection of one attribute pair
under TFHE, by permute-and-flip with TFHE-EXP's fixed-point weights.

Input: every candidate pair's encrypted InDif score as binary digits (Primitive 2,
``crypto.indif`` with ``output="bits"``). Output: an encrypted one-hot vector; the key server
decrypts it and learns the chosen index, nothing else.

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
(order, output) pairs have probability 0 on one table and not on a neighbour (the first
version of this circuit had that defect: the compute server chose the order in clear).
Every R_rj is R^KS_rj XOR R^CS_rj: the key server encrypts fresh uniform bits R^KS, the
compute server XORs its own clear bits in (a leveled operation). A server's view is its own
randomness (R^CS and tau, or R^KS and pi_KS), ciphertexts (computationally hidden) and the
output. Given its own randomness, the trials' bits R are uniform and the priorities a uniform
permutation, so the output is distributed exactly as permute-and-flip with weights W: the
view is (its own data-independent randomness, a PF sample), and the bound below holds for
it. ``tests/test_selection_views.py`` enumerates both views exactly on tiny instances.

**Privacy** (our derivation, in the style of McKenna and Sheldon's proof). With acceptance
probabilities p_r = h(A_r), PF outputs r with probability p_r * integral_0^1
prod_{s != r} (1 - p_s x) dx. If p_s >= lam p'_s for every s, the integral grows by at most
1/lam (substitute x -> lam x). For neighbours D, D' (each quantised score moves by at most
1, so A_r and A_s move with the maximum's move cancelling between the two factors) and
h(A) = exp(-gamma A + delta(A)) with |delta| <= eta, delta(0) = 0:
P_r(D) / P_r(D') <= exp(gamma (A'_r - A_r) + 2 eta) * exp(gamma (A_s - A'_s) + 2 eta)
<= exp(2 gamma + 4 eta). With gamma = eps / 2 the step is (eps + 4 eta)-DP, eta the exact
worst case over every A (``crypto.exp_privacy.bernoulli_product_eta``): Theorem C.1's
"eps + 4e'" shape, now shown for permute-and-flip. Clamping A is 1-Lipschitz and keeps the
bound. Quantising InDif (sensitivity 1, add/remove) by floor(. / 2^t) keeps sensitivity 1.

**Candidate batches** (so that a round scales with cores; ``crypto.private_selection`` compiles
these as functions of the same module, ``computeserver.selection.batched_select`` schedules
them). The S positions are cut into B batches of n (:class:`BatchLayout`; the last
``B n - S`` positions are padding, inactive in clear, any candidate's ciphertext), and the
round is five steps of calls, every intermediate encrypted:

1. per batch, the maximum of its scores (:func:`batch_maximum_core`, the digit loop of step 1
   above over n candidates), a digit vector;
2. the maximum of the B maxima (the same function over B inputs): max over batches of the
   batch maxima is the global maximum, so A_r below is A_r of the single call;
3. per batch (:func:`batch_pick_core`), steps 2-4 above on its positions against that
   maximum: acceptances from the same trials on the same R, the batch's accepted position of
   least priority as a one-hot (all 0 when none accepted), and a summary: whether any
   position accepted and, per priority bit, whether the least accepted priority has a 0
   there (the OR the step-4 loop computes anyway);
4. over the B summaries (:func:`batch_least_core`), step 4's loop with "accepted" = "the
   batch accepted something" and the batch's least priority as its priority: the batch
   holding the least accepted priority of all, one-hot over batches;
5. per batch (:func:`batch_mask_core`), its one-hot AND its batch's choice.

The least accepted priority over all positions is the least of the batches' least accepted
priorities, and priorities are distinct, so the output is exactly the single call's
one-hot (:func:`batched_select_plaintext` models every step; ``tests/test_selection_batches.py``
decrypts each step against it and the output against the single call and
:func:`select_plaintext`). **The views are unchanged:** the key server encrypts the same
shares (R^KS and priorities, now per batch, the padding's chosen data-independently) and
decrypts only the S final outputs, which all come from one output of one function (one
encoding, as the single call's), in candidate order; the batch maxima, summaries and
choices stay encrypted at the compute server, which holds no secret key, and its clear
inputs (order, R^CS, active flags, the public layout) are those of the single call. So each
server's view is the single call's view plus ciphertexts that are computationally hidden, and
the enumeration of ``tests/test_selection_views.py`` covers both forms.

>>> shape = SelectionShape(candidates=3, score_bits=4, drop_bits=0, nb=3, kappa_prime=(4, 4, 4))
>>> thresholds(shape, Fraction(1)), shape.priority_bits
([10, 6, 2], 2)
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, replace
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
from concrete import fhe

from crypto._concrete import ensure_tag_stack, lookup, table
from dp.shuffle import randbelow_from_bits, uniform_order

__all__ = ["SelectionShape", "SelectionStep", "plan_step", "choose_shape", "step_eta", "thresholds",
           "threshold_bits", "clear_arguments", "acceptance_weights", "select_plaintext",
           "em_rounds_model", "compile_selection", "random_share", "random_priorities",
           "secure_order", "pbs_estimate", "BatchLayout", "batch_layout", "BatchedSelection",
           "batched_select_plaintext", "batched_pbs_estimate", "batch_maximum_core",
           "batch_pick_core", "batch_least_core", "batch_mask_core", "batch_randomness"]


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
    # set, Fed-Heart widths, concrete 2.11's optimiser), so 2 stays.
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
    from crypto.exp_privacy import product_eta

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


def plan_step(rho_step: Fraction, shape: SelectionShape) -> SelectionStep:
    """The largest PF epsilon (bisection on a 1e-12 grid, 60 steps) whose total loss,
    numerical error included, fits ``rho_step``; fails closed if none does."""
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


def threshold_bits(shape: SelectionShape, c: list[int]) -> np.ndarray:
    """The clear comparison constants: bits of c_j - 1 (test R <= c_j - 1), LSB first."""
    out = []
    for kp, cj in zip(shape.kappa_prime, c):
        if not 1 <= cj <= 2 ** kp:
            raise ValueError("c_j must lie in [1, 2^kappa'_j]")
        out += _bits_of(cj - 1, kp)
    return np.array(out, dtype=np.int64)


def select_plaintext(digits: np.ndarray, active: np.ndarray, r_ks: np.ndarray,
                     r_cs: np.ndarray, shape: SelectionShape, c: list[int],
                     priority: np.ndarray) -> np.ndarray:
    """The circuit's exact integer model: the one-hot output, in the input (position) order.
    ``priority``: each position's priority (a permutation of 0..S-1, or its bits (S, w))."""
    q = _quantised(digits, active, shape)
    accept = _accepted_plaintext(q.max() - q, active, r_ks, r_cs, shape, c)
    priority = _priority_values(priority)
    out = np.zeros(len(q), dtype=np.int64)
    # the accepted position of least priority (rejected ones rank after every accepted one)
    out[np.argmin(np.where(accept, priority, len(q) + priority))] = 1
    return out


def _quantised(digits, active, shape: SelectionShape) -> np.ndarray:
    digits = np.asarray(digits, dtype=np.int64)  # (S, n): one selection
    return sum(digits[:, j] << (j - shape.drop_bits)
               for j in range(shape.drop_bits, shape.score_bits)) * np.asarray(active)


def _priority_values(priority) -> np.ndarray:
    priority = np.asarray(priority, dtype=np.int64)
    if priority.ndim == 2:
        priority = sum(priority[:, i] << i for i in range(priority.shape[1]))
    return priority


def _accepted_plaintext(a, active, r_ks, r_cs, shape: SelectionShape, c: list[int]):
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


def clear_arguments(digits, active, r_ks, r_cs, priority) -> tuple:
    """The circuit's argument tuple from the natural inputs (see ``select_core``);
    ``priority``: the key server's priority bits, (batch, S, priority_bits)."""
    r_cs = np.asarray(r_cs, dtype=np.int64)
    return (np.asarray(digits, dtype=np.int64), np.asarray(active, dtype=np.int64),
            np.asarray(r_ks, dtype=np.int64), np.asarray(priority, dtype=np.int64),
            2 * r_cs, r_cs)



_NONZERO = table(lambda s: int(s > 0), 2)          # OR of up to 3 bits, from their sum
_AND = table(lambda i: int(i == 3), 2)             # x + 2y
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



def _or_columns(columns: list) -> object:
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


def _or_elements(matrix, length: int):
    """OR over the last axis of an encrypted 0/1 (batch, length) matrix."""
    return _or_columns([matrix[:, i] for i in range(length)])


def _selection_function(shape: SelectionShape, c: list[int]):
    def select(digits, active, r_ks, priority, xor_twice, xor_shift):
        columns = [digits[:, :, j] for j in range(shape.score_bits)]
        return select_core(shape, c, columns, active, r_ks, priority, xor_twice, xor_shift)

    return select


def select_core(shape: SelectionShape, c: list[int], columns: list, active, r_ks, priority,
                xor_twice, xor_shift) -> tuple:
    """The traced arithmetic; ``columns[j]`` is digit j of every candidate, (batch, S);
    ``priority`` the key server's encrypted priority bits, (batch, S, priority_bits).

    concrete multiplies only when one side is encrypted, so the compute server passes its clear
    inputs pre-scaled (:func:`clear_arguments`): xor_twice = 2 R_cs, xor_shift = R_cs. The
    thresholds c_j are compiled in (one session, one epsilon per step), which lets each lookup
    of the comparisons consume two random bits."""
    s, n, t = shape.candidates, shape.score_bits, shape.drop_bits
    q = [columns[j] * active for j in range(t, n)]  # inactive candidates score 0
    # 1. the maximum, most significant digit first
    top = _maximum(q, active, s, shape.batch)
    accept = _accept(shape, c, q, top, active, r_ks, xor_twice, xor_shift)
    # 4. the accepted position of least priority, most significant priority bit first.
    # Every output is a _KEEP_ALIVE lookup, so all share one encoding and the compute server
    # may put them back in candidate order before decryption.
    lows = [1 - priority[:, :, j] for j in range(shape.priority_bits)]  # 1 where the bit is 0
    alive, _ = _least(accept, lows, s, shape.batch)
    return tuple(alive[:, i] for i in range(s))  # one (batch,) output per position


def _maximum(q: list, active, s: int, batch: int) -> list:
    """Digits of max_r q_r, most significant first: ``alive_r`` marks the candidates whose
    prefix equals the maximum's so far; each digit of the maximum, (batch, 1), broadcasts
    over the S candidates."""
    width = len(q)
    alive, top = None, [None] * width
    for j in reversed(range(width)):
        hits = q[j] if alive is None else lookup(_AND, alive + 2 * q[j])
        top[j] = _or_elements(hits, s).reshape((batch, 1))  # broadcast over S
        alive = (lookup(_KEEP_ALIVE, active + 2 * q[j] + 4 * top[j]) if alive is None
                 else lookup(_KEEP_ALIVE, alive + 2 * q[j] + 4 * top[j]))
    return top


def _accept(shape: SelectionShape, c: list[int], q: list, top: list, active, r_ks, xor_twice,
            xor_shift):
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
        le = None  # no lower bits yet: "<=" holds
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


def _least(alive, lows: list, s: int, batch: int) -> tuple:
    """The alive position of least priority, most significant priority bit first: a position
    stays alive while its prefix is 0 wherever some alive position's prefix is 0. ``lows[j]``:
    1 where bit j of a position's priority is 0, (batch, s). Returns the final alive, one-hot
    or all 0 when nothing was alive, and per bit j whether some alive position had a 0 there,
    (batch, 1): the least priority's bit j is its complement."""
    any_low = [None] * len(lows)
    for j in reversed(range(len(lows))):
        hits = lookup(_AND, alive + 2 * lows[j])
        any_low[j] = _or_elements(hits, s).reshape((batch, 1))
        alive = lookup(_KEEP_ALIVE, alive + 2 * lows[j] + 4 * any_low[j])
    return alive, any_low


# ---------------------------------------------------------------- candidate batches
@dataclass(frozen=True)
class BatchLayout:
    """One round's positions cut into ``count`` batches of ``size`` (module docstring,
    "Candidate batches"): positions b*size .. (b+1)*size - 1 form batch b; the
    ``positions - candidates`` last positions are padding, always inactive."""

    candidates: int
    size: int

    def __post_init__(self) -> None:
        if self.size < 2 or self.count < 2:
            raise ValueError("candidate batches: two or more batches of two or more positions")

    @property
    def count(self) -> int:
        return -(-self.candidates // self.size)

    @property
    def positions(self) -> int:
        return self.count * self.size

    def batch(self, b: int) -> slice:
        return slice(b * self.size, (b + 1) * self.size)


def batch_layout(candidates: int, target: int) -> BatchLayout | None:
    """Batches of at most ``target`` candidates, as even as one size allows (padding below one
    batch); None when one batch would hold them all (the single ``select`` call).

    >>> batch_layout(105, 8), batch_layout(6, 8)
    (BatchLayout(candidates=105, size=8), None)
    """
    count = -(-candidates // max(2, target))
    if count < 2:
        return None
    return BatchLayout(candidates, -(-candidates // count))


def _score_columns(scores: list, width: int) -> list:
    """Digit j of every score vector, as one (1, len(scores)) row per digit."""
    return [fhe.array([[score[j] for score in scores]]) for j in range(width)]


def batch_maximum_core(shape: SelectionShape, scores: list, active):
    """Stage 1 (and its combine): the maximum of ``scores`` (digit vectors; inactive ones
    count as 0), as a digit vector of the same width, so a maximum can enter this function
    again."""
    q = [column * active for column in _score_columns(scores, shape.score_bits)]
    top = _maximum(q, active, len(scores), 1)
    return fhe.array([digit[0, 0] for digit in top])


def batch_pick_core(shape: SelectionShape, c: list[int], scores: list, top, active, r_ks,
                    priority, xor_twice, xor_shift) -> tuple:
    """Stage 2: the batch's acceptances against the global maximum ``top`` and its accepted
    position of least priority. Returns (one-hot over the batch's positions, all 0 when none
    accepted, (1, size); summary: [some position accepted, then per priority bit j whether
    the least accepted priority has a 0 there])."""
    size = len(scores)
    q = [column * active for column in _score_columns(scores, shape.score_bits)]
    accept = _accept(shape, c, q, [top[j] for j in range(shape.score_bits)], active, r_ks,
                     xor_twice, xor_shift)
    lows = [1 - priority[:, :, j] for j in range(shape.priority_bits)]
    alive, any_low = _least(accept, lows, size, 1)
    accepted = _or_elements(accept, size)
    return alive, fhe.array([accepted[0]] + [low[0, 0] for low in any_low])


def batch_least_core(shape: SelectionShape, summaries: list) -> tuple:
    """Combine of stage 2: the batch holding the least accepted priority, one output per
    batch (exactly one is 1). A batch's least priority has bit j = 0 iff its summary says so;
    a batch without an accepted position never stays alive."""
    count = len(summaries)
    alive = fhe.array([[summary[0] for summary in summaries]])
    lows = [fhe.array([[summary[1 + j] for summary in summaries]])
            for j in range(shape.priority_bits)]
    alive, _ = _least(alive, lows, count, 1)
    return tuple(alive[:, b] for b in range(count))


def batch_mask_core(hot, chosen, size: int) -> tuple:
    """A batch's one-hot kept where its batch was chosen, one output per position: every
    output is the same lookup, so all share one encoding and the compute server may put them
    back in candidate order before the key server decrypts them."""
    return tuple(lookup(_AND, hot[:, i] + 2 * chosen) for i in range(size))


@dataclass(frozen=True)
class BatchedSelection:
    """Every intermediate of a batched round, in clear (:func:`batched_select_plaintext`)."""

    maxima: list[int]         # per batch, its scores' maximum (stage 1)
    top: int                  # the maximum of the maxima
    hots: list[np.ndarray]    # per batch, its one-hot (all 0 when nothing was accepted)
    least: list[int | None]   # per batch, its least accepted priority (None: none accepted)
    chosen: int               # the batch of least accepted priority
    outputs: np.ndarray       # the one-hot over every position


def batched_select_plaintext(digits, active, r_ks, r_cs, shape: SelectionShape, c: list[int],
                             priority, layout: BatchLayout) -> BatchedSelection:
    """The batched functions' exact integer model over ``layout.positions`` positions (padding
    included, inactive); its ``outputs`` equal :func:`select_plaintext`'s on the real
    positions (``tests/test_selection_batches.py``)."""
    q = _quantised(digits, active, shape)
    maxima = [int(q[layout.batch(b)].max()) for b in range(layout.count)]
    top = max(maxima)
    accept = _accepted_plaintext(top - q, active, r_ks, r_cs, shape, c)
    priority = _priority_values(priority)
    hots, least = [], []
    for b in range(layout.count):
        part = layout.batch(b)
        hot = np.zeros(layout.size, dtype=np.int64)
        if accept[part].any():
            ranked = np.where(accept[part], priority[part], np.iinfo(np.int64).max)
            hot[int(np.argmin(ranked))] = 1
            least.append(int(ranked.min()))
        else:
            least.append(None)
        hots.append(hot)
    chosen = min((value, b) for b, value in enumerate(least) if value is not None)[1]
    outputs = np.concatenate([hot * int(b == chosen) for b, hot in enumerate(hots)])
    return BatchedSelection(maxima, top, hots, least, chosen, outputs)


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


def random_share(shape: SelectionShape, randbits=secrets.randbits) -> np.ndarray:
    """One server's share of the trials' random bits, (batch, S, sum kappa'), from a
    cryptographic source (``secrets`` by default)."""
    count = shape.batch * shape.candidates * shape.random_bits
    word = randbits(count)
    bits = np.array([(word >> i) & 1 for i in range(count)], dtype=np.int64)
    return bits.reshape(shape.batch, shape.candidates, shape.random_bits)


def random_priorities(shape: SelectionShape, randbits=secrets.randbits) -> np.ndarray:
    """The key server's share of the hidden order: per selection a uniform permutation of
    0..S-1 (one priority per position), as bits, (batch, S, priority_bits), least
    significant first."""
    out = np.zeros((shape.batch, shape.candidates, shape.priority_bits), dtype=np.int64)
    for b in range(shape.batch):
        ranks = np.array(secure_order(shape.candidates, randbits), dtype=np.int64)
        for i in range(shape.priority_bits):
            out[b, :, i] = (ranks >> i) & 1
    return out


def batch_randomness(shape: SelectionShape, layout: BatchLayout,
                     randbits=secrets.randbits) -> tuple[np.ndarray, np.ndarray]:
    """The key server's shares for a batched round, over every position of ``layout``: trial
    bits (1, positions, sum kappa') and priorities (1, positions, priority_bits), a uniform
    permutation of 0..S-1 on the real positions and 0 on the padding (never accepted, so
    never compared)."""
    r_ks = random_share(replace(shape, candidates=layout.positions, batch=1), randbits)
    priority = np.zeros((1, layout.positions, shape.priority_bits), dtype=np.int64)
    priority[:, :shape.candidates] = random_priorities(replace(shape, batch=1), randbits)
    return r_ks, priority


def secure_order(n: int, randbits=secrets.randbits) -> list[int]:
    """A uniformly random order of range(n) from a source of random bits; fails closed."""
    return uniform_order(n, randbelow_from_bits(randbits))


def _or_tree_lookups(count: int) -> int:
    """Lookups of :func:`_or_columns` over ``count`` columns."""
    total = 0
    while count > 1:
        total += count // 3 + (1 if count % 3 > 1 else 0)
        count = -(-count // 3)
    return total


def _maximum_lookups(s: int, width: int, last_alive: bool = True) -> int:
    """OR trees, ANDs, keep-alives; the keep-alive after the last digit is never used
    (concrete drops it; :func:`pbs_estimate` keeps it, an upper bound as it always was)."""
    return width * _or_tree_lookups(s) + (width - 1) * s + (width - int(not last_alive)) * s


def _acceptance_lookups(shape: SelectionShape) -> int:
    """Per candidate: A's digits and borrows, the saturation OR, the trials, the accept OR."""
    width = shape.quantised_bits
    difference = width + (width - 1)
    saturated = _or_tree_lookups(width - shape.nb) if width > shape.nb else 0
    trials = sum(-(-kp // shape.trial_bits) for kp in shape.kappa_prime) + shape.nb
    return difference + saturated + trials + _or_tree_lookups(shape.nb + 1)


def _least_lookups(s: int, priority_bits: int) -> int:
    return priority_bits * (2 * s + _or_tree_lookups(s))


def pbs_estimate(shape: SelectionShape) -> int:
    """Bootstraps of one selection, counted from the circuit's structure (an upper bound on
    concrete's count: ``tests/test_selection.py`` compares it with the compile statistics).
    The session's fhe_delta uses the compiled count itself; this count is for plans made
    before anything is compiled (``feddpsyn params``, the demo's estimate)."""
    s = shape.candidates
    return (_maximum_lookups(s, shape.quantised_bits) + s * _acceptance_lookups(shape)
            + _least_lookups(s, shape.priority_bits))


def batched_pbs_estimate(shape: SelectionShape, layout: BatchLayout) -> dict[str, int]:
    """Bootstraps of each batched function call (structural upper bounds, as
    :func:`pbs_estimate`), keyed by stage: ``maximum`` (a batch), ``combine_maximum`` (the
    batches' maxima), ``pick`` (a batch), ``least`` (the batches' summaries), ``mask``
    (a batch); ``round``: one selection, every call."""
    n, count, width = layout.size, layout.count, shape.quantised_bits
    parts = {"maximum": _maximum_lookups(n, width, last_alive=False),
             "combine_maximum": _maximum_lookups(count, width, last_alive=False),
             "pick": (n * _acceptance_lookups(shape) + _least_lookups(n, shape.priority_bits)
                      + _or_tree_lookups(n)),
             "least": _least_lookups(count, shape.priority_bits),
             "mask": n}
    parts["round"] = (count * (parts["maximum"] + parts["pick"] + parts["mask"])
                      + parts["combine_maximum"] + parts["least"])
    return parts


def em_rounds_model(scores: list[int], shape: SelectionShape, c: list[int], rounds: int,
                    randbits=secrets.randbits) -> list[int]:
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
