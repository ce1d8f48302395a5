"""Primitive 1 (FedDPSyn, Section 4): encrypted aggregation of masked client counts.

Paper pseudocode (Primitive 1): clients encrypt their marginal counts Ct[attr | D_i]; the
server sums the ciphertexts with the TFHE add operator and, if DPFlag is set, adds integer
noise before the key server decrypts. Our masked-upload form (DESIGN step 3-4):

    out = (m_1 + ... + m_n) * select + offset,
    offset = (select * (noise - sum_i s_i)) mod 2^k + 2^k * r,     r uniform in {0, 1},

over one chunk of cells, where m_i = (x_i + s_i) mod 2^k is client i's masked vector
encrypted by the key server, s_i its masks (known to the compute server from the seed),
``select`` is 1 on the cells of the registered release and 0 elsewhere, and ``noise`` the
compute server's discrete Gaussian noise.

Design concern: **the key server learns (sum x + noise) mod 2^k on the selected cells and
nothing else, exactly.** The circuit's encoding width is pinned to k bits (the input set never
exceeds 2^k), so the sum wraps modulo the plaintext space 2^(k+1) (k bits plus concrete's
padding bit) instead of carrying the count of mask wrap-arounds, which would leak. The
remaining bit k is XORed with a fresh uniform bit r, so it is independent of the data: the
decrypted value's distribution is a function of (sum x + noise) mod 2^k alone, with no
statistical slack. Unselected cells decrypt to (offset), which holds no data.

The circuit is leveled (additions and a clear multiplication: no bootstrapping), so it needs
no evaluation keys and its only error source is encryption noise, bounded by ``p_error``.
"""

from __future__ import annotations

import inspect
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from concrete import fhe

from feddpsyn.crypto._concrete import ensure_tag_stack

__all__ = ["compile_aggregation", "release_offset", "decode_release", "publish_counts",
           "aggregate_plaintext", "chunk_ranges"]

Array = np.ndarray[Any, Any]


def _aggregate_function(n_clients: int) -> Callable[..., Any]:
    # concrete traces by calling with keyword arguments named after the signature.
    def aggregate(**kwargs: Any) -> Any:
        masked = [kwargs[f"m{i}"] for i in range(n_clients)]
        select, offset = kwargs["select"], kwargs["offset"]
        total = masked[0]
        for m in masked[1:]:
            total = total + m
        return total * select + offset

    params = [inspect.Parameter(f"m{i}", inspect.Parameter.KEYWORD_ONLY)
              for i in range(n_clients)]
    params += [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY)
               for n in ("select", "offset")]
    aggregate.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return aggregate


def compile_aggregation(n_clients: int, chunk_cells: int, count_bits: int,
                        p_error: float) -> fhe.Circuit:
    """Compile the P1 circuit for ``n_clients`` masked vectors of ``chunk_cells`` cells."""
    if n_clients < 1:
        raise ValueError("need at least one client")
    ensure_tag_stack()
    func = _aggregate_function(n_clients)
    encryption = {f"m{i}": "encrypted" for i in range(n_clients)}
    encryption.update(select="clear", offset="clear")
    compiler = fhe.Compiler(func, encryption)
    zero = np.zeros(chunk_cells, dtype=np.int64)
    one = np.ones(chunk_cells, dtype=np.int64)
    top = np.full(chunk_cells, (1 << count_bits) - 1, dtype=np.int64)
    # Every value in this input set stays below 2^k: that pins the encoding to k bits, which
    # is what makes the run-time sum wrap modulo the plaintext space (see module docstring).
    share = top // n_clients
    inputset = [
        tuple([zero] * n_clients + [zero, zero]),
        tuple([share] * n_clients + [one, zero]),
        tuple([zero] * n_clients + [one, top]),
    ]
    configuration = fhe.Configuration(
        compress_input_ciphertexts=True,
        compress_evaluation_keys=True,
        show_progress=False,
        p_error=p_error,
        global_p_error=None,
    )
    circuit = compiler.compile(inputset, configuration)
    width = circuit.graph.maximum_integer_bit_width()
    if width != count_bits:
        raise RuntimeError(f"aggregation circuit width {width} != count_bits {count_bits}")
    return circuit


def release_offset(mask_sum: Array, noise: Array, select: Array,
                   count_bits: int) -> Array:
    """The compute server's clear offset for one chunk (module docstring)."""
    modulus = 1 << count_bits
    select = np.asarray(select, dtype=np.int64)
    low = (select * (np.asarray(noise, dtype=np.int64) - mask_sum)) % modulus
    high = np.array([secrets.randbelow(2) for _ in range(len(select))], dtype=np.int64)
    out: Array = low + modulus * high
    return out


def decode_release(decrypted: Array, count_bits: int) -> Array:
    """Key-server side: keep the low k bits and read them as a centred signed integer."""
    modulus = 1 << count_bits
    low = np.asarray(decrypted, dtype=np.int64) % modulus
    return np.where(low >= modulus // 2, low - modulus, low)


def publish_counts(decrypted: Array, noise: Array, count_bits: int) -> Array:
    """The key server's published counts: its own noise added to the decrypted residues
    *modulo 2^k*, then read as centred integers.

    The order matters for the compute server's view. It knows its own noise z_CS, so it sees
    the release as a function of count + z_CS + z_KS. Centring first and adding z_KS after
    would publish centre(count + z_CS) + z_KS, and centre() jumps by 2^k where count + z_CS
    crosses 2^(k-1): a neighbouring count could move the published value by 2^k, which
    z_KS cannot hide. Adding mod 2^k first makes the release a post-processing of
    count + z_CS + z_KS (``tests/crypto/test_release_views.py``).

    >>> publish_counts(np.array([7]), np.array([1]), 4).tolist()  # 7 + 1 = 8 = -8 mod 16
    [-8]
    """
    total = np.asarray(decrypted, dtype=np.int64) + np.asarray(noise, dtype=np.int64)
    return decode_release(total, count_bits)


def aggregate_plaintext(masked: list[Array], select: Array,
                        offset: Array, count_bits: int) -> Array:
    """The exact integer model of the circuit, modulo its plaintext space 2^(k+1)."""
    total = np.sum(np.asarray(masked, dtype=np.int64), axis=0)
    out: Array = (total * np.asarray(select) + np.asarray(offset)) % (1 << (count_bits + 1))
    return out


@dataclass(frozen=True)
class ChunkRange:
    index: int
    start: int
    stop: int


def chunk_ranges(total_cells: int, chunk_cells: int) -> list[ChunkRange]:
    """The chunks a vector of ``total_cells`` cells is cut into (last one padded)."""
    n = -(-total_cells // chunk_cells)
    return [ChunkRange(i, i * chunk_cells, min((i + 1) * chunk_cells, total_cells))
            for i in range(n)]
