"""Primitive 2 (FedDPSyn, Section 4): the InDif dependency score under encryption.

PrivSyn's InDif for attributes (j, k) is sum over cells |C_jk / N - C_j C_k / N^2| (times N).
The paper computes it with every count encrypted, which needs encrypted x encrypted products;
in concrete that is infeasible beyond 4-bit inputs (DESIGN.md). We use the released noisy
1-ways as *public* expected counts K = round(C_j C_k / N) (post-processing of a release,
no extra privacy cost) and compute

    InDif(j, k) = sum over the pair's cells of |C_jk - K_jk|

on ciphertexts, in base 4, every lookup at most 3 bits wide:

* the key server holds M = (sum_i m_i) mod 2^k per cell in clear (every masked value; their
  sum is as uniform as each one) and encrypts its base-4 digits M_0..M_(D-1) (D = ceil(k/2),
  :func:`digits_of`): fresh 2-bit ciphertexts;
* the compute server holds the clear c = (2^(k-1) - S - K) mod 2^k (S: the mask sum it
  expands from the seeds) and adds it digit by digit with a ripple carry:
  u_i = M_i + c_i + carry_i <= 7, carry_(i+1) = [u_i >= 4] (one 3-bit lookup), and the digit
  v_i = u_i - 4 carry_(i+1) is leveled. The carry out of the top digit is dropped, so
  v = (M + c) mod 2^k = d + 2^(k-1) mod 2^k with d = C - K: no wrap can occur in between;
* bit k-1 of v is the sign (1 iff d >= 0), and in two's complement |d| = sum_{i<k-1}
  (b_i XOR neg) 2^i + neg with neg = 1 - b_(k-1): one 3-bit lookup per digit
  (v_i + 4 neg -> v_i XOR 3 neg); the top digit's sign and its magnitude bit (k even) are
  one lookup each on u_(D-1).
* The sum over cells is kept **per plane**: P_i = sum over cells of (v_i XOR 3 neg) (weight
  4^i, at most 3 cells) and P_s = sum of neg, so every lookup's output stays narrow; the
  planes' bits are then added column by column (carry-save: every column sum a few bits wide)
  into InDif's binary digits, what TFHE-EXP's bit-serial product consumes.

Why digits and not one k-bit ciphertext: extracting k bits from a (k+1)-bit ciphertext
(``fhe.bits``) makes concrete pick parameters for the k+1-bit message space (2-level
bootstraps) and costs k bootstraps a cell; the digits need 2 ceil(k/2) - 1 + [k even]
lookups a cell (12 instead of 18 at k = 12), all in 3-bit partitions. Measured at k = 12, 32
cells, in one run on 2 cores: 6.3-9.0 s against 13.0-17.1 s a chunk (x0.44-0.53), every
score exact (``experiments/replaced_constructions/bench_p2_digits.py``). The key server
encrypts D ciphertexts a cell instead of one (offline, 2-bit messages).

Sensitivity (count units, K fixed public constants): adding or removing one record changes
exactly one cell of C_jk by 1, so InDif changes by at most 1 under add/remove neighbours
(our accounting) and at most 2 under substitution (one cell -1, another +1), against 4 for
PrivSyn's InDif with N and the 1-ways also data-dependent. ``tests/crypto/test_indif.py`` checks
both by enumerating neighbours.

Widths: |d| <= N, so k with N < 2^(k-1) (Fed-Heart: k = 11; Adult: k = 16). The same circuit
at a narrower w computes each cell's distance from d to the nearest multiple of 2^w
(:func:`indif_at_width`), |d| whenever |d| <= 2^(w-1): a chunk whose public bound allows it
runs at w (``params.indif_widths``), with the same sensitivity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from concrete import fhe

from feddpsyn.crypto._concrete import ensure_tag_stack, lookup, table

__all__ = ["compile_indif_chunk", "digits_of", "digit_count", "indif_offset",
           "indif_plaintext", "indif_exact", "indif_at_width", "indif_from_bits", "indif_inputset",
           "chunk_bootstraps",
           "CHUNK_COMPLEXITY", "ADD_COMPLEXITY"]

Array = np.ndarray[Any, Any]

# Cost of one P2 call by its chunk size, and of one ``add``: concrete 2.11's optimiser
# complexity at k = 11, p_error 2^-40, in units of 1e9 (``circuit.complexity`` of
# ``compile_indif_chunk``, machine-independent; 143, 194, 239, 283, 334, 378, 423 and 787
# bootstraps at 8, 12, ..., 32 and 64 cells; with one k+1-bit ciphertext a cell 8/16/32/64
# cost 13.8, 22.3, 41.1, 87.3). The per-cell cost falls with the chunk size up to 32 cells
# (the planes' digit conversion is paid once a chunk) while padding grows, so pairs are cut
# into chunks of mixed sizes (``params.selection_plan.indif_chunks``); at 64 cells the
# planes need 8 bits and dearer parameters.
CHUNK_COMPLEXITY = {8: 10.82, 12: 12.94, 16: 16.39, 20: 19.54, 24: 22.52, 28: 25.57,
                    32: 28.52, 64: 81.33}
ADD_COMPLEXITY = 1.3

# The base of the digits the key server encrypts: 2 bits, so that a digit plus the clear
# digit plus a carry fits a 3-bit lookup (wider digits need 4-bit lookups, which concrete
# gives larger parameters).
DIGIT_BITS = 2


def digit_count(count_bits: int) -> int:
    """D = ceil(k / 2): base-4 digits of a k-bit value."""
    if count_bits < 2:
        raise ValueError("P2 needs k >= 2 (one magnitude bit and the sign)")
    return -(-count_bits // DIGIT_BITS)


def digits_of(values: Array, count_bits: int) -> Array:
    """Base-4 digits of values in [0, 2^k), least significant first: shape (D, cells), what
    the key server encrypts (M) and the compute server passes in clear (c)."""
    values = np.asarray(values, dtype=np.int64)
    if values.size and (values.min() < 0 or values.max() >> count_bits):
        raise ValueError(f"P2's inputs are residues mod 2^{count_bits}")
    return np.stack([(values >> (DIGIT_BITS * i)) & 3 for i in range(digit_count(count_bits))])


def _plane_maxima(count_bits: int, cells: int) -> list[tuple[int, int]]:
    """(weight exponent, maximum) of every plane: one per full magnitude digit (sums of values
    below 4 over the cells), the top digit's magnitude bit when k is even, and the signs."""
    full = (count_bits - 1) // DIGIT_BITS
    planes = [(DIGIT_BITS * i, 3 * cells) for i in range(full)]
    if count_bits % 2 == 0:
        planes.append((count_bits - 2, cells))
    return planes + [(0, cells)]


