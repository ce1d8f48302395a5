"""Noisy dependency scores under encryption: PrivSyn's selection rule on FedDPSyn's P2.

PrivSyn (Zhang et al. 2021, Section 5.2) selects 2-way marginals greedily from *noisy* InDif
scores. Here the compute server holds every pair's InDif as encrypted binary digits (Primitive
2, ``crypto.private_selection``'s ``indif`` and ``add``) and adds noise under encryption,
so that the key server, which decrypts, only ever sees a noisy score: the compute server's
clear discrete Gaussian z (two-server scores), or one joint noise Z neither server knows.
One concrete module, one key set, three functions:

* ``indif_<s>(masked_digits, offset_digits)`` (one per chunk size) and ``add(x, y)``: exactly
  those of ``crypto.private_selection`` (same code, ``score_functions``), without ``select``, so the
  ``em`` module and its keys stay as they are;
* ``noise(x, c)``: a ripple-carry adder with a *clear* operand: x is a score's n encrypted
  digits, c the digits of z + 2^B (clear, ``out_bits`` of them). Per digit the total
  t = x_j + c_j + carry is in 0..3 (a leveled sum); the carry is one 2-bit lookup
  (t >= 2) and the digit is leveled, t - 2 carry: one bootstrap per digit. The output is the
  ``out_bits`` digits of InDif + z + 2^B, which is never negative and never wraps.
* ``joint(x, a, b)`` (instead of ``noise``, where the plan gives the scores one joint
  noise): adds Z + span/2 = sum_j w_j (a_j xor b_j) to the score's digits x, a the key
  server's encrypted bits and b the compute server's clear bits for the K = u w bits of a
  :class:`dp.joint_noise_accounting.JointNoiseShape` (u uniforms of w bits, weights
  2^(j mod w)). Construction: the XOR-shared coins of Dwork, Kenthapadi, McSherry, Mironov
  and Naor (2006), a xor b = a + b - 2ab per bit (leveled: a clear product, never negative
  on the way; ``crypto.joint_noise``), summed column-wise as in a Wallace-tree multiplier's
  partial-product columns (Wallace 1964): col_j = the u bits of weight 2^j, at most u, leveled;
  then ripple-carry passes with a multi-bit column operand, t_j = x_j + col_j + carry_j,
  carry_(j+1) = floor(t_j / 2) (one lookup), digit t_j - 2 carry_(j+1) (leveled): at most
  out_bits - 1 lookups a pass (none where t_j cannot reach 2). A pass's lookup input is at
  most 2g + 1 for its g uniforms (:meth:`NoisyScoreShape.column_maxima` computes each
  column's bound exactly), and a wide lookup enlarges the whole module's keys, so the
  uniforms are split into the fewest passes whose lookups fit PASS_LOOKUP_BITS
  (:attr:`NoisyScoreShape.pass_sizes`; each later pass adds its uniforms to the last one's
  digits); the plan caps u at 30 (``params.noise_rules.SCORE_MAX_UNIFORMS``): two passes.
  Fed-Heart-Disease's 28 uniforms of 6 bits in two 5-bit passes against one 6-bit pass
  (``experiments/joint_scores/bench_joint_scores.py``, its ``one-pass`` baseline in the same run):
  evaluation keys 131 against 350 MB (x0.37), key generation x0.41, a score's call x0.68
  (22 lookups against 11). Measured on the tiny test module before the passes (k = 6,
  6-cell chunks, 6-bit scores): compressed evaluation keys 96 MB with ``noise``, 99 / 124 /
  237 MB with ``joint`` at 2 x 3 / 6 x 3 / 30 x 2 uniforms (3-, 4-, 6-bit lookups in one
  pass), keygen 9-14 s; at Adult's widths see ``params.noise_rules.SCORE_LOOKUP_BITS``.
  The output is the out_bits = bitlength(2^n - 1 + span) digits of InDif + Z + span/2: it is
  never negative (the uncentred sum is) and never wraps (both terms are bounded: no tail, no
  fail-closed case). The centring is public and exact: :class:`JointNoiseShape` admits only
  shapes whose mean span/2 is an integer (an even number of uniforms), so
  :func:`decode_joint_score` subtracts an integer.

Widths (``noise``). InDif < 2^n (``score_bits``: InDif <= 2 max_rows). B is the smallest
integer with 2^B >= 40 sigma (``NOISE_TAIL_SIGMAS``); then |z| < 2^B gives 0 < InDif + z +
2^B < 2^n + 2^(B+1) <= 2^out_bits with out_bits = max(n, B + 1) + 1. Every intermediate's
maximum is declared with ``fhe.hint`` (an input set that misses a maximum makes concrete
wrap silently).

The tail (privacy claim, ``noise``). The Gaussian is unbounded, the circuit's operand is
not. We never clip and never redraw: a draw with |z| >= 2^B **fails closed**
(:class:`NoiseOutOfRange`, raised before anything is encrypted or sent; the session's
selection stops). Aborting depends on the noise only, not on the data, but conditioning on
"no abort" changes the noise's distribution, so it is accounted: for neighbours D, D' and
any set S of outcomes, P[M'(D) in S] <= P[M(D) in S] <= e^eps P[M(D') in S] + delta <= e^eps
(P[M'(D') in S] + P[abort]) + delta, i.e. the truncated mechanism M' is (eps, delta + e^eps
P[abort]). The discrete Gaussian is sigma2-subgaussian (Canonne, Kamath, Steinke 2020), so
P[|z| >= 2^B] <= 2 exp(-4^B / (2 sigma2)) <= 2 exp(-800) per draw and P[abort] <= draws
times that (:func:`noise_tail_probability`; :func:`noise_tail_delta` rounds the resulting
delta up to a positive float).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, cast

import numpy as np
from concrete import fhe

from feddpsyn.crypto._concrete import ensure_tag_stack
from feddpsyn.crypto.private_selection import (
    check_chunk_sizes,
    check_widths,
    indif_definitions,
    score_functions,
    score_inputsets,
)
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape

__all__ = ["NoisyScoreShape", "NoiseOutOfRange", "NOISE_TAIL_SIGMAS", "PASS_LOOKUP_BITS",
           "noise_offset_bits",
           "noise_operand", "noisy_score_plaintext", "decode_noisy_score",
           "noise_tail_probability", "noise_tail_delta", "compile_noisy_scores",
           "joint_score_plaintext", "decode_joint_score", "decode_score"]

Array = np.ndarray[Any, Any]

# 2^B >= 40 sigma: P[|z| >= 2^B] <= 2 exp(-800) per draw (module docstring).
NOISE_TAIL_SIGMAS = 40

# ``joint``'s widest lookup: its uniforms are added in as many passes as keep every carry's
# input below 2^5 (15 uniforms a pass). A 5-bit lookup costs 43 ms against 100 ms for a
# 6-bit one (``bench/scale/lookup_rate.py 5 6``), so two 5-bit passes (22 lookups) cost less
# than one 6-bit pass (11), and the module's keys shrink (module docstring).
PASS_LOOKUP_BITS = 5

_CARRY = fhe.LookupTable([0, 0, 1, 1])


class NoiseOutOfRange(RuntimeError):
    """A noise draw does not fit the circuit's offset; nothing is returned (fail closed)."""


