"""Session keys: compile the session's circuit, generate keys from the CSPRNG, keep them here.

Design concern: **the secret key never leaves this module's files.** Keys are generated with
128-bit seeds from ``secrets`` (concrete's seed 0 would also mean fresh OS entropy, not a
fixed key; an explicit seed from ``secrets`` makes the source ours and visible here),
written with mode 0600 inside the key server's state directory, and only the compiled
server artefact and the evaluation keys (which decrypt nothing) are ever handed out.
"""

from __future__ import annotations

import secrets
import tempfile
from pathlib import Path

import numpy as np
from concrete import fhe

from feddpsyn.common.serving import write_private
from feddpsyn.crypto.aggregation import compile_aggregation
from feddpsyn.crypto.indif import digits_of
from feddpsyn.crypto.joint_noise import compile_joint_release
from feddpsyn.crypto.private_selection import (
    PrivateSelectionShape,
    batch_names,
    compile_private_selection,
    indif_name,
    indif_names,
)
from feddpsyn.params.session_plan import SessionPlan


def _keys_for(compiled, directory: Path, prefix: str) -> tuple[fhe.Client, bytes, bytes]:
    """Keys for a compiled circuit or module from 128-bit CSPRNG seeds; the client artefact
    and the secret keys are written here (0600); returns (client, server zip, eval keys)."""
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        compiled.server.save(f"{tmp}/server.zip")
        server_zip = Path(f"{tmp}/server.zip").read_bytes()
        compiled.client.save(f"{tmp}/client.zip")
        client_zip = Path(f"{tmp}/client.zip").read_bytes()
    client = fhe.Client(compiled.client.specs)
    client.keys.generate(force=True, secret_seed=secrets.randbits(128),
                         encryption_seed=secrets.randbits(128))
    write_private(directory / f"{prefix}client.zip", client_zip)
    write_private(directory / f"{prefix}keys.bin", client.keys.serialize())
    return client, server_zip, client.evaluation_keys.serialize()


def module_bootstraps(module, names: list[str]) -> dict[str, int]:
    """Programmable bootstraps per call of each named function of a compiled module, from
    concrete's compile statistics (what the session's fhe_delta counts)."""
    return {name: int(getattr(module, name).statistics["programmable_bootstrap_count"])
            for name in names}


class SessionKeys:
    """The key server's handle on one session's circuit client (holds the secret key)."""

    def __init__(self, client: fhe.Client, n_clients: int, joint: bool = False):
        self._client = client
        self._n_clients = n_clients
        # The joint P1 circuit (``crypto.joint_noise``) takes coins and weights as well.
        self._arguments = n_clients + (4 if joint else 2)

    def __repr__(self) -> str:  # never print key material, even by accident
        return f"SessionKeys(n_clients={self._n_clients})"

    @staticmethod
    def create(plan: SessionPlan, n_clients: int,
               directory: Path) -> tuple[SessionKeys, bytes, bytes]:
        """Compile, generate keys, persist them; return (keys, server.zip bytes, eval keys).
        With a joint release the P1 circuit is the joint one, for every release."""
        p = plan.parameters
        if plan.joint_columns:
            circuit = compile_joint_release(n_clients, p.chunk_cells, p.count_bits,
                                            plan.joint_shapes(), p.p_error)
        else:
            circuit = compile_aggregation(n_clients, p.chunk_cells, p.count_bits, p.p_error)
        client, server_zip, evaluation_keys = _keys_for(circuit, directory, "")
        return (SessionKeys(client, n_clients, bool(plan.joint_columns)), server_zip,
                evaluation_keys)

    @staticmethod
    def load(directory: Path, n_clients: int, joint: bool = False) -> SessionKeys:
        client = fhe.Client.load(directory / "client.zip")
        client.keys.load_from_bytes((directory / "keys.bin").read_bytes())
        return SessionKeys(client, n_clients, joint)

    def encrypt_chunk(self, position: int, values: np.ndarray) -> bytes:
        """Encrypt one client's chunk as the circuit's input ``m{position}``."""
        args: list = [None] * self._arguments
        args[position] = np.asarray(values, dtype=np.int64)
        encrypted = self._client.encrypt(*args)
        return encrypted[position].serialize()

    def encrypt_coins(self, bits: np.ndarray) -> bytes:
        """Encrypt one chunk of this server's joint-noise bits as the ``coins`` input."""
        if self._arguments != self._n_clients + 4:
            raise RuntimeError("this session's circuit has no joint noise")
        args: list = [None] * self._arguments
        args[self._n_clients] = np.asarray(bits, dtype=np.int64)
        return self._client.encrypt(*args)[self._n_clients].serialize()

    @staticmethod
    def parse(serialized: bytes) -> fhe.Value:
        """Deserialize a ciphertext (raises on truncated or corrupted bytes)."""
        return fhe.Value.deserialize(serialized)

    def decrypt_value(self, value: fhe.Value) -> np.ndarray:
        return np.asarray(self._client.decrypt(value), dtype=np.int64)


