"""Primitive 2 under encryption (tiny widths): decrypted InDif equals the plaintext score."""

import itertools
import secrets

import numpy as np
import pytest

from crypto.indif import (ADD_COMPLEXITY, CHUNK_COMPLEXITY, chunk_bootstraps,
                          compile_indif_chunk, indif_exact, indif_from_bits,
                          indif_from_planes, indif_offset, indif_plaintext)
from crypto.masking import expand_masks, new_seed
from dp.pair_selection import expected_counts
from params.selection_plan import chunk_sizes_for

K, CELLS = 6, 6  # counts of a 2x3 pair, |d| < 2^5


@pytest.fixture(scope="module")
def circuit():
    c = compile_indif_chunk(CELLS, K, 2.0 ** -40)
    c.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    return c


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
    planes = circuit.decrypt(circuit.run(circuit.encrypt(masked_sum, offset)))
    assert len(planes) == K
    assert indif_from_planes(planes) == indif_exact(counts, expected)


def test_extreme_differences_both_signs(circuit):
    counts = np.array([31, 0, 0, 0, 0, 0])
    expected = np.array([0, 31, 0, 0, 0, 1])
    masked_sum, offset = masked_inputs([counts], expected)
    planes = circuit.decrypt(circuit.run(circuit.encrypt(masked_sum, offset)))
    assert indif_from_planes(planes) == 63


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


def test_bits_output_gives_the_binary_digits_of_indif():
    circuit = compile_indif_chunk(CELLS, K, 2.0 ** -40, output="bits")
    circuit.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    rng = np.random.default_rng(7)
    for _ in range(2):
        clients = [rng.integers(0, 5, CELLS) for _ in range(3)]
        counts = sum(clients)
        expected = rng.integers(0, 8, CELLS)
        masked_sum, offset = masked_inputs(clients, expected)
        digits = circuit.decrypt(circuit.run(circuit.encrypt(masked_sum, offset)))
        assert all(int(d) in (0, 1) for d in digits)
        assert indif_from_bits(digits) == indif_exact(counts, expected)
    # The session's union bound on bootstrap failures counts P2 with chunk_bootstraps: it must
    # never undercount what concrete compiled.
    assert chunk_bootstraps(CELLS, K) >= circuit.statistics["programmable_bootstrap_count"]


@pytest.mark.parametrize("cells,k", [(3, 5), (8, 6), (16, 7)])
def test_chunk_bootstraps_bounds_the_compiled_count(cells, k):
    circuit = compile_indif_chunk(cells, k, 2.0 ** -40, output="bits")  # compile only: no keys
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
        chunk_sizes_for(10, (8, 12))


def test_packed_xor_lookups_are_the_xors_and_cost_fewer_bootstraps():
    """Two magnitude bits per 3-bit lookup (``XOR_PACK``): the table is the XOR of each bit
    with the sign, and the chunk needs fewer bootstraps than one 2-bit lookup per bit."""
    from concrete import fhe

    from crypto.indif import XOR_PACK, _indif_bits_function, _xor_table
    for width in (1, 2, 3):
        table = _xor_table(width)
        for bits in range(1 << width):
            for neg in (0, 1):
                expected = sum(((bits >> j & 1) ^ neg) << j for j in range(width))
                assert table[bits + (neg << width)] == expected
    assert XOR_PACK == 2
    cells, k = 16, 7
    rng = np.random.default_rng(0)
    inputset = [(np.zeros(cells, dtype=np.int64),) * 2] + [
        (rng.integers(0, 2 ** k, cells), rng.integers(0, 2 ** k, cells)) for _ in range(4)]
    counts = {}
    for pack in (1, 2):
        compiler = fhe.Compiler(_indif_bits_function(k, cells, pack),
                                {"masked_sum": "encrypted", "offset": "clear"})
        circuit = compiler.compile(inputset, fhe.Configuration(p_error=2.0 ** -40,
                                                               global_p_error=None))
        counts[pack] = circuit.statistics["programmable_bootstrap_count"]
    assert counts[2] <= counts[1] - cells * (k - 1) // 2 + cells
