"""Primitive 2 (FedDPSyn, Section 4): the InDif dependency score under encryption.

PrivSyn's InDif for attributes (j, k) is sum over cells |C_jk / N - C_j C_k / N^2| (times N).
The paper computes it with every count encrypted, which needs encrypted x encrypted products;
in concrete that is infeasible beyond 4-bit inputs (DESIGN.md). We use the released noisy
1-ways as *public* expected counts K = round(C_j C_k / N) (post-processing of a release,
no extra privacy cost) and compute

    InDif(j, k) = sum over the pair's cells of |C_jk - K_jk|

on ciphertexts, with one lookup-free bit decomposition per cell:

* the key server encrypts M = (sum_i m_i) mod 2^k per cell (it holds every masked value in
  clear; their sum is as uniform as each one), a fresh k-bit ciphertext;
* the compute server adds the clear c = (2^(k-1) - S - K) mod 2^k (S: the mask sum it
  expands from the seeds), so x = M + c < 2^(k+1) never wraps, and the low k bits of x are
  v = d + 2^(k-1) mod 2^k with d = C - K;
* ``fhe.bits`` extracts v's bits b_0..b_(k-1); bit k-1 is the sign (1 iff d >= 0), and in
  two's complement |d| = sum_{i<k-1} (b_i XOR neg) 2^i + neg with neg = 1 - b_(k-1): one
  2-bit lookup per XOR. About 2k bootstraps per cell, exact.
* The sum over cells is kept **per bit plane**: P_i = sum over cells of (b_i XOR neg) and
  P_k = sum of neg, each at most ``cells`` (log2(cells) + 1 bits), so every lookup's output
  stays narrow. InDif = sum_i 2^i P_i + P_k. (Accumulating |d| itself forces each lookup's
  output into the accumulator's k-bit encoding, for which concrete finds no parameters at
  k >= 12; planes compile at k = 16 with 2 s keygen and 40 MB evaluation keys.) The planes
  are the input of the next stage. With ``output="bits"`` the circuit goes on to add the
  planes' bits column by column (every column sum a few bits wide) and returns InDif's binary
  digits, what TFHE-EXP's bit-serial product consumes (k = 16, 64 cells: 34 bootstraps/cell,
  4.6 s keygen, 85 MB evaluation keys, 0.30 s/cell). Adding the planes with wide lookups
  instead couples the widths (88 s keygen, 1.5 GB keys, 1.0 s/cell). The ``output="bits"``
  form takes the XORs two bits at a time (one 3-bit lookup for two 2-bit ones, ``XOR_PACK``;
  planes of weight 2^i sum values up to 3): k + ceil((k-1)/2) bootstraps per cell.

Sensitivity (count units, K fixed public constants): adding or removing one record changes
exactly one cell of C_jk by 1, so InDif changes by at most 1 under add/remove neighbours
(our accounting) and at most 2 under substitution (one cell -1, another +1), against 4 for
PrivSyn's InDif with N and the 1-ways also data-dependent. ``tests/test_indif.py`` checks
both by enumerating neighbours.

Widths: |d| <= N, so k with N < 2^(k-1) (Fed-Heart: k = 11; Adult: k = 16).
"""

from __future__ import annotations

import numpy as np
from concrete import fhe

from crypto._concrete import ensure_tag_stack

__all__ = ["compile_indif_chunk", "indif_offset", "indif_plaintext", "indif_exact",
           "indif_from_planes", "indif_from_bits", "chunk_bootstraps",
           "CHUNK_COMPLEXITY", "ADD_COMPLEXITY"]

# Cost of one P2 call with ``output="bits"`` by its chunk size, and of one ``add``: concrete
# 2.11's optimiser complexity at k = 11, p_error 2^-40, in units of 1e9 (measured with
# ``circuit.complexity`` of ``compile_indif_chunk``, machine-independent; with the XORs
# packed, ``XOR_PACK``: unpacked it was 16.0, 29.8, 49.0, 94.0). The per-cell cost falls with
# the chunk size up to 32 cells (the planes' digit conversion is paid once a chunk: 1.73 per
# cell at 8 cells, 1.28 at 32) while padding grows, so pairs are cut into chunks of mixed sizes
# (``params.session_plan.indif_chunks``). Fed-Heart-Disease's cut is the same with either
# table (103 chunks: 42 of 8 cells, 29 of 16, 32 of 32).
CHUNK_COMPLEXITY = {8: 13.8, 16: 22.3, 32: 41.1, 64: 87.3}
ADD_COMPLEXITY = 1.3