def chunk_bootstraps(cells: int, count_bits: int) -> int:
    """An upper bound on the lookups of one P2 call, counted from the circuit: per cell a carry
    per digit below the top, one XOR per full magnitude digit, the sign and (k even) the top
    magnitude bit; per plane its bits; per digit column of the carry-save at most two (digit
    and carry). Tested against concrete's count (``tests/crypto/test_indif.py``); it feeds the
    session's union bound on bootstrap failures."""
    k = count_bits
    d = digit_count(k)
    per_cell = (d - 1) + (k - 1) // DIGIT_BITS + 1 + (1 if k % 2 == 0 else 0)
    maxima = _plane_maxima(k, cells)
    plane_bits = sum(top.bit_length() for _, top in maxima)
    columns = (k - 1) + cells.bit_length() + 3
    return cells * per_cell + plane_bits + 2 * columns


def indif_offset(mask_sum: Array, expected: Array, count_bits: int) -> Array:
    """The compute server's clear c = (2^(k-1) - S - K) mod 2^k per cell."""
    modulus = 1 << count_bits
    return (modulus // 2 - np.asarray(mask_sum, dtype=np.int64)
            - np.asarray(expected, dtype=np.int64)) % modulus


def indif_plaintext(masked_sum: Array, offset: Array, count_bits: int) -> int:
    """The circuit's exact integer model: sum of |((M + c) mod 2^k) - 2^(k-1)|."""
    modulus = 1 << count_bits
    v = (np.asarray(masked_sum, dtype=np.int64) + np.asarray(offset, dtype=np.int64)) % modulus
    return int(np.abs(v - modulus // 2).sum())


def indif_exact(counts: Array, expected: Array) -> int:
    """The score itself, from counts in clear (reference for tests)."""
    return int(np.abs(np.asarray(counts, dtype=np.int64) - np.asarray(expected)).sum())


def indif_at_width(counts: Array, expected: Array, width: int) -> int:
    """What P2 at width w computes from counts in clear: per cell the distance from
    d = C - K to the nearest multiple of 2^w (|d| whenever |d| <= 2^(w-1)), summed. A
    distance to a set is 1-Lipschitz, so the score's sensitivity is 1 at every width
    (``params.indif_widths``)."""
    half = 1 << (width - 1)
    d = np.asarray(counts, dtype=np.int64) - np.asarray(expected, dtype=np.int64)
    return int(np.abs((d + half) % (2 * half) - half).sum())



_CARRY = table(lambda u: int(u >= 4), 3)                   # u = M_i + c_i + carry_i <= 7
_XOR_SIGN = table(lambda t: (t & 3) ^ (3 if t >> 2 else 0), 3)   # v_i + 4 neg
# The top digit's u: k even, bits (k-2, k-1) of v = u mod 4; k odd, bit k-1 = u mod 2.
_NEG_EVEN = table(lambda u: 1 - ((u >> 1) & 1), 3)
_TOP_EVEN = table(lambda u: (u & 1) ^ (1 - ((u >> 1) & 1)), 3)
# u <= 3 here, but every row of the digit tensor must share one encoding (concrete gives a
# tensor one width), so this lookup is declared as wide as the others.
_NEG_ODD = table(lambda u: 1 - (u & 1), 3)



def _indif_bits_function(count_bits: int, cells: int) -> Callable[..., tuple[Any, ...]]:
    """P2 on one chunk (module docstring): base-4 digits of M (encrypted) and c (clear), each
    (D, cells), to InDif's binary digits, least significant first."""
    k = count_bits
    d = digit_count(k)
    maxima = _plane_maxima(k, cells)

    def indif_bits(masked_digits: Any, offset_digits: Any) -> tuple[Any, ...]:
        values, carry = [], None
        for i in range(d - 1):
            u = masked_digits[i] + offset_digits[i] + (0 if carry is None else carry)
            carry = lookup(_CARRY, u)
            values.append(fhe.hint(u - 4 * carry, can_store=3))  # leveled: u mod 4
        u = masked_digits[d - 1] + offset_digits[d - 1] + (0 if carry is None else carry)
        if k % 2 == 0:
            negative = lookup(_NEG_EVEN, u)
            top = [lookup(_TOP_EVEN, u)]
        else:
            negative, top = lookup(_NEG_ODD, u), []
        planes = [np.sum(lookup(_XOR_SIGN, v + 4 * negative)) for v in values]
        planes += [np.sum(t) for t in top] + [np.sum(negative)]
        planes = [fhe.hint(p, can_store=m) for p, (_, m) in zip(planes, maxima)]
        columns: dict[int, list[Any]] = {}
        for plane, (weight, most) in zip(planes, maxima):
            for t in range(most.bit_length()):
                columns.setdefault(weight + t, []).append(fhe.bits(plane)[t])
        digits, carry, carry_max = [], None, 0
        for j in range(max(columns) + 2 * max(m.bit_length() for _, m in maxima) + 2):
            terms = columns.get(j, []) + ([] if carry is None else [carry])
            if not terms:
                break
            total = terms[0]
            for term in terms[1:]:
                total = total + term
            # A column holds 0/1 bits plus the carry from below: its exact maximum.
            total_max = len(columns.get(j, [])) + carry_max
            total = fhe.hint(total, can_store=max(1, total_max))
            digits.append(fhe.bits(total)[0])
            carry = total // 2 if len(terms) > 1 else None
            carry_max = total_max // 2 if len(terms) > 1 else 0
        return tuple(digits)

    return indif_bits


def indif_from_bits(digits: Iterable[Any]) -> int:
    """InDif from its binary digits (least significant first)."""
    return sum(int(b) << i for i, b in enumerate(digits))


def indif_inputset(count_bits: int, cells: int,
                   rng: np.random.Generator) -> list[tuple[Array, Array]]:
    """Digit inputs (D, cells) from 0 to 3 in every row, the extremes included. With k odd the
    top digit of a residue is at most 1, but concrete gives a tensor one encoding for all its
    rows, and a row that the input set keeps below 2 made its slices disagree with the others
    (a compile error): so the set spans 0..3 in every row; the lookups are correct on the
    residues' digits (``tests/crypto/test_indif.py``)."""
    d = digit_count(count_bits)
    zero = np.zeros((d, cells), dtype=np.int64)
    centre = digits_of(np.full(cells, 1 << (count_bits - 1)), count_bits)
    pairs = [(zero, zero), (zero + 3, zero + 3), (zero, centre)]
    return pairs + [(rng.integers(0, 4, (d, cells)), rng.integers(0, 4, (d, cells)))
                    for _ in range(8)]


def compile_indif_chunk(cells: int, count_bits: int, p_error: float) -> fhe.Circuit:
    """Compile P2 over ``cells`` cells of one pair (pad with M = 0, c = 2^(k-1): |d| = 0);
    run it on ``digits_of(M)`` and ``digits_of(c)``; :func:`indif_from_bits` reads InDif."""
    ensure_tag_stack()
    compiler = fhe.Compiler(_indif_bits_function(count_bits, cells),
                            {"masked_digits": "encrypted", "offset_digits": "clear"})
    configuration = fhe.Configuration(p_error=p_error, global_p_error=None,
                                      show_progress=False, compress_evaluation_keys=True,
                                      compress_input_ciphertexts=True)
    return compiler.compile(indif_inputset(count_bits, cells, np.random.default_rng(0)),
                            configuration)
