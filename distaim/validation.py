"""Is a client's upload a table's counts? A check inside MPC, per client, before anything is
summed.

The degree check (``distaim.sharing``) proves that a client's three share vectors agree, not
that they hold counts: a client could share negative counts, marginals that contradict each
other, or field elements near the modulus, on which MPyC's comparisons (which assume their
input below 2^l) return garbage -- the scores' secure |x| then move by far more than one per
record and the exponential mechanism's privacy claim is void. Design concern: **every client
summed holds, as integers, the counts of some table of at most ``bound`` rows**, whatever it
uploaded, and the check reveals nothing about an honest client's counts.

Claim. A client passes only if, for n_i = the sum of its first 1-way marginal,
(a) every cell x of its vector, and ``bound - n_i``, lie in [0, 2^k) as integers
(2^k > ``bound``), and (b) every marginal of the completed workload sums to n_i. Then every
cell lies in [0, n_i] and n_i <= ``bound``: the union of admitted clients has counts in
[0, clients * bound], inside the range the scores' comparisons assume, and one record of an
honest client moves each score by at most w_q, so the DP claim holds for any client input.

Range test (our construction, sound for any field element). Per value x the servers draw
k secret random bits r_lo (MPyC's random bits: genuine bits whatever x is) and a secret
r_hi in [0, 3 * 2^KAPPA) (pseudorandom secret sharing), open c = x + r_lo + 2^k r_hi, split
c = c_lo + 2^k c_hi, and compute b = [c_lo < r_lo] by a bitwise comparison of the public
c_lo with the secret bits. If r_hi + b - c_hi = 0 then x = c_lo - r_lo + 2^k b, which lies
in [0, 2^k); otherwise it does not (an identity, no probability involved). The zero tests
of a client's cells, and those of its marginal sums (s_q - n_i = 0), are each folded into
one by public random coefficients from the servers' joint seed (drawn after the uploads),
multiplied by a secret random element and opened: an honest client opens two zeros; a
failing test opens a uniform non-zero value except with probability 2/p.

Leakage. Opening c reveals x + r: for an honest x the carry into c_hi depends on x, so
the views for two neighbouring tables differ by at most 2^-KAPPA per cell that changes (one
cell per marginal for one record): ``validation_tv`` = marginals * 2^-KAPPA, counted as extra
delta ((1 + e^eps) times) by ``distaim.party``. A failing client's opened values are its own
garbage plus masks.

Cost: k random bits, k - 1 secure multiplications and one opened value per cell.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = ["KAPPA", "ValidationResult", "validate_clients", "validation_tv", "range_bits"]

KAPPA = 64                      # statistical hiding of each opened value: 2^-64
CHUNK = 4096                    # cells per batch (memory: k bits per cell as Python ints)
_TAG = b"feddpsyn/distaim/validation/v1"


def range_bits(bound: int) -> int:
    """k with 2^k > bound."""
    return int(bound).bit_length()


def validation_tv(marginals: int) -> Fraction:
    """The statistical distance the openings add between neighbouring tables' views."""
    return Fraction(marginals, 1 << KAPPA)


@dataclass
class ValidationResult:
    valid: list[str]
    invalid: dict[str, str]


def _coefficients(joint_seed: bytes, client_id: str, modulus: int, n: int) -> np.ndarray:
    width = (modulus.bit_length() + 128 + 7) // 8
    stream = hashlib.shake_256(_TAG + len(client_id).to_bytes(4, "big") + client_id.encode()
                               + joint_seed).digest(width * n)
    return np.array([int.from_bytes(stream[i * width:(i + 1) * width], "little") % modulus
                     for i in range(n)], dtype=object)


async def _range_residuals(rt, secint, values, k: int):
    """Secret r_hi + [c_lo < r_lo] - c_hi per value (zero iff the value is in [0, 2^k))."""
    n = len(values)
    field = secint.field
    bits = rt.np_random_bits(secint, k * n).reshape((n, k))       # column 0 is the top bit
    shifts = np.array([1 << (k - 1 - i) for i in range(k)], dtype=object)
    r_lo = rt.np_sum(bits * shifts, axis=1)
    r_hi = secint.array(rt._np_randoms(field, n, 3 << KAPPA))
    if field.order.bit_length() <= k + KAPPA + 3:
        raise ValueError("the field is too small for the range test's masks")
    opened = await rt.output(values + r_lo + r_hi * (1 << k))
    c = np.array([int(v) % field.order for v in np.asarray(opened).ravel()], dtype=object)
    c_lo, c_hi = c & ((1 << k) - 1), c >> k
    c_bits = np.array([[(int(v) >> (k - 1 - i)) & 1 for i in range(k)] for v in c_lo],
                      dtype=object).reshape((n, k))
    differ = bits * (1 - 2 * c_bits) + c_bits                     # d = c xor r, linear in r
    # b = sum_i [no difference above i] * r_i * (1 - c_i): the top differing bit is r's.
    # With the prefix products P_i = prod_{j < i} (1 - d_j) (P_0 = 1), the term is
    # (1 - c_i) d_i P_i (where c_i = 0, r_i = d_i) = (1 - c_i) (P_i - P_{i+1}): linear in
    # the P's, so b costs the k - 1 multiplications of the prefix products alone.
    prefix = 1 - differ[:, 0]                                     # P_1
    less = (1 - c_bits[:, 0]) * (1 - prefix)
    for i in range(1, k):
        following = prefix * (1 - differ[:, i])                   # P_{i+1}
        less = less + (1 - c_bits[:, i]) * (prefix - following)
        prefix = following
    return r_hi + less - c_hi.astype(object)


async def validate_clients(rt, secint, offsets: Mapping[tuple[int, ...], tuple[int, int]],
                           shares: Mapping[str, Sequence[int]], clients: Sequence[str],
                           bound: int, joint_seed: bytes) -> ValidationResult:
    """Check every client in ``clients`` (this server's share vectors in ``shares``)."""
    field = secint.field
    modulus = field.modulus
    k = range_bits(bound)
    cliques = list(offsets)
    first = next(c for c in cliques if len(c) == 1)
    valid, invalid = [], {}
    for cid in clients:
        vector = secint.array(field.array(np.array(shares[cid], dtype=object)))
        start, size = offsets[first]
        rows = rt.np_sum(vector[start:start + size])
        sums = rt.np_fromlist([rt.np_sum(vector[o:o + n]) - rows
                               for o, n in (offsets[c] for c in cliques)])
        checked = rt.np_concatenate((vector, rt.np_fromlist([bound - rows])))
        residuals = []
        for lo in range(0, checked.shape[0], CHUNK):
            residuals.append(await _range_residuals(rt, secint, checked[lo:lo + CHUNK], k))
        ranges = rt.np_concatenate(residuals)
        coefficients = _coefficients(joint_seed, cid, modulus, ranges.shape[0] + len(cliques))
        folded = [rt.np_sum(ranges * coefficients[:ranges.shape[0]]),
                  rt.np_sum(sums * coefficients[ranges.shape[0]:])]
        masks = [rt._random(secint), rt._random(secint)]
        opened = await rt.output(rt.np_fromlist([f * m for f, m in zip(folded, masks)]))
        out_of_range, disagree = (int(v) % modulus != 0 for v in np.asarray(opened).ravel())
        if out_of_range:
            invalid[cid] = (f"invalid: a count outside [0, n] or over {bound} rows "
                            "(negative, too large, or not an integer below the bound)")
        elif disagree:
            invalid[cid] = "invalid: its marginals do not all sum to the same row count"
        else:
            valid.append(cid)
    return ValidationResult(valid, invalid)
