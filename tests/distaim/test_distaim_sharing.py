"""Client Shamir sharing and the servers' random-linear-combination degree check."""

import secrets

import numpy as np
import pytest

from feddpsyn.distaim.sharing import (
    challenge_vector,
    check_value,
    collinear,
    decode_vector,
    encode_vector,
    expand_share,
    reconstruct,
    share_vector,
    share_vector_seeded,
)

P = 2**89 - 1  # a Mersenne prime of the size MPyC uses for 48-bit secure integers


def _counts(n=500, seed=0):
    return np.random.default_rng(seed).integers(0, 1000, n).tolist()


def _check(shares, seed=b"j" * 32, cid="c0"):
    rho = challenge_vector(seed, cid, P, len(shares[0]))
    # a random degree-1 mask sharing z(x) = z0 + z1 x, as the servers' PRSS would give
    z0, z1 = secrets.randbelow(P), secrets.randbelow(P)
    v = [check_value(s, rho, (z0 + z1 * x) % P, P) for x, s in zip((1, 2, 3), shares)]
    return collinear(*v, P)


@pytest.mark.parametrize("pair", [(1, 2), (1, 3), (2, 3)])
def test_any_two_parties_reconstruct(pair):
    counts = _counts()
    shares = share_vector(counts, P)
    assert reconstruct({x: shares[x - 1] for x in pair}, P) == counts


def test_seeded_upload_reconstructs_and_is_consistent():
    counts = _counts()
    seed, (s2, s3) = share_vector_seeded(counts, P, "sess", "c0")
    s1 = expand_share(seed, P, "sess", "c0", len(counts))
    for pts in ({1: s1, 2: s2}, {1: s1, 3: s3}, {2: s2, 3: s3}):
        assert reconstruct(pts, P) == counts
    assert _check([s1, s2, s3])
    # The seed binds session and client: another client id expands to different shares.
    assert expand_share(seed, P, "sess", "c1", len(counts)) != s1


def test_consistent_shares_pass_and_a_tampered_share_is_rejected():
    counts = _counts()
    shares = share_vector(counts, P)
    assert _check(shares)
    for party in range(3):
        for delta in (1, P - 1, 12345):
            bad = [list(s) for s in shares]
            j = secrets.randbelow(len(counts))
            bad[party][j] = (bad[party][j] + delta) % P
            assert not _check(bad)
    # shares of two different clients mixed together are caught as well
    other = share_vector(_counts(seed=1), P)
    assert not _check([shares[0], shares[1], other[2]])


def test_wire_encoding_round_trip_and_refusals():
    counts = _counts(50)
    shares = share_vector(counts, P)
    blob = encode_vector(shares[1], P)
    assert len(blob) == 12 * 50
    assert decode_vector(blob, P, 50) == shares[1]
    with pytest.raises(ValueError):
        decode_vector(blob[:-1], P, 50)
    with pytest.raises(ValueError):
        decode_vector((P).to_bytes(12, "little") * 50, P, 50)
    with pytest.raises(ValueError):
        share_vector([-1], P)
