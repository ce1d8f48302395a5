"""The joint-noise release: the circuit decrypts to the plaintext model exactly, and the noise
has the shape's law from either server's view (chi-square at alpha = 1e-6, fixed seeds)."""

import random

import numpy as np
import pytest
from scipy import stats

from feddpsyn.crypto.aggregation import decode_release, release_offset
from feddpsyn.crypto.joint_noise import (
    JointNoiseShape,
    check_room,
    choose_shape,
    compile_joint_release,
    draw_bits,
    encrypt_key_server_bits,
    joint_noise_plaintext,
    joint_offset,
    joint_operands,
    joint_release_plaintext,
    signed_weights,
)

K_BITS, CELLS, CLIENTS = 12, 4, 2
ALPHA = 1e-6
SHAPES = [JointNoiseShape(8, 1), JointNoiseShape(4, 3)]


def seeded(seed):
    """A reproducible stand-in for secrets.token_bytes (tests only)."""
    return random.Random(seed).randbytes


@pytest.fixture(scope="module")
def circuits():
    out = {}
    for shape in SHAPES:
        circuit = compile_joint_release(CLIENTS, CELLS, K_BITS, shape, 2.0 ** -40)
        circuit.keygen()
        out[shape] = circuit
    # One circuit for both shapes (a session's: the widest K, zero weights past a shape's).
    both = compile_joint_release(CLIENTS, CELLS, K_BITS, SHAPES, 2.0 ** -40)
    both.keygen()
    out["both"] = both
    return out


