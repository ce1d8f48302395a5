"""What each server sees of a session with an owner left out, enumerated exactly on a tiny
instance (docs/threat-model.md, "an owner left out"; docs/privacy.md).

Two owners upload (a, b), a third (c) is left out: the key server stores zeros for c under
the public absent commitment, the compute server reads that commitment as "no seed, no mask"
(``crypto.masking.mask_sum`` with the seed None). The masks are modelled as uniform on
[0, 2^k)^cells, which is what the SHAKE-256 expansion is assumed to give
(``tests/crypto/test_masking.py`` checks its uniformity statistically). Every mask pair is
enumerated, so each statement below is exact:

* the key server's view (m_a, m_b, c's zeros) has the same distribution for neighbouring
  tables of a (one row more), and the same as in a session created with a and b alone: the
  absence changes nothing of what it learns about the present owners;
* Primitive 1's plaintext model gives the present owners' union, for every mask pair, the
  same function of the uploads as a session without c;
* the compute server's view before the release (the seeds, c's public commitment) does not
  depend on any table.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np

from feddpsyn.crypto.masking import (
    absent_commitment,
    expand_masks,
    mask_counts,
    mask_sum,
    new_seed,
    seed_commitment,
    unmask_sum,
)

K = 3
CELLS = 2
VALUES = range(1 << K)
MASKS = [np.array(m, dtype=np.int64) for m in itertools.product(VALUES, repeat=CELLS)]


def key_server_view(x_a: np.ndarray, x_b: np.ndarray, absent: bool) -> Counter:
    """The distribution of what the key server holds, over every pair of masks."""
    view: Counter = Counter()
    zeros = (0,) * CELLS
    for s_a, s_b in itertools.product(MASKS, MASKS):
        held = (tuple(mask_counts(x_a, s_a, K)), tuple(mask_counts(x_b, s_b, K)))
        view[held + ((zeros,) if absent else ())] += 1
    return view


def test_the_key_servers_view_is_the_same_for_neighbouring_tables_and_without_the_absence():
    x_a, x_a_more, x_b = np.array([2, 1]), np.array([3, 1]), np.array([0, 4])
    with_c_absent = key_server_view(x_a, x_b, absent=True)
    assert with_c_absent == key_server_view(x_a_more, x_b, absent=True)
    # The same as a session created with a and b alone, but for c's public zeros.
    alone = key_server_view(x_a, x_b, absent=False)
    assert Counter({k[:2]: v for k, v in with_c_absent.items()}) == alone
    # Uniform: every pair of masked vectors once.
    assert len(alone) == len(MASKS) ** 2 and set(alone.values()) == {1}


def test_primitive_1_gives_the_present_owners_union_for_every_mask():
    x_a, x_b = np.array([2, 1]), np.array([0, 4])
    zeros = np.zeros(CELLS, dtype=np.int64)
    for s_a, s_b in itertools.product(MASKS, MASKS):
        masked = mask_counts(x_a, s_a, K) + mask_counts(x_b, s_b, K) + zeros
        assert unmask_sum(masked, s_a + s_b, K).tolist() == (x_a + x_b).tolist()


def test_the_compute_servers_mask_sum_skips_the_absent_owner_and_nothing_else():
    session, length, bits = "s-absent", 5, 11
    seeds = {"a": new_seed(), "b": new_seed(), "c": None}
    got = mask_sum(seeds, session, ["a", "b", "c"], length, bits)
    want = (expand_masks(seeds["a"], session, "a", length, bits)
            + expand_masks(seeds["b"], session, "b", length, bits))
    assert got.tolist() == want.tolist()
    # c's commitment is public and depends on no table or seed; no seed commits to it.
    assert absent_commitment(session, "c") == absent_commitment(session, "c")
    assert absent_commitment(session, "c") != absent_commitment("s-other", "c")
    assert all(seed_commitment(seeds[o], session, o) != absent_commitment(session, o)
               for o in ("a", "b"))
