"""One-time masks for the masked upload (DESIGN step 3): m = (x + s) mod 2^k.

A client draws a fresh 256-bit seed, sends the seed to the compute server and the masked
vector m to the key server. The key server sees only uniform values; the compute server sees
only the seed and ciphertexts.

Design concern: **both ends expand the seed to the same masks, and the masks are uniform.**
The expansion is SHAKE-256 (an extendable-output function, usable as a PRF/CSPRNG) over a
domain-separated input (protocol tag, session id, client id, seed), read as little-endian
64-bit words and reduced modulo 2^k; since 2^k divides 2^64 the reduction adds no bias.

>>> seed = bytes(32)
>>> masks = expand_masks(seed, "s1", "c1", 4, count_bits=16)
>>> masks.tolist() == expand_masks(seed, "s1", "c1", 4, count_bits=16).tolist()
True
>>> unmask_sum(mask_counts(np.array([5, 0, 7, 1]), masks, 16), masks, 16).tolist()
[5, 0, 7, 1]
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

import numpy as np

__all__ = ["SEED_BYTES", "new_seed", "expand_masks", "mask_counts", "unmask_sum",
           "seed_commitment", "absent_commitment", "mask_sum"]

Array = np.ndarray[Any, Any]

SEED_BYTES = 32
_TAG = b"feddpsyn/mask/v1"


def new_seed() -> bytes:
    return secrets.token_bytes(SEED_BYTES)


def _frame(*parts: bytes) -> bytes:
    # Length-prefix every part so that no two different (session, client) pairs collide.
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def expand_masks(seed: bytes, session_id: str, client_id: str, length: int,
                 count_bits: int) -> Array:
    """The client's mask vector s, uniform in [0, 2^count_bits)^length."""
    if len(seed) != SEED_BYTES:
        raise ValueError(f"seed must be {SEED_BYTES} bytes")
    if not 1 <= count_bits <= 62:
        raise ValueError("count_bits must be in [1, 62]")
    xof = hashlib.shake_256(_frame(_TAG, session_id.encode(), client_id.encode(), seed))
    words = np.frombuffer(xof.digest(8 * length), dtype="<u8")
    return (words & np.uint64((1 << count_bits) - 1)).astype(np.int64)


def mask_counts(counts: Array, masks: Array, count_bits: int) -> Array:
    counts = np.asarray(counts, dtype=np.int64)
    if counts.min(initial=0) < 0 or counts.max(initial=0) >= (1 << count_bits):
        raise ValueError(f"counts must lie in [0, 2^{count_bits})")
    return (counts + masks) % (1 << count_bits)


def unmask_sum(masked_sum: Array, mask_sum: Array, count_bits: int) -> Array:
    """(sum of masked vectors - sum of masks) mod 2^k: the plaintext model of Primitive 1."""
    return (np.asarray(masked_sum, dtype=np.int64) - mask_sum) % (1 << count_bits)


def seed_commitment(seed: bytes, session_id: str, client_id: str) -> str:
    """A hash binding the masked vector (at the key server) to the seed (at the compute server).

    The key server stores it beside the masked vector and forwards it with the ciphertexts; the
    compute server checks it against the seed it received, so a client that re-uploaded one
    half with a new seed is caught before any sum is formed. The seed has 256 bits of entropy,
    so the hash reveals nothing usable about it.
    """
    return hashlib.sha256(_frame(b"feddpsyn/commit/v1", session_id.encode(),
                                 client_id.encode(), seed)).hexdigest()


def absent_commitment(session_id: str, client_id: str) -> str:
    """The commitment of an owner left out of a session (``keyserver.uploads``): the key
    server stores a vector of zeros for it under this public value, and the compute server
    reads it as "no seed, no mask". Domain-separated from :func:`seed_commitment`, whose
    values are hashes of a secret 256-bit seed, so no upload can carry it by chance."""
    return hashlib.sha256(_frame(b"feddpsyn/absent/v1", session_id.encode(),
                                 client_id.encode())).hexdigest()


def mask_sum(seeds: dict[str, bytes | None], session_id: str, clients: list[str],
             length: int, count_bits: int) -> Array:
    """The sum of the ``clients``' masks; a client whose seed is None (left out of the
    session, its masked vector zeros) adds no mask.

    >>> seed = bytes(32)
    >>> both = mask_sum({"a": seed, "b": None}, "s1", ["a", "b"], 3, 16)
    >>> both.tolist() == expand_masks(seed, "s1", "a", 3, 16).tolist()
    True
    """
    total = np.zeros(length, dtype=np.int64)
    for client_id in clients:  # bounded: the session's clients
        seed = seeds[client_id]
        if seed is not None:
            total += expand_masks(seed, session_id, client_id, length, count_bits)
    return total
