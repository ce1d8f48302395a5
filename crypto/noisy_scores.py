"""Noisy dependency scores under encryption: PrivSyn's selection rule on FedDPSyn's P2.

PrivSyn (Zhang et al. 2021, Section 5.2) selects 2-way marginals greedily from *noisy* InDif
scores. Here the compute server holds every pair's InDif as encrypted binary digits (Primitive
2, ``crypto.private_selection``'s ``indif`` and ``add``) and adds its own clear discrete
Gaussian noise z under encryption, so that the key server, which decrypts, only ever sees
InDif + z. One concrete module, one key set, three functions:

* ``indif_<s>(masked_digits, offset_digits)`` (one per chunk size) and ``add(x, y)``: exactly those of
  ``crypto.private_selection`` (same code, ``score_functions``), without ``select``, so the
  ``em`` module and its keys stay as they are;
* ``noise(x, c)``: a ripple-carry adder with a *clear* operand: x is a score's n encrypted
  digits, c the digits of z + 2^B (clear, ``out_bits`` of them). Per digit the total
  t = x_j + c_j + carry is in 0..3 (a leveled sum); the carry is one 2-bit lookup
  (t >= 2) and the digit is leveled, t - 2 carry: one bootstrap per digit. The output is the
  ``out_bits`` digits of InDif + z + 2^B, which is never negative and never wraps.

Widths. InDif < 2^n (``score_bits``: InDif <= 2 max_rows). B is the smallest integer with
2^B >= 40 sigma (``NOISE_TAIL_SIGMAS``); then |z| < 2^B gives 0 < InDif + z + 2^B < 2^n + 2^(B+1)
<= 2^out_bits with out_bits = max(n, B + 1) + 1. Every intermediate's maximum is declared with
``fhe.hint`` (an input set that misses a maximum makes concrete wrap silently).

The tail (privacy claim). The Gaussian is unbounded, the circuit's operand is not. We never
clip and never redraw: a draw with |z| >= 2^B **fails closed** (:class:`NoiseOutOfRange`,
raised before anything is encrypted or sent; the session's selection stops). Aborting
depends on the noise only, not on the data, but conditioning on "no abort" changes the noise's
distribution, so it is accounted: for neighbours D, D' and any set S of outcomes,
P[M'(D) in S] <= P[M(D) in S] <= e^eps P[M(D') in S] + delta
<= e^eps (P[M'(D') in S] + P[abort]) + delta, i.e. the truncated mechanism M' is
(eps, delta + e^eps P[abort]). The discrete Gaussian is sigma2-subgaussian (Canonne, Kamath,
Steinke 2020), so P[|z| >= 2^B] <= 2 exp(-4^B / (2 sigma2)) <= 2 exp(-800) per draw and
P[abort] <= draws times that (:func:`noise_tail_probability`; :func:`noise_tail_delta`
rounds the resulting delta up to a positive float).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from concrete import fhe

from crypto._concrete import ensure_tag_stack
from crypto.private_selection import (check_chunk_sizes, indif_definitions, score_functions,
                                      score_inputsets)

__all__ = ["NoisyScoreShape", "NoiseOutOfRange", "NOISE_TAIL_SIGMAS", "noise_offset_bits",
           "noise_operand", "noisy_score_plaintext", "decode_noisy_score",
           "noise_tail_probability", "noise_tail_delta", "compile_noisy_scores"]

# 2^B >= 40 sigma: P[|z| >= 2^B] <= 2 exp(-800) per draw (module docstring).
NOISE_TAIL_SIGMAS = 40

_CARRY = fhe.LookupTable([0, 0, 1, 1])


class NoiseOutOfRange(RuntimeError):
    """A noise draw does not fit the circuit's offset; nothing is returned (fail closed)."""


