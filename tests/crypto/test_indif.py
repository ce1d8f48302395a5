"""Primitive 2 under encryption (tiny widths): decrypted InDif equals the plaintext score."""

import itertools
import secrets

import numpy as np
import pytest

from feddpsyn.crypto.indif import (
    ADD_COMPLEXITY,
    CHUNK_COMPLEXITY,
    chunk_bootstraps,
    compile_indif_chunk,
    digit_count,
    digits_of,
    indif_exact,
    indif_from_bits,
    indif_offset,
    indif_plaintext,
)
from feddpsyn.crypto.masking import expand_masks, new_seed
from feddpsyn.dp.pair_selection import expected_counts
from feddpsyn.params.selection_plan import chunk_sizes_for

K, CELLS = 6, 6  # counts of a 2x3 pair, |d| < 2^5


@pytest.fixture(scope="module")
def circuit():
    c = compile_indif_chunk(CELLS, K, 2.0 ** -40)
    c.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    return c


def run(circuit, masked_sum, offset, k=K):
    """One P2 call as the servers make it: M's digits encrypted, c's in clear."""
    encrypted = circuit.encrypt(digits_of(masked_sum, k), None)[0]
    digits = circuit.decrypt(circuit.run(encrypted, digits_of(offset, k)))
    assert all(int(d) in (0, 1) for d in digits)
    return digits


def masked_inputs(counts_per_client, expected):
    masks = [expand_masks(new_seed(), "s", f"c{i}", CELLS, K)
             for i in range(len(counts_per_client))]
    masked_sum = sum((c + m) % 2 ** K for c, m in zip(counts_per_client, masks)) % 2 ** K
    return masked_sum, indif_offset(sum(masks), expected, K)


@pytest.mark.parametrize("seed", range(3))
def test_decrypted_indif_equals_the_plaintext_score(circuit, seed):
    rng = np.random.default_rng(seed)
    clients = [rng.integers(0, 5, CELLS) for _ in range(3)]
    counts = sum(clients)
    expected = expected_counts(counts.reshape(2, 3).sum(1), counts.reshape(2, 3).sum(0),
                               counts.sum())
    masked_sum, offset = masked_inputs(clients, expected)
    assert indif_plaintext(masked_sum, offset, K) == indif_exact(counts, expected)
    assert indif_from_bits(run(circuit, masked_sum, offset)) == indif_exact(counts, expected)


def test_extreme_differences_both_signs(circuit):
    counts = np.array([31, 0, 0, 0, 0, 0])
    expected = np.array([0, 31, 0, 0, 0, 1])
    masked_sum, offset = masked_inputs([counts], expected)
    assert indif_from_bits(run(circuit, masked_sum, offset)) == 63


def test_sensitivity_is_one_for_add_remove_and_two_for_substitution():
    """Enumerate every neighbour of small tables over a 2x3 domain, K held fixed."""
    rng = np.random.default_rng(0)
    worst_add, worst_sub = 0, 0
    for _ in range(200):
        counts = rng.integers(0, 4, CELLS)
        expected = rng.integers(0, 4, CELLS)
        base = indif_exact(counts, expected)
        for cell in range(CELLS):
            for delta in (1, -1):
                if counts[cell] + delta < 0:
                    continue
                nb = counts.copy()
                nb[cell] += delta
                worst_add = max(worst_add, abs(indif_exact(nb, expected) - base))
        for a, b in itertools.permutations(range(CELLS), 2):
            if counts[a] == 0:
                continue
            nb = counts.copy()
            nb[a] -= 1
            nb[b] += 1
            worst_sub = max(worst_sub, abs(indif_exact(nb, expected) - base))
    assert worst_add == 1 and worst_sub == 2


