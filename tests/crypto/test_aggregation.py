"""Primitive 1 under real encryption: decrypt and compare with the plaintext computation."""

import secrets

import numpy as np
import pytest
from concrete import fhe

from feddpsyn.crypto.aggregation import (
    aggregate_plaintext,
    compile_aggregation,
    decode_release,
    release_offset,
)
from feddpsyn.crypto.masking import expand_masks, mask_counts, new_seed

K, N_CLIENTS, CHUNK = 16, 3, 32


@pytest.fixture(scope="module")
def circuit_and_client():
    circuit = compile_aggregation(N_CLIENTS, CHUNK, K, 2.0 ** -40)
    client = fhe.Client(circuit.client.specs)
    client.keys.generate(secret_seed=secrets.randbits(128), encryption_seed=secrets.randbits(128))
    return circuit, client


def encrypt(client, position, values):
    args = [None] * (N_CLIENTS + 2)
    args[position] = np.asarray(values, dtype=np.int64)
    return client.encrypt(*args)[position]


def run(circuit, client, counts, select, noise):
    seeds = [new_seed() for _ in range(N_CLIENTS)]
    masks = [expand_masks(s, "sess", f"c{i}", CHUNK, K) for i, s in enumerate(seeds)]
    masked = [mask_counts(c, m, K) for c, m in zip(counts, masks)]
    offset = release_offset(sum(masks), noise, select, K)
    encrypted = [encrypt(client, i, m) for i, m in enumerate(masked)]
    out = circuit.server.run(*encrypted, select, offset, evaluation_keys=client.evaluation_keys)
    decrypted = client.decrypt(fhe.Value.deserialize(out.serialize()))
    return decrypted, aggregate_plaintext(masked, select, offset, K)


def test_circuit_is_leveled_and_k_bits_wide(circuit_and_client):
    circuit, _ = circuit_and_client
    assert circuit.graph.maximum_integer_bit_width() == K
    assert circuit.statistics.get("programmable_bootstrap_count", 0) == 0


def test_decryption_equals_the_plaintext_model_bit_for_bit(circuit_and_client):
    circuit, client = circuit_and_client
    rng = np.random.default_rng(0)
    counts = [rng.integers(0, 3000, CHUNK) for _ in range(N_CLIENTS)]
    select = (rng.random(CHUNK) < 0.6).astype(np.int64)
    noise = rng.integers(-200, 200, CHUNK)
    decrypted, model = run(circuit, client, counts, select, noise)
    assert (decrypted == model).all()
    released = decode_release(decrypted, K)
    assert (released[select == 1] == (sum(counts) + noise)[select == 1]).all()


def test_extreme_counts_wrap_and_decode_correctly(circuit_and_client):
    circuit, client = circuit_and_client
    top = 2 ** (K - 1) // N_CLIENTS - 1
    counts = [np.full(CHUNK, top)] * N_CLIENTS
    select = np.ones(CHUNK, dtype=np.int64)
    noise = np.zeros(CHUNK, dtype=np.int64)
    decrypted, _ = run(circuit, client, counts, select, noise)
    assert (decode_release(decrypted, K) == sum(counts)).all()


def test_the_bit_above_the_count_carries_no_information(circuit_and_client):
    """Bit k of the decryption must be a fresh uniform bit, whatever the mask wrap-arounds."""
    circuit, client = circuit_and_client
    counts = [np.full(CHUNK, 2 ** (K - 2) - 1)] * N_CLIENTS  # many wrap-arounds
    select = np.ones(CHUNK, dtype=np.int64)
    bits = []
    for _ in range(8):
        decrypted, _ = run(circuit, client, counts, select, np.zeros(CHUNK, dtype=np.int64))
        bits.append(decrypted >> K)
    bits = np.concatenate(bits)
    assert set(np.unique(bits)) <= {0, 1}
    # 256 fair bits: |ones - 128| < 5.3 sd (alpha ~ 1e-7).
    assert abs(bits.sum() - 128) < 5.3 * 8


def test_unselected_cells_decrypt_to_no_data(circuit_and_client):
    circuit, client = circuit_and_client
    counts = [np.full(CHUNK, 1234)] * N_CLIENTS
    select = np.zeros(CHUNK, dtype=np.int64)
    decrypted, _ = run(circuit, client, counts, select, np.zeros(CHUNK, dtype=np.int64))
    assert (decode_release(decrypted, K) == 0).all()


def test_reloaded_keys_never_repeat_encryption_randomness(circuit_and_client):
    circuit, client = circuit_and_client
    serialized = client.keys.serialize()
    ciphertexts = set()
    for _ in range(3):
        again = fhe.Client(circuit.client.specs)
        again.keys.load_from_bytes(serialized)
        ciphertexts.add(encrypt(again, 0, np.arange(CHUNK)).serialize())
    assert len(ciphertexts) == 3