@dataclass(frozen=True)
class NoisyScoreShape:
    count_bits: int    # P2's k
    chunk_sizes: tuple[int, ...]  # one ``indif_<s>`` function per chunk size
    score_bits: int    # n: digits of a pair's InDif
    noise_bits: int    # B: |z| < 2^B, the clear operand is z + 2^B

    def __post_init__(self) -> None:
        check_chunk_sizes(self.chunk_sizes)

    @property
    def out_bits(self) -> int:
        """Digits of InDif + z + 2^B (module docstring)."""
        return max(self.score_bits, self.noise_bits + 1) + 1

    @property
    def noise_bootstraps(self) -> int:
        """Lookups of one ``noise`` call: one carry per digit but the last."""
        return self.out_bits - 1


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


def noise_operand(z: int, shape: NoisyScoreShape) -> np.ndarray:
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


def decode_noisy_score(digits, shape: NoisyScoreShape) -> int:
    """InDif + z from ``noise``'s decrypted digits."""
    return sum(int(d) << j for j, d in enumerate(digits)) - (1 << shape.noise_bits)


def noise_tail_probability(sigma2: Fraction, noise_bits: int, draws: int) -> float:
    """Upper bound on P[some draw has |z| >= 2^B] (subgaussian tail, union bound), rounded up
    to a positive float (the exact value is far below the smallest double)."""
    log_bound = math.log(2 * draws) - 4 ** noise_bits / (2 * float(sigma2))
    return min(1.0, max(math.nextafter(math.exp(log_bound), math.inf), math.ulp(0.0)))


def noise_tail_delta(sigma2: Fraction, noise_bits: int, draws: int, epsilon: float) -> float:
    """The delta the truncation adds, e^eps P[abort] (module docstring), rounded up."""
    log_bound = epsilon + math.log(2 * draws) - 4 ** noise_bits / (2 * float(sigma2))
    return min(1.0, max(math.nextafter(math.exp(log_bound), math.inf), math.ulp(0.0)))


def _noise_function(shape: NoisyScoreShape):
    n, out_bits = shape.score_bits, shape.out_bits

    def noise(x, c):
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


def compile_noisy_scores(shape: NoisyScoreShape, p_error: float):
    """Compile the module (``module.indif_<s>`` per chunk size, ``module.add``,
    ``module.noise``)."""
    ensure_tag_stack()
    n, out_bits = shape.score_bits, shape.out_bits
    indifs, add = score_functions(shape.count_bits, shape.chunk_sizes, n)
    indif_defs = indif_definitions(indifs)
    add_def = fhe.function({"x": "encrypted", "y": "encrypted"})(add)
    noise_def = fhe.function({"x": "encrypted", "c": "clear"})(_noise_function(shape))
    wires = set()
    sources = [fhe.Output(d, 0) for d in indif_defs.values()] + [fhe.Output(add_def, 0)]
    for source in sources:
        for target in (fhe.Input(add_def, 0), fhe.Input(add_def, 1), fhe.Input(noise_def, 0)):
            wires.add(fhe.Wire(source, target))
    module_class = type("NoisyScores", (), {**indif_defs, "add": add_def,
                                             "noise": noise_def,
                                             "composition": fhe.Wired(wires)})
    compiler = fhe.module()(module_class)

    rng = np.random.default_rng(0)
    indif_inputs, add_inputs, digit_inputs = score_inputsets(
        shape.count_bits, shape.chunk_sizes, n, rng)
    ones = np.ones(out_bits, dtype=np.int64)
    noise_inputs = [(x, rng.integers(0, 2, out_bits)) for x in digit_inputs] + [
        (np.ones(n, dtype=np.int64), ones), (np.zeros(n, dtype=np.int64), ones)]
    configuration = fhe.Configuration(p_error=p_error, global_p_error=None, show_progress=False,
                                      compress_evaluation_keys=True,
                                      compress_input_ciphertexts=True)
    return compiler.compile({**indif_inputs, "add": add_inputs, "noise": noise_inputs},
                            configuration)