def test_session_widths_both_parities_every_residue_class(circuit):
    """k = 7 (odd: the top digit is the sign alone) and k = 6 (even: the top digit holds the
    top magnitude bit and the sign; the file's circuit), cells at every extreme of d:
    +-(2^(k-1) - 1), 0, -2^(k-1), and random residues; every decrypted score equals the
    plaintext model, and the session's union bound (chunk_bootstraps) never undercounts what
    concrete compiled."""
    rng = np.random.default_rng(7)
    odd = compile_indif_chunk(8, 7, 2.0 ** -40)
    odd.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    for compiled, k, cells in ((odd, 7, 8), (circuit, K, CELLS)):
        half = 1 << (k - 1)
        extremes = [half - 1, -(half - 1), 0, -half, 1, -1, 5, -5]
        # Two calls: the extremes first (the rest of the second call's cells random), then
        # random residues.
        d = np.array(extremes + rng.integers(-half, half, 2 * cells - len(extremes)).tolist())
        for call in (d[:cells], d[cells:]):
            masked_sum = rng.integers(0, 1 << k, cells)
            # v = M + c mod 2^k = d + 2^(k-1): every carry pattern, both signs
            offset = (call + half - masked_sum) % (1 << k)
            assert indif_plaintext(masked_sum, offset, k) == int(np.abs(call).sum())
            assert indif_from_bits(run(compiled, masked_sum, offset, k)) == int(
                np.abs(call).sum())
        assert chunk_bootstraps(cells, k) >= compiled.statistics["programmable_bootstrap_count"]


def test_digits_of_splits_residues_in_base_four():
    values = np.array([0, 1, 2 ** 11 - 1, 1234])
    digits = digits_of(values, 11)
    assert digits.shape == (digit_count(11), 4) == (6, 4)
    assert (sum(digits[i] << (2 * i) for i in range(6)) == values).all()
    assert digits.max() <= 3 and digits[-1].max() <= 1  # k odd: the top digit is one bit
    with pytest.raises(ValueError, match="residues"):
        digits_of(np.array([2 ** 11]), 11)
    with pytest.raises(ValueError, match="residues"):
        digits_of(np.array([-1]), 11)


@pytest.mark.parametrize("cells,k", [(3, 5), (8, 6), (16, 7)])
def test_chunk_bootstraps_bounds_the_compiled_count(cells, k):
    circuit = compile_indif_chunk(cells, k, 2.0 ** -40)  # compile only: no keys
    compiled = circuit.statistics["programmable_bootstrap_count"]
    assert compiled <= chunk_bootstraps(cells, k) <= compiled + 16


def test_pairs_are_cut_into_the_cheapest_chunks():
    sizes = (8, 16, 32)
    for cells in range(1, 130):
        chunks = chunk_sizes_for(cells, sizes)
        assert sum(chunks) >= cells and sum(chunks) - min(chunks) < cells  # no idle chunk
        assert chunks == sorted(chunks, reverse=True)
        cost = sum(CHUNK_COMPLEXITY[c] for c in chunks) + ADD_COMPLEXITY * (len(chunks) - 1)
        only16 = -(-cells // 16)
        assert cost <= only16 * CHUNK_COMPLEXITY[16] + ADD_COMPLEXITY * (only16 - 1)
    with pytest.raises(ValueError, match="no measured P2 cost"):
        chunk_sizes_for(10, (8, 13))


def test_digit_tables_are_the_carry_and_the_xor_with_the_sign():
    """The lookups of the digit construction against their definitions, every index."""
    from feddpsyn.crypto.indif import _CARRY, _NEG_EVEN, _NEG_ODD, _TOP_EVEN, _XOR_SIGN
    for u in range(8):
        assert _CARRY[u] == (u >= 4)
        v, neg = u & 3, u >> 2
        assert _XOR_SIGN[u] == (v ^ (3 * neg))
        low, sign = u & 1, (u >> 1) & 1  # bits k-2 and k-1 of v for the top digit, k even
        assert _NEG_EVEN[u] == 1 - sign and _TOP_EVEN[u] == low ^ (1 - sign)
    for u in range(8):
        assert _NEG_ODD[u] == 1 - (u & 1)


def test_digits_cost_fewer_bootstraps_than_bit_extraction():
    """Per cell 2 ceil(k/2) - 1 + [k even] lookups (12 at k = 12) against k extractions plus
    ceil((k-1)/2) XORs (18) for one k+1-bit ciphertext a cell; counted by concrete."""
    cells, k = 16, 12
    compiled = compile_indif_chunk(cells, k, 2.0 ** -40).statistics[
        "programmable_bootstrap_count"]
    assert compiled <= chunk_bootstraps(cells, k)
    assert compiled < cells * (k + (k - 1 + 1) // 2)