class ScoreModuleKeys:
    """The key server's handle on a session's selection module (P2 per chunk size, chunk
    sums, and P3 or the noise addition): the parts every such module shares."""

    def __init__(self, client: fhe.Client, shape):
        self._client = client
        self.shape = shape

    @classmethod
    def load(cls, directory: Path, shape):
        client = fhe.Client.load(directory / "selection_client.zip")
        client.keys.load_from_bytes((directory / "selection_keys.bin").read_bytes())
        return cls(client, shape)

    parse = staticmethod(SessionKeys.parse)

    def encrypt_indif_input(self, masked_sum: np.ndarray, width: int | None = None) -> bytes:
        """One chunk's M, as the base-4 digits of M mod 2^w that the function of its size and
        width takes (``indif_<s>`` at the module's k, ``indif_<s>_w<w>`` at a narrower w:
        ``crypto.indif``, ``params.indif_widths``)."""
        full = self.shape.count_bits
        narrow = None if width is None or width == full else width
        if narrow is not None and narrow not in self.shape.widths:
            raise ValueError(f"the module has no P2 function at width {narrow}")
        bits = full if narrow is None else narrow
        residues = np.asarray(masked_sum, dtype=np.int64) % (1 << bits)
        encrypted = self._client.encrypt(digits_of(residues, bits), None,
                                         function_name=indif_name(len(masked_sum), narrow))
        return encrypted[0].serialize()


class SelectionKeys(ScoreModuleKeys):
    """The em module: P2 + chunk sums + P3 (one ``select`` a round, or by candidate batches:
    ``crypto.private_selection.batch_names``)."""

    def __repr__(self) -> str:  # never print key material, even by accident
        return f"SelectionKeys(candidates={self.shape.selection.candidates})"

    @staticmethod
    def create(shape: PrivateSelectionShape, thresholds: list[int], p_error: float,
               directory: Path) -> tuple[SelectionKeys, bytes, bytes]:
        """Compile the module, generate its keys (CSPRNG seeds), persist them; return
        (keys, server zip, evaluation keys)."""
        module = compile_private_selection(shape, thresholds, p_error)
        client, server_zip, evaluation_keys = _keys_for(module, directory, "selection_")
        keys = SelectionKeys(client, shape)
        p3 = (["select"] if shape.single else []) + (
            [] if shape.batches is None else sorted(set(batch_names(shape.batches).values())))
        keys.bootstraps_per_function = module_bootstraps(
            module, indif_names(shape.chunk_sizes, shape.widths) + ["add"] + p3)
        return keys, server_zip, evaluation_keys

    def encrypt_randomness(self, r_ks: np.ndarray, priority: np.ndarray) -> list[bytes]:
        """This server's encrypted shares of one round: the trials' bits R^KS and the positions'
        priorities (``crypto.tfhe_permute_and_flip``), as the ``select`` arguments they are, or
        with candidate batches as each batch's ``pick`` arguments, (R^KS, priorities) per batch
        in batch order (``crypto.selection_randomness.batch_randomness``'s arrays)."""
        r_ks = np.asarray(r_ks, dtype=np.int64)
        priority = np.asarray(priority, dtype=np.int64)
        layout = self.shape.batches
        if layout is None:
            s = self.shape.selection.candidates
            args: list = [None] * (s + 5)
            args[s + 1], args[s + 2] = r_ks, priority
            encrypted = self._client.encrypt(*args, function_name="select")
            return [encrypted[s + 1].serialize(), encrypted[s + 2].serialize()]
        n, pick = layout.size, batch_names(layout)["pick"]
        out = []
        for b in range(layout.count):
            part = layout.batch(b)
            args = [None] * (n + 6)
            args[n + 2], args[n + 3] = r_ks[:, part], priority[:, part]
            encrypted = self._client.encrypt(*args, function_name=pick)
            out += [encrypted[n + 2].serialize(), encrypted[n + 3].serialize()]
        return out

    def decrypt_one_hot(self, outputs: list[fhe.Value]) -> list[int]:
        """The S outputs of a round, in candidate order: ``select``'s, or with candidate
        batches the ``mask`` calls', each decrypted with one output's spec (every output
        of the function is the same lookup: one encoding)."""
        layout = self.shape.batches
        if layout is None:
            values = self._client.decrypt(*outputs, function_name="select")
        else:
            mask = batch_names(layout)["mask"]
            values = [self._client.decrypt(v, function_name=mask) for v in outputs]
        return [int(np.asarray(v).ravel()[0]) for v in values]
