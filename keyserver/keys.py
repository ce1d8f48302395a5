"""Session keys: compile the session's circuit, generate keys from the CSPRNG, keep them here.

Design concern: **the secret key never leaves this module's files.** Keys are generated with
128-bit seeds from ``secrets`` (concrete's own default seed is 0, i.e. predictable keys),
written with mode 0600 inside the key server's state directory, and only the compiled
server artefact and the evaluation keys (which decrypt nothing) are ever handed out.
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path

import numpy as np
from concrete import fhe

from crypto.aggregation import compile_aggregation
from feddpsyn.serving import write_private
from params.session_plan import SessionPlan


class SessionKeys:
    """The key server's handle on one session's circuit client (holds the secret key)."""

    def __init__(self, client: fhe.Client, n_clients: int):
        self._client = client
        self._n_clients = n_clients

    def __repr__(self) -> str:  # never print key material, even by accident
        return f"SessionKeys(n_clients={self._n_clients})"

    @staticmethod
    def create(plan: SessionPlan, n_clients: int, directory: Path) -> tuple[SessionKeys, bytes, bytes]:
        """Compile, generate keys, persist them; return (keys, server.zip bytes, eval keys)."""
        p = plan.parameters
        circuit = compile_aggregation(n_clients, p.chunk_cells, p.count_bits, p.p_error)
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            circuit.server.save(f"{tmp}/server.zip")
            server_zip = Path(f"{tmp}/server.zip").read_bytes()
            circuit.client.save(f"{tmp}/client.zip")
            client_zip = Path(f"{tmp}/client.zip").read_bytes()
        client = fhe.Client(circuit.client.specs)
        client.keys.generate(force=True, secret_seed=secrets.randbits(128),
                             encryption_seed=secrets.randbits(128))
        write_private(directory / "client.zip", client_zip)
        write_private(directory / "keys.bin", client.keys.serialize())
        evaluation_keys = client.evaluation_keys.serialize()
        return SessionKeys(client, n_clients), server_zip, evaluation_keys

    @staticmethod
    def load(directory: Path, n_clients: int) -> SessionKeys:
        client = fhe.Client.load(directory / "client.zip")
        client.keys.load_from_bytes((directory / "keys.bin").read_bytes())
        return SessionKeys(client, n_clients)

    def encrypt_chunk(self, position: int, values: np.ndarray) -> bytes:
        """Encrypt one client's chunk as the circuit's input ``m{position}``."""
        args: list = [None] * (self._n_clients + 2)
        args[position] = np.asarray(values, dtype=np.int64)
        encrypted = self._client.encrypt(*args)
        return encrypted[position].serialize()

    @staticmethod
    def parse(serialized: bytes) -> fhe.Value:
        """Deserialize a ciphertext (raises on truncated or corrupted bytes)."""
        return fhe.Value.deserialize(serialized)

    def decrypt_value(self, value: fhe.Value) -> np.ndarray:
        return np.asarray(self._client.decrypt(value), dtype=np.int64)