def run_release(circuit, shape, counts, ks_bits, cs_bits, select, seed):
    """The protocol on one chunk: masked uploads, KS bits encrypted, CS weights and offset."""
    rng = np.random.default_rng(seed)
    modulus = 1 << K_BITS
    masks = [rng.integers(0, modulus, CELLS) for _ in range(CLIENTS)]
    shares = [counts // CLIENTS + (counts % CLIENTS if i == 0 else 0) for i in range(CLIENTS)]
    masked = [(x + s) % modulus for x, s in zip(shares, masks)]
    enc = circuit.encrypt(*masked, None, None, None, None)
    coins = encrypt_key_server_bits(circuit, CLIENTS, ks_bits)
    weights = signed_weights(shape, cs_bits, select)
    offset = joint_offset(shape, np.sum(masks, axis=0), cs_bits, select, K_BITS)
    out = circuit.run(*enc[:CLIENTS], coins, weights, select, offset)
    decrypted = np.asarray(circuit.decrypt(out), dtype=np.int64)
    model = joint_release_plaintext(masked, ks_bits, weights, select, offset, K_BITS)
    return decrypted, model


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_release_decrypts_to_count_plus_joint_noise(circuits, shape, seed):
    rng = np.random.default_rng(100 + seed)
    counts = rng.integers(0, 300, CELLS)
    ks_bits = draw_bits(CELLS, shape, seeded(seed))
    cs_bits = draw_bits(CELLS, shape, seeded(1000 + seed))
    select = np.array([1, 1, 0, 1])
    decrypted, model = run_release(circuits[shape], shape, counts, ks_bits, cs_bits, select,
                                   seed)
    assert np.array_equal(decrypted % (1 << (K_BITS + 1)), model)
    published = decode_release(decrypted, K_BITS)
    noise = joint_noise_plaintext(shape, ks_bits, cs_bits)
    assert np.array_equal(published[select == 1], (counts + noise)[select == 1])
    assert np.all(published[select == 0] == 0)  # padding cells: neither data nor noise


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_extreme_bits_and_negative_results(circuits, shape):
    """Every CS multiplier negative, zero counts: the release is -span/2 exactly; the noise's
    extremes at both ends decode without wrapping."""
    zeros = np.zeros(CELLS, dtype=np.int64)
    ones = np.ones((CELLS, shape.ciphertexts), dtype=np.int64)
    select = np.ones(CELLS, dtype=np.int64)
    for ks, cs, expected in [(ones, ones, -shape.span // 2), (ones, 0 * ones, shape.span // 2),
                             (0 * ones, 0 * ones, -shape.span // 2)]:
        decrypted, model = run_release(circuits[shape], shape, zeros, ks, cs, select, 7)
        assert np.array_equal(decrypted % (1 << (K_BITS + 1)), model)
        assert np.all(decode_release(decrypted, K_BITS) == expected)


def test_cells_of_one_chunk_carry_different_shapes_exactly(circuits):
    """A split release's chunk: each cell its own group's shape in the one circuit (none on
    a padding cell, which is not selected); the decryption equals the model, and each cell's
    noise is exactly its shape's function of both servers' bits. A selected cell without a
    shape is refused (fail closed)."""
    circuit = circuits["both"]
    columns = max(s.ciphertexts for s in SHAPES)
    # The last cell sums two widths (2-bit and 3-bit uniforms) within the circuit's caps.
    two_widths = JointNoiseShape(2, 2, wider=2)
    assert two_widths.ciphertexts <= columns and two_widths.span <= SHAPES[1].span
    cell_shapes = [SHAPES[1], SHAPES[0], None, two_widths]
    rng = np.random.default_rng(31)
    modulus = 1 << K_BITS
    for seed in range(3):
        counts = rng.integers(0, 300, CELLS)
        ks_bits = draw_bits(CELLS, columns, seeded(400 + seed))
        cs_bits = draw_bits(CELLS, columns, seeded(500 + seed))
        select = np.array([1, 1, 0, 1])
        masks = [rng.integers(0, modulus, CELLS) for _ in range(CLIENTS)]
        shares = [counts // CLIENTS + (counts % CLIENTS if i == 0 else 0)
                  for i in range(CLIENTS)]
        masked = [(x + m) % modulus for x, m in zip(shares, masks)]
        weights, clear = joint_operands(cell_shapes, cs_bits, select, columns)
        offset = release_offset(np.sum(masks, axis=0), clear, select, K_BITS)
        enc = circuit.encrypt(*masked, None, None, None, None)
        coins = encrypt_key_server_bits(circuit, CLIENTS, ks_bits)
        out = circuit.run(*enc[:CLIENTS], coins, weights, select, offset)
        decrypted = np.asarray(circuit.decrypt(out), dtype=np.int64)
        model = joint_release_plaintext(masked, ks_bits, weights, select, offset, K_BITS)
        assert np.array_equal(decrypted, model)
        released = decode_release(decrypted, K_BITS)
        for cell, shape in enumerate(cell_shapes):
            if shape is None:  # the padding cell: nothing of it is released
                assert released[cell] == 0
                continue
            want = joint_noise_plaintext(shape, ks_bits[cell:cell + 1],
                                         cs_bits[cell:cell + 1])[0]
            assert released[cell] - counts[cell] == want
        with pytest.raises(ValueError, match="carry no joint noise shape"):
            joint_operands(cell_shapes, cs_bits, np.ones(CELLS, dtype=np.int64), columns)
    # A single shape over the chunk is exactly signed_weights and joint_offset's clear half.
    every = np.ones(CELLS, dtype=np.int64)
    weights, clear = joint_operands([SHAPES[1]] * CELLS, cs_bits, every, columns)
    assert np.array_equal(weights, signed_weights(SHAPES[1], cs_bits, every, columns))
    assert np.array_equal(clear, cs_bits[:, :SHAPES[1].ciphertexts]
                          @ np.array(SHAPES[1].weights()) - SHAPES[1].span // 2)


@pytest.mark.parametrize("fixed", ["compute_server", "key_server"])
def test_mixed_cells_each_follow_their_shape_given_either_servers_bits(fixed):
    """Through the circuit's exact model (tested equal above): two shapes side by side in
    one chunk, one server's bits fixed, the other's drawn; each cell's noise, its operands'
    clear half plus the KS's bits times their signed weights, follows its own shape's exact
    pmf (chi-square, alpha 1e-6)."""
    shapes = [JointNoiseShape(16, 1), JointNoiseShape(6, 4), JointNoiseShape(4, 3, wider=2)]
    columns = max(s.ciphertexts for s in shapes)
    rng = np.random.default_rng(77)
    samples = 40_000
    for cell, shape in enumerate(shapes):
        fixed_row = np.tile(rng.integers(0, 2, columns), (samples, 1))
        other = rng.integers(0, 2, (samples, columns))
        ks, cs = (other, fixed_row) if fixed == "compute_server" else (fixed_row, other)
        # Each sample a chunk's cell of this shape next to a cell of the other shape.
        cell_shapes = [shape] * samples
        weights, clear = joint_operands(cell_shapes, cs, np.ones(samples), columns)
        noise = clear + np.sum(ks * weights, axis=1)
        assert chi_square_pvalue(noise, shape) > ALPHA
        beside = shapes[(cell + 1) % len(shapes)]
        mixed_w, mixed_c = joint_operands([shape, beside], cs[:2], np.ones(2), columns)
        assert np.array_equal(mixed_w[0], weights[0]) and mixed_c[0] == clear[0]


def test_circuit_is_leveled_at_the_count_width(circuits):
    for circuit in circuits.values():
        assert circuit.graph.maximum_integer_bit_width() == K_BITS
        assert circuit.statistics["programmable_bootstrap_count"] == 0


def chi_square_pvalue(samples, shape):
    """Pearson's test of samples of Z against the exact pmf, bins with expected < 5 merged
    into their neighbours from the tails inwards."""
    counts = np.array(shape.counts(), dtype=float)
    expected = counts / counts.sum() * len(samples)
    observed = np.bincount(np.asarray(samples) + shape.span // 2,
                           minlength=len(counts)).astype(float)
    assert len(observed) == len(counts)  # nothing outside the support
    keep_obs, keep_exp, acc_o, acc_e = [], [], 0.0, 0.0
    for o, e in zip(observed, expected):
        acc_o, acc_e = acc_o + o, acc_e + e
        if acc_e >= 5:
            keep_obs.append(acc_o)
            keep_exp.append(acc_e)
            acc_o = acc_e = 0.0
    keep_obs[-1] += acc_o
    keep_exp[-1] += acc_e
    return stats.chisquare(keep_obs, keep_exp).pvalue


@pytest.mark.parametrize("shape", [JointNoiseShape(16, 1), JointNoiseShape(4, 3),
                                   JointNoiseShape(6, 4), JointNoiseShape(4, 3, wider=2)],
                         ids=str)
@pytest.mark.parametrize("fixed", ["compute_server", "key_server"])
def test_noise_has_the_shapes_law_given_either_servers_bits(shape, fixed):
    """Each server's bits fixed (an arbitrary pattern), the other's drawn: Z follows the
    shape's exact pmf, whichever server is fixed."""
    rng = np.random.default_rng(2024)
    samples = 200_000
    fixed_bits = np.tile(rng.integers(0, 2, shape.ciphertexts), (samples, 1))
    other = rng.integers(0, 2, (samples, shape.ciphertexts))
    ks, cs = (other, fixed_bits) if fixed == "compute_server" else (fixed_bits, other)
    assert chi_square_pvalue(joint_noise_plaintext(shape, ks, cs), shape) > ALPHA


def test_the_chi_square_has_power():
    """The same test rejects a noise off by one (a wrong centring), so passing means
    something."""
    shape = JointNoiseShape(16, 1)
    rng = np.random.default_rng(5)
    ks = rng.integers(0, 2, (200_000, 16))
    shifted = np.clip(joint_noise_plaintext(shape, ks, np.zeros_like(ks)) + 1, -8, 8)
    assert chi_square_pvalue(shifted, shape) < ALPHA


def test_encrypted_noise_given_the_compute_servers_bits(circuits):
    """Through the circuit: the CS's bits fixed per cell, the KS's drawn fresh each call;
    the decrypted noise follows Binomial(8, 1/2) - 4."""
    shape = SHAPES[0]
    circuit = circuits[shape]
    cs_bits = draw_bits(CELLS, shape, seeded(77))
    select = np.ones(CELLS, dtype=np.int64)
    counts = np.array([0, 5, 17, 250])
    samples = []
    for call in range(150):  # 600 samples
        ks_bits = draw_bits(CELLS, shape, seeded(5000 + call))
        decrypted, _ = run_release(circuit, shape, counts, ks_bits, cs_bits, select, call)
        samples.extend((decode_release(decrypted, K_BITS) - counts).tolist())
    assert chi_square_pvalue(samples, shape) > ALPHA


def test_draw_bits_fails_closed_and_is_uniform_shaped():
    shape = JointNoiseShape(4, 3)
    with pytest.raises(RuntimeError):
        draw_bits(3, shape, lambda n: b"\x00" * (n - 1))
    bits = draw_bits(5, shape)
    assert bits.shape == (5, 12) and set(np.unique(bits)) <= {0, 1}


def test_signed_weights_and_room():
    shape = JointNoiseShape(2, 2)
    weights = signed_weights(shape, np.array([[0, 1, 1, 0], [1, 1, 1, 1]]), np.array([1, 0]))
    assert weights.tolist() == [[1, -2, -1, 2], [0, 0, 0, 0]]
    check_room(JointNoiseShape(8, 1), (1 << 11) - 5, 12)
    with pytest.raises(ValueError):
        check_room(JointNoiseShape(8, 1), (1 << 11) - 4, 12)
    with pytest.raises(ValueError):
        compile_joint_release(2, 2, 8, JointNoiseShape(256, 1), 2.0 ** -40)


def test_choose_shape_prefers_fewer_bits_within_the_variance_slack():
    from fractions import Fraction
    rho_total = Fraction(3, 100)
    big = choose_shape(12, rho_total / 10, rho_total, 1e-5, 1e-12)  # sigma2 ~ 2000
    small = choose_shape(4, rho_total * 8 / 10, rho_total, 1e-5, 1e-12)  # sigma2 ~ 83
    assert big.kind == "uniforms" and big.ciphertexts < 200
    assert small.kind == "coins"
