"""Client-side Shamir sharing of count vectors for the three DistAIM servers, and the servers'
share-consistency check.

DistAIM (FLAIM paper, Algorithm 3, line 4) has every client secret-share its workload answers
once; the servers add the shares of all clients locally (Shamir sharing is linear) and run
AIM's select and measure steps on the sums inside MPC. We use Shamir sharing over the prime
field of the servers' MPyC secure integers, threshold t = 1 of m = 3 (honest majority,
semi-honest): party ``i`` (MPyC pid ``i - 1``) holds f(i) for a random polynomial f of degree 1
with f(0) = the count. Any one share is uniform; any two reconstruct.

Seed-compressed upload. With t = 1 exactly one share per value can be chosen freely, so the
client draws a 256-bit seed, expands it with SHAKE-256 into party 1's share vector r, and sets
f(x) = s + (r - s) x: party 1 receives only the seed, parties 2 and 3 receive
f(2) = 2r - s and f(3) = 3r - 2s (each uniform on its own, because r is). The upload is two
vectors plus 32 bytes instead of three vectors. (Two seed-derived shares would need an
additive 3-out-of-3 sharing converted to Shamir by the servers; that loses the redundancy the
consistency check below relies on, so it is not offered.) A field element is expanded from
``bits(p) + 128`` bits of SHAKE output reduced mod p: statistical distance from uniform below
2^-128 per element.

Consistency check (a random-linear-combination degree check). Three shares of a degree-1
polynomial satisfy f(1) - 2 f(2) + f(3) = 0; a client whose three vectors are not on one line
(a tampered, truncated or mismatched share) would make two subsets of servers disagree on its
counts. After all uploads are in, the servers agree on a random challenge (from a joint seed
each contributes to), each computes v_i = sum_j rho_j share_i[j] + z_i, where z is a fresh
random degree-1 sharing (PRSS, known to nobody) that hides the combination of the counts, and
the three v_i are exchanged and must satisfy v_1 - 2 v_2 + v_3 = 0. An inconsistent client
passes with probability at most 1/p (the combination of a non-zero second difference with a
uniform challenge is uniform). A failing client is excluded, with a record, never summed.

>>> p = 2**61 - 1
>>> shares = share_vector([3, 0, 7], p)
>>> reconstruct({1: shares[0], 3: shares[2]}, p)
[3, 0, 7]
>>> seed, compressed = share_vector_seeded([3, 0, 7], p, "s", "c")
>>> reconstruct({1: expand_share(seed, p, "s", "c", 3), 3: compressed[1]}, p)
[3, 0, 7]
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence

__all__ = ["PARTIES", "THRESHOLD", "share_vector", "share_vector_seeded", "expand_share",
           "reconstruct", "challenge_vector", "check_value", "collinear", "encode_vector",
           "decode_vector", "element_bytes"]

PARTIES = 3
THRESHOLD = 1
SEED_BYTES = 32
_TAG = b"feddpsyn/distaim/share/v1"
_CHALLENGE_TAG = b"feddpsyn/distaim/challenge/v1"


def _frame(*parts: bytes) -> bytes:
    # Length-prefix every part so that different (session, client, ...) inputs never collide.
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def _expand(tag: bytes, key: bytes, modulus: int, length: int, *labels: str) -> list[int]:
    width = (modulus.bit_length() + 128 + 7) // 8
    stream = hashlib.shake_256(_frame(tag, key, *(s.encode() for s in labels))).digest(
        width * length)
    return [int.from_bytes(stream[i * width:(i + 1) * width], "little") % modulus
            for i in range(length)]


def _as_field(values: Sequence[int], modulus: int) -> list[int]:
    out = [int(v) for v in values]
    if any(v < 0 or v >= modulus for v in out):
        raise ValueError("values must lie in [0, p)")
    return out


def share_vector(values: Sequence[int], modulus: int) -> list[list[int]]:
    """Three Shamir share vectors [f(1), f(2), f(3)] of ``values``, threshold 1."""
    secret = _as_field(values, modulus)
    slope = [secrets.randbelow(modulus) for _ in secret]
    return [[(s + c * x) % modulus for s, c in zip(secret, slope)] for x in (1, 2, 3)]


def expand_share(seed: bytes, modulus: int, session_id: str, client_id: str,
                 length: int) -> list[int]:
    """Party 1's share vector from the client's seed (seed-compressed upload)."""
    if len(seed) != SEED_BYTES:
        raise ValueError(f"seed must be {SEED_BYTES} bytes")
    return _expand(_TAG, seed, modulus, length, session_id, client_id)


def share_vector_seeded(values: Sequence[int], modulus: int, session_id: str,
                        client_id: str) -> tuple[bytes, list[list[int]]]:
    """(seed for party 1, [share of party 2, share of party 3]) for ``values``."""
    secret = _as_field(values, modulus)
    seed = secrets.token_bytes(SEED_BYTES)
    r = expand_share(seed, modulus, session_id, client_id, len(secret))
    return seed, [[(2 * ri - s) % modulus for s, ri in zip(secret, r)],
                  [(3 * ri - 2 * s) % modulus for s, ri in zip(secret, r)]]


def reconstruct(points: Mapping[int, Sequence[int]], modulus: int) -> list[int]:
    """The secrets f(0) from two (or more) parties' share vectors, keyed by x = 1, 2, 3.

    Uses the first two parties given; ``collinear`` is the check that all three agree.
    """
    if len(points) < 2:
        raise ValueError("need the shares of at least two parties")
    (xa, a), (xb, b) = sorted(points.items())[:2]
    # Lagrange at 0 for the points xa, xb: f(0) = (xb f(xa) - xa f(xb)) / (xb - xa).
    inv = pow(xb - xa, -1, modulus)
    return [((xb * u - xa * v) * inv) % modulus for u, v in zip(a, b)]


def challenge_vector(joint_seed: bytes, client_id: str, modulus: int, length: int) -> list[int]:
    """The random combination rho for one client, from the servers' joint seed."""
    return _expand(_CHALLENGE_TAG, joint_seed, modulus, length, client_id)


def check_value(share: Sequence[int], rho: Sequence[int], mask_share: int, modulus: int) -> int:
    """One party's v_i = sum_j rho_j share_i[j] + z_i (z_i: its share of a random mask)."""
    if len(share) != len(rho):
        raise ValueError("share and challenge lengths differ")
    return (sum(r * s for r, s in zip(rho, share)) + mask_share) % modulus


def collinear(v1: int, v2: int, v3: int, modulus: int) -> bool:
    """True iff the points (1, v1), (2, v2), (3, v3) lie on a polynomial of degree <= 1."""
    return (v1 - 2 * v2 + v3) % modulus == 0


def element_bytes(modulus: int) -> int:
    return (modulus.bit_length() + 7) // 8


def encode_vector(values: Sequence[int], modulus: int) -> bytes:
    """Fixed-width little-endian encoding of field elements (the upload's wire form)."""
    width = element_bytes(modulus)
    return b"".join(int(v).to_bytes(width, "little") for v in _as_field(values, modulus))


def decode_vector(data: bytes, modulus: int, length: int) -> list[int]:
    """Inverse of ``encode_vector``; refuses a wrong length or an element outside [0, p)."""
    width = element_bytes(modulus)
    if len(data) != width * length:
        raise ValueError(f"expected {width * length} bytes, got {len(data)}")
    values = [int.from_bytes(data[i * width:(i + 1) * width], "little") for i in range(length)]
    if any(v >= modulus for v in values):
        raise ValueError("share element outside the field")
    return values