def chunk_bootstraps(cells: int, count_bits: int) -> int:
    """An upper bound on the lookups of one ``output="bits"`` call, counted from the circuit:
    per cell k bit extractions and one packed XOR per ``XOR_PACK`` magnitude bits; per plane
    its bits; per digit column of the carry-save at most two (digit and carry). Tested against
    concrete's count (``tests/test_indif.py``); it feeds the session's union bound on
    bootstrap failures."""
    k = count_bits
    maxima = _plane_maxima(k, cells)
    plane_bits = sum(top.bit_length() for _, top in maxima)
    columns = (k - 1) + cells.bit_length() + 3
    return cells * (k + len(_packs(k))) + plane_bits + 2 * columns


def indif_offset(mask_sum: np.ndarray, expected: np.ndarray, count_bits: int) -> np.ndarray:
    """The compute server's clear c = (2^(k-1) - S - K) mod 2^k per cell."""
    modulus = 1 << count_bits
    return (modulus // 2 - np.asarray(mask_sum, dtype=np.int64)
            - np.asarray(expected, dtype=np.int64)) % modulus


def indif_plaintext(masked_sum: np.ndarray, offset: np.ndarray, count_bits: int) -> int:
    """The circuit's exact integer model: sum of |((M + c) mod 2^k) - 2^(k-1)|."""
    modulus = 1 << count_bits
    v = (np.asarray(masked_sum, dtype=np.int64) + np.asarray(offset, dtype=np.int64)) % modulus
    return int(np.abs(v - modulus // 2).sum())


def indif_exact(counts: np.ndarray, expected: np.ndarray) -> int:
    """The score itself, from counts in clear (reference for tests)."""
    return int(np.abs(np.asarray(counts, dtype=np.int64) - np.asarray(expected)).sum())


def indif_from_planes(planes) -> int:
    """InDif = sum_i 2^i P_i + P_k from the circuit's k bit-plane sums (last: the signs)."""
    planes = [int(p) for p in planes]
    return sum(p << i for i, p in enumerate(planes[:-1])) + planes[-1]


def _indif_function(count_bits: int):
    k = count_bits
    xor = fhe.univariate(lambda t: t % 2)

    def indif(masked_sum, offset):
        # Every width is declared (fhe.hint): an input set cannot be trusted to reach each
        # intermediate's maximum, and a too narrow encoding would wrap silently.
        x = fhe.hint(masked_sum + offset, can_store=(1 << (k + 1)) - 2)
        bits = [fhe.bits(x)[i] for i in range(k)]
        negative = 1 - bits[k - 1]
        planes = [np.sum(xor(fhe.hint(bits[i] + negative, can_store=2)))
                  for i in range(k - 1)]
        return tuple(planes + [np.sum(negative)])

    return indif


# XORs with the sign taken two bits at a time: one 3-bit lookup t = b_i + 2 b_(i+1) + 4 neg ->
# (b_i XOR neg) + 2 (b_(i+1) XOR neg) instead of two 2-bit lookups. Measured with concrete 2.11
# at Fed-Heart's widths (k = 11, the em module with its 66-candidate select): a 32-cell chunk
# needs 568 bootstraps instead of 749, and the bit extraction's key switch 5 levels instead of 9
# (bench/bench_p2_widths.py). Three bits at a time (4-bit lookups) costs more: those lookups
# need larger parameters.
XOR_PACK = 2


def _xor_table(width: int) -> fhe.LookupTable:
    """t = sum_j 2^j b_j + 2^width neg  ->  sum_j 2^j (b_j XOR neg), for ``width`` bits b_j."""
    ones = (1 << width) - 1
    return fhe.LookupTable([(t & ones) ^ (ones if t >> width else 0)
                            for t in range(1 << (width + 1))])


def _packs(count_bits: int, pack: int = XOR_PACK) -> list[tuple[int, int]]:
    """(first bit, width) of each packed XOR lookup over the k - 1 magnitude bits."""
    packs, i = [], 0
    while i < count_bits - 1:
        width = min(pack, count_bits - 1 - i)
        packs.append((i, width))
        i += width
    return packs


def _plane_maxima(count_bits: int, cells: int, pack: int = XOR_PACK) -> list[tuple[int, int]]:
    """(weight, maximum) of every plane of the packed form: a pack of width w sums
    values below 2^w over the cells; the sign plane sums ``neg``."""
    return [(first, ((1 << width) - 1) * cells) for first, width in _packs(count_bits, pack)] + [
        (0, cells)]


def _indif_bits_function(count_bits: int, cells: int, pack: int = XOR_PACK):
    """P2 with InDif's binary digits as output, least significant first: the input TFHE-EXP's
    bit-serial product consumes. As ``_indif_function`` (bit extraction, XOR with the sign,
    per-plane sums over the cells) with the XORs packed (``XOR_PACK``); then the planes' bits
    are added column by column (carry-save: every column sum is a few bits wide). ``pack=1``
    is the unpacked form (one 2-bit lookup per XOR), kept for ``bench/bench_p2_widths.py``."""
    k = count_bits
    packs = _packs(k, pack)
    tables = {width: _xor_table(width) for _, width in packs}
    maxima = _plane_maxima(k, cells, pack)

    def indif_bits(masked_sum, offset):
        # Every width is declared (fhe.hint), as in ``_indif_function``.
        x = fhe.hint(masked_sum + offset, can_store=(1 << (k + 1)) - 2)
        bits = [fhe.bits(x)[i] for i in range(k)]
        negative = 1 - bits[k - 1]
        planes = []
        for (first, width), (_, top) in zip(packs, maxima):
            t = negative * (1 << width)
            for j in range(width):
                t = t + bits[first + j] * (1 << j)
            t = fhe.hint(t, can_store=(1 << (width + 1)) - 1)
            planes.append(fhe.hint(np.sum(tables[width][t]), can_store=top))
        planes.append(fhe.hint(np.sum(negative), can_store=cells))
        columns: dict[int, list] = {}
        for plane, (weight, top) in zip(planes, maxima):
            for t in range(top.bit_length()):
                columns.setdefault(weight + t, []).append(fhe.bits(plane)[t])
        digits, carry, carry_max = [], None, 0
        for j in range(max(columns) + 2 * max(top.bit_length() for _, top in maxima) + 2):
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


def indif_from_bits(digits) -> int:
    """InDif from its binary digits (least significant first)."""
    return sum(int(b) << i for i, b in enumerate(digits))


def compile_indif_chunk(cells: int, count_bits: int, p_error: float,
                        output: str = "planes") -> fhe.Circuit:
    """Compile P2 over ``cells`` cells of one pair (pad with M = 0, c = 2^(k-1): |d| = 0).

    ``output="planes"``: k encrypted plane sums (:func:`indif_from_planes`);
    ``output="bits"``: InDif's binary digits (:func:`indif_from_bits`).
    """
    ensure_tag_stack()
    k = count_bits
    if output not in ("planes", "bits"):
        raise ValueError("output is 'planes' or 'bits'")
    function = _indif_function(k) if output == "planes" else _indif_bits_function(k, cells)
    compiler = fhe.Compiler(function, {"masked_sum": "encrypted", "offset": "clear"})
    zero = np.zeros(cells, dtype=np.int64)
    top = np.full(cells, (1 << k) - 1, dtype=np.int64)
    centre = np.full(cells, 1 << (k - 1), dtype=np.int64)
    rng = np.random.default_rng(0)
    # (0, 0) gives v = 0, d = -2^(k-1) in every cell: every plane reaches its bound, cells.
    inputset = [(zero, zero), (top, top), (zero, centre)]
    inputset += [(rng.integers(0, 1 << k, cells), rng.integers(0, 1 << k, cells))
                 for _ in range(8)]
    configuration = fhe.Configuration(p_error=p_error, global_p_error=None,
                                      show_progress=False, compress_evaluation_keys=True,
                                      compress_input_ciphertexts=True)
    return compiler.compile(inputset, configuration)