@dataclass(frozen=True)
class NoisyScoreShape:
    count_bits: int    # P2's k
    chunk_sizes: tuple[int, ...]  # one ``indif_<s>`` function per chunk size
    score_bits: int    # n: digits of a pair's InDif
    noise_bits: int    # B: |z| < 2^B, the clear operand is z + 2^B (two-server scores)
    # One joint noise per score (``joint``), or None: the compute server's clear noise.
    joint: JointNoiseShape | None = None
    # ``joint``'s widest lookup a pass may use (the bench's one-pass baseline sets it wider).
    pass_bits: int = PASS_LOOKUP_BITS
    # P2's narrower widths: ``indif_<s>_w<w>`` for each (``params.indif_widths``)
    widths: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_chunk_sizes(self.chunk_sizes)
        check_widths(self.widths, self.count_bits)

    @property
    def out_bits(self) -> int:
        """Digits of InDif + z + 2^B, or of InDif + sum of the uniforms (module docstring)."""
        if self.joint is not None:
            return ((1 << self.score_bits) - 1 + self.joint.span).bit_length()
        return max(self.score_bits, self.noise_bits + 1) + 1

    @property
    def noise_function(self) -> str:
        """The module function that noises a score: ``joint`` or ``noise``."""
        return "noise" if self.joint is None else "joint"

    @property
    def noise_bootstraps(self) -> int:
        """Lookups of one ``noise`` or ``joint`` call: one carry per digit but the last (in
        each of ``joint``'s passes, where the digit's total can reach 2: below that the
        carry is 0 and no lookup is made)."""
        if self.joint is None:
            return self.out_bits - 1
        return sum(1 for maxima in self.column_maxima() for top in maxima[:-1] if top >= 2)

    @property
    def pass_sizes(self) -> tuple[int, ...]:
        """``joint``'s passes: how many uniforms each adds, the fewest passes (sizes within
        one of each other) whose every lookup fits ``pass_bits`` (``noise``: one pass)."""
        if self.joint is None:
            return (1,)
        u = self.joint.uniforms
        for passes in range(1, u + 1):  # bounded: u passes of one uniform always fit
            sizes = tuple(u // passes + (1 if p < u % passes else 0) for p in range(passes))
            if _pass_lookup_bits(self._pass_maxima(sizes)) <= self.pass_bits:
                return sizes
        raise ValueError("no split of the uniforms fits the pass's lookups")  # unreachable

    def _pass_maxima(self, sizes: tuple[int, ...]) -> list[list[int]]:
        # The first pass adds to the score's n bit digits; each later pass to the last one's
        # out_bits digits, bits except the top, whose bound is that pass's top total.
        joint = cast(JointNoiseShape, self.joint)
        n, w = self.score_bits, joint.bits
        digit_max = [1 if j < n else 0 for j in range(self.out_bits)]
        out = []
        for size in sizes:  # bounded: one pass each
            maxima, carry = [], 0
            for j in range(self.out_bits):  # bounded: one step per digit
                total = digit_max[j] + (size if j < w else 0) + carry
                maxima.append(total)
                carry = total // 2
            out.append(maxima)
            digit_max = [1] * (self.out_bits - 1) + [maxima[-1]]
        return out

    def column_maxima(self) -> list[list[int]]:
        """``joint``: per pass, the largest total t_j = x_j + col_j + carry_j of each digit
        (the lookup's input; the widest one's bit length is the module's widest lookup)."""
        if self.joint is None:
            raise ValueError("a two-server score shape has no columns")
        return self._pass_maxima(self.pass_sizes)

    @property
    def lookup_bits(self) -> int:
        """The widest lookup input of ``joint`` (``noise``: 2 bits)."""
        if self.joint is None:
            return 2
        return _pass_lookup_bits(self.column_maxima())


def _pass_lookup_bits(maxima: list[list[int]]) -> int:
    # Every digit but the top one has a carry lookup on its total.
    return max(max(m[:-1] + [1]) for m in maxima).bit_length()


def noise_offset_bits(sigma2: Fraction) -> int:
    """The smallest B >= 1 with 2^B >= NOISE_TAIL_SIGMAS sigma (exact: 4^B >= 1600 sigma2)."""
    sigma2 = Fraction(sigma2)
    if sigma2 <= 0:
        raise ValueError("sigma2 must be > 0")
    bound = NOISE_TAIL_SIGMAS ** 2 * sigma2
    b = 1
    while Fraction(4 ** b) < bound:  # bounded: b grows to about log2(40 sigma)
        b += 1
    return b


def noise_operand(z: int, shape: NoisyScoreShape) -> Array:
    """The clear digits of z + 2^B (least significant first); fails closed if |z| >= 2^B."""
    if abs(int(z)) >= 1 << shape.noise_bits:
        raise NoiseOutOfRange(f"a noise draw is outside +-2^{shape.noise_bits} (probability "
                              "below 2 exp(-800)); the selection stops instead of clipping")
    value = int(z) + (1 << shape.noise_bits)
    return np.array([(value >> j) & 1 for j in range(shape.out_bits)], dtype=np.int64)


def noisy_score_plaintext(score: int, z: int, shape: NoisyScoreShape) -> list[int]:
    """``noise``'s exact model: the digits of score + z + 2^B."""
    value = int(score) + int(z) + (1 << shape.noise_bits)
    return [(value >> j) & 1 for j in range(shape.out_bits)]


def decode_noisy_score(digits: Iterable[Any], shape: NoisyScoreShape) -> int:
    """InDif + z from ``noise``'s decrypted digits."""
    return sum(int(d) << j for j, d in enumerate(digits)) - (1 << shape.noise_bits)


def joint_score_plaintext(score: int, ks_bits: Array, cs_bits: Array,
                          shape: NoisyScoreShape) -> list[int]:
    """``joint``'s exact model: the digits of score + sum_j w_j (a_j xor b_j)."""
    both = np.bitwise_xor(np.asarray(ks_bits, dtype=np.int64),
                          np.asarray(cs_bits, dtype=np.int64))
    # A joint shape's model: callers hold a shape with ``joint`` set.
    joint = cast(JointNoiseShape, shape.joint)
    value = int(score) + int(both @ np.array(joint.weights(), dtype=np.int64))
    return [(value >> j) & 1 for j in range(shape.out_bits)]


def decode_joint_score(digits: Iterable[Any], shape: NoisyScoreShape) -> int:
    """InDif + Z from ``joint``'s decrypted digits: the public centring span/2 subtracted
    (an integer: :class:`JointNoiseShape` admits only shapes whose mean is an integer)."""
    # A joint shape's decoding: callers (decode_score) hold a shape with ``joint`` set.
    joint = cast(JointNoiseShape, shape.joint)
    return sum(int(d) << j for j, d in enumerate(digits)) - joint.span // 2


def decode_score(digits: Iterable[Any], shape: NoisyScoreShape) -> int:
    """The noisy score from the decrypted digits of the shape's noise function."""
    return (decode_noisy_score(digits, shape) if shape.joint is None
            else decode_joint_score(digits, shape))


def noise_tail_probability(sigma2: Fraction, noise_bits: int, draws: int) -> float:
    """Upper bound on P[some draw has |z| >= 2^B] (subgaussian tail, union bound), rounded up
    to a positive float (the exact value is far below the smallest double)."""
    log_bound = math.log(2 * draws) - 4 ** noise_bits / (2 * float(sigma2))
    return min(1.0, max(math.nextafter(math.exp(log_bound), math.inf), math.ulp(0.0)))


def noise_tail_delta(sigma2: Fraction, noise_bits: int, draws: int, epsilon: float) -> float:
    """The delta the truncation adds, e^eps P[abort] (module docstring), rounded up."""
    log_bound = epsilon + math.log(2 * draws) - 4 ** noise_bits / (2 * float(sigma2))
    return min(1.0, max(math.nextafter(math.exp(log_bound), math.inf), math.ulp(0.0)))


def _noise_function(shape: NoisyScoreShape) -> Callable[[Any, Any], Any]:
    n, out_bits = shape.score_bits, shape.out_bits

    def noise(x: Any, c: Any) -> Any:
        digits, carry = [], None
        for j in range(out_bits):
            total, total_max = c[j], 1
            if j < n:
                total, total_max = total + x[j], total_max + 1
            if carry is not None:
                total, total_max = total + carry, total_max + 1
            total = fhe.hint(total, can_store=total_max)
            if j + 1 < out_bits:
                carry = _CARRY[total]
                digits.append(fhe.hint(total - 2 * carry, can_store=1))
            else:  # the sum never reaches 2^out_bits: the top total is already the digit
                digits.append(total)
        return fhe.array(digits)

    return noise


def _joint_function(shape: NoisyScoreShape) -> Callable[[Any, Any, Any], Any]:
    n, out_bits = shape.score_bits, shape.out_bits
    # Only called for a shape with ``joint`` set (compile_noisy_scores checks).
    joint_shape = cast(JointNoiseShape, shape.joint)
    w = joint_shape.bits
    passes = list(zip(shape.pass_sizes, shape.column_maxima(), strict=True))

    def joint(x: Any, a: Any, b: Any) -> Any:
        # a xor b = a + b - 2ab per bit: leveled, and never negative on the way.
        e = fhe.hint(a + b - 2 * (a * b), can_store=1)
        zero = x[0] * 0  # the digits above the score's n, before a carry reaches them
        digits: list[Any] = [x[j] if j < n else zero for j in range(out_bits)]
        first = 0
        for size, maxima in passes:  # bounded: the shape's passes
            out, carry = [], None
            for j in range(out_bits):
                total = digits[j]
                if j < w:  # this pass's uniforms' bits of weight 2^j: at most ``size``
                    for g in range(first, first + size):
                        total = total + e[g * w + j]
                if carry is not None:
                    total = total + carry
                total = fhe.hint(total, can_store=max(1, maxima[j]))
                if j + 1 < out_bits and maxima[j] >= 2:
                    carry = fhe.hint(fhe.univariate(_half)(total), can_store=maxima[j] // 2)
                    out.append(fhe.hint(total - 2 * carry, can_store=1))
                else:  # a bit already (no carry), or the top total: the sum never reaches
                    out.append(total)  # 2^out_bits
                    carry = None
            digits, first = out, first + size
        return fhe.array(digits)

    return joint


def _half(value: Any) -> Any:
    return value // 2


def compile_noisy_scores(shape: NoisyScoreShape, p_error: float) -> fhe.Module:
    """Compile the module (``module.indif_<s>`` per chunk size, ``module.add``, and
    ``module.noise`` or, with a joint shape, ``module.joint``)."""
    ensure_tag_stack()
    n, out_bits = shape.score_bits, shape.out_bits
    indifs, add = score_functions(shape.count_bits, shape.chunk_sizes, n, shape.widths)
    indif_defs = indif_definitions(indifs)
    add_def = fhe.function({"x": "encrypted", "y": "encrypted"})(add)
    if shape.joint is None:
        noise_def = fhe.function({"x": "encrypted", "c": "clear"})(_noise_function(shape))
    else:
        noise_def = fhe.function({"x": "encrypted", "a": "encrypted", "b": "clear"})(
            _joint_function(shape))
    wires = set()
    sources = [fhe.Output(d, 0) for d in indif_defs.values()] + [fhe.Output(add_def, 0)]
    for source in sources:
        for target in (fhe.Input(add_def, 0), fhe.Input(add_def, 1), fhe.Input(noise_def, 0)):
            wires.add(fhe.Wire(source, target))
    module_class = type("NoisyScores", (), {**indif_defs, "add": add_def,
                                             shape.noise_function: noise_def,
                                             "composition": fhe.Wired(wires)})
    compiler = fhe.module()(module_class)

    rng = np.random.default_rng(0)
    indif_inputs, add_inputs, digit_inputs = score_inputsets(
        shape.count_bits, shape.chunk_sizes, n, rng, shape.widths)
    zeros_n, ones_n = np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64)
    noise_inputs: Sequence[tuple[Array, ...]]
    if shape.joint is None:
        ones = np.ones(out_bits, dtype=np.int64)
        noise_inputs = [(x, rng.integers(0, 2, out_bits)) for x in digit_inputs] + [
            (ones_n, ones), (zeros_n, ones)]
    else:
        k = shape.joint.ciphertexts
        ones, zeros = np.ones(k, dtype=np.int64), np.zeros(k, dtype=np.int64)
        # Random bits, then the extremes: every xor 1 on the largest score (the widest sum).
        noise_inputs = [(x, rng.integers(0, 2, k), rng.integers(0, 2, k))
                        for x in digit_inputs] + [
            (ones_n, ones, zeros), (ones_n, zeros, ones), (ones_n, ones, ones),
            (zeros_n, zeros, zeros)]
    configuration = fhe.Configuration(p_error=p_error, global_p_error=None, show_progress=False,
                                      compress_evaluation_keys=True,
                                      compress_input_ciphertexts=True)
    return compiler.compile({**indif_inputs, "add": add_inputs,
                             shape.noise_function: noise_inputs}, configuration)
