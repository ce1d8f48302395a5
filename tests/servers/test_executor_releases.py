"""A release's chunks (``computeserver.release``) and noisy-greedy's joint score calls
(``computeserver.noisy_greedy``) on the executors: a local Dask cluster of two worker
processes on loopback decrypts to exactly what the in-process executor gives, and both to the
plaintext computation; a release draws its chunks one window at a time.

Cost: a tiny joint release circuit and a tiny P1 circuit (leveled, a few seconds to compile
and key) and the tiny joint score module of ``tests/crypto/test_noisy_scores_joint.py`` (keyed once
for the file); the cluster's workers start in a thread meanwhile. Clear data and both servers'
bits are seeded; the tasks are built once and run on each executor, so the same tasks give
the same decryptions."""

import random
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
import pytest

from feddpsyn.common.serving import Database
from feddpsyn.computeserver.dask_executor import DaskExecutor
from feddpsyn.computeserver.executor import Circuit, InProcessExecutor, map_streamed
from feddpsyn.computeserver.noisy_greedy import NOISY_GREEDY_SQL, NoisyGreedyRole
from feddpsyn.computeserver.release import UploadChunks, chunk_task
from feddpsyn.crypto.aggregation import aggregate_plaintext, compile_aggregation, decode_release
from feddpsyn.crypto.blobs import pack_blobs, unpack_blobs
from feddpsyn.crypto.joint_noise import (
    JointNoiseShape,
    compile_joint_release,
    encrypt_key_server_bits,
    joint_noise_plaintext,
    joint_release_plaintext,
    padded_weights,
)
from feddpsyn.crypto.noisy_scores import (
    NoisyScoreShape,
    compile_noisy_scores,
    decode_joint_score,
    joint_score_plaintext,
)

K_BITS, CELLS, CLIENTS = 12, 4, 2
# A split release's two shapes in one circuit (the widest K, zero weights past a shape's).
SHAPES = [JointNoiseShape(8, 1), JointNoiseShape(4, 3)]
COLUMNS = max(s.ciphertexts for s in SHAPES)
CHUNKS = 5
# The tiny joint score module of tests/crypto/test_noisy_scores_joint.py.
SCORE_SHAPE = NoisyScoreShape(count_bits=6, chunk_sizes=(6,), score_bits=6, noise_bits=1,
                              joint=JointNoiseShape(6, 2))
PAIRS = 3


def saved(compiled, directory: Path, session_id: str) -> Circuit:
    """The circuit's files as the compute server stores a session's (``server.zip``,
    ``evaluation_keys.bin``)."""
    directory.mkdir()
    compiled.server.save(directory / "server.zip")
    (directory / "evaluation_keys.bin").write_bytes(compiled.keys.evaluation.serialize())
    return Circuit.of_files(session_id, directory / "server.zip",
                            directory / "evaluation_keys.bin")


class Release:
    """One release's chunks as the compute server builds them: the clients' uploads written
    as containers, read back one chunk at a time, the tasks (with this server's draws) built
    once; and the clear values to check the decryptions against."""

    def __init__(self, compiled, directory: Path, *, joint: bool, seed: int):
        rng = np.random.default_rng(seed)
        modulus = 1 << K_BITS
        self.counts = rng.integers(0, 300, (CHUNKS, CELLS))
        masks = rng.integers(0, modulus, (CLIENTS, CHUNKS, CELLS))
        shares = [self.counts // CLIENTS + (self.counts % CLIENTS if i == 0 else 0)
                  for i in range(CLIENTS)]
        self.masked = [(shares[i] + masks[i]) % modulus for i in range(CLIENTS)]
        extra = 4 if joint else 2  # coins, weights, select, offset / select, offset
        paths = []
        for i in range(CLIENTS):
            blobs = []
            for c in range(CHUNKS):
                args: list = [None] * (CLIENTS + extra)
                args[i] = self.masked[i][c]
                blobs.append(compiled.encrypt(*args)[i].serialize())
            paths.append(directory / f"client{i}.bin")
            paths[-1].write_bytes(pack_blobs(blobs))
        uploads = UploadChunks(paths, CHUNKS)
        self.select = np.array([1, 1, 0, 1])
        mask_sum = masks.sum(axis=0)
        # Cells of two shapes in one chunk (a split release), one cell with none.
        self.shapes = [SHAPES[0], SHAPES[1], None, SHAPES[1]]
        self.ks_bits = rng.integers(0, 2, (CHUNKS, CELLS, COLUMNS)) if joint else None
        self.tasks = []
        for c in range(CHUNKS):
            if joint:
                coins = encrypt_key_server_bits(compiled, CLIENTS, self.ks_bits[c]).serialize()
                task = chunk_task(uploads.chunk(c), mask_sum[c], self.select, K_BITS,
                                  shapes=self.shapes, columns=COLUMNS, coins=coins)
            else:
                task = chunk_task(uploads.chunk(c), mask_sum[c], self.select, K_BITS,
                                  noise=rng.integers(-20, 20, CELLS))
            self.tasks.append(task)

    def check(self, compiled, outputs: list[bytes]) -> list[list[int]]:
        """Each chunk's decryption, checked against the plaintext circuit on the task's own
        operands, and (joint) the published counts against count + the joint noise of both
        servers' bits (the compute server's read back from its signed weights)."""
        from concrete import fhe

        decrypted = []
        for c, (task, out) in enumerate(zip(self.tasks, outputs, strict=True)):
            got = np.asarray(compiled.decrypt(fhe.Value.deserialize(out)), dtype=np.int64)
            masked = [m[c] for m in self.masked]
            if self.ks_bits is None:
                select, offset = task.arguments[CLIENTS:]
                model = aggregate_plaintext(masked, select, offset, K_BITS)
            else:
                weights, select, offset = task.arguments[CLIENTS + 1:]
                model = joint_release_plaintext(masked, self.ks_bits[c], weights, select,
                                                offset, K_BITS)
                published = decode_release(got, K_BITS)
                for cell, shape in enumerate(self.shapes):
                    if shape is None or not self.select[cell]:
                        assert published[cell] == 0 and not weights[cell].any()
                        continue
                    w = np.array(padded_weights(shape, COLUMNS))
                    cs_bits = np.where(w > 0, (w - weights[cell]) // np.maximum(2 * w, 1), 0)
                    noise = joint_noise_plaintext(shape, self.ks_bits[c][cell:cell + 1],
                                                  cs_bits[None, :])[0]
                    assert published[cell] == self.counts[c][cell] + noise
            assert np.array_equal(got % (1 << (K_BITS + 1)), model)
            decrypted.append(got.tolist())
        return decrypted


@pytest.fixture(scope="module")
def releases(booting_cluster, tmp_path_factory):
    """A joint release (through the joint circuit) and a two-server one (through P1)."""
    directory = tmp_path_factory.mktemp("releases")
    joint = compile_joint_release(CLIENTS, CELLS, K_BITS, SHAPES, 2.0 ** -40)
    joint.keygen(seed=21, encryption_seed=22)
    plain = compile_aggregation(CLIENTS, CELLS, K_BITS, 2.0 ** -40)
    plain.keygen(seed=23, encryption_seed=24)
    out = {}
    for name, compiled, is_joint, seed in (("joint", joint, True, 1),
                                           ("two-server", plain, False, 2)):
        (directory / name).mkdir()
        release = Release(compiled, directory / name, joint=is_joint, seed=seed)
        out[name] = (compiled, saved(compiled, directory / f"{name}-circuit", name), release)
    return out


class Windows:
    """An executor's ``map`` calls seen from a streamed step: each call's size and how many
    tasks the step's iterator had yielded by then."""

    def __init__(self, executor):
        self.executor = executor
        self.width = executor.width
        self.description = executor.description
        self.calls: list[tuple[int, int]] = []
        self.pulled = 0

    def feed(self, tasks):
        for task in tasks:
            self.pulled += 1
            yield task

    def map(self, circuit, tasks, progress=None):
        self.calls.append((len(tasks), self.pulled))
        return self.executor.map(circuit, tasks, progress)


@pytest.mark.parametrize("name", ["joint", "two-server"])
def test_a_release_on_dask_decrypts_to_the_in_process_release(releases, dask_cluster, name):
    compiled, circuit, release = releases[name]
    in_process = Windows(InProcessExecutor(threads=2))
    seen: list[tuple[int, int]] = []
    local = map_streamed(in_process, circuit, in_process.feed(release.tasks), CHUNKS,
                         lambda done, total: seen.append((done, total)))
    expected = release.check(compiled, [out[0] for out in local])
    # A window of the executor's width at a time: never more tasks built than it runs.
    assert in_process.calls == [(2, 2), (2, 4), (1, 5)]
    assert seen == [(d, CHUNKS) for d in range(1, CHUNKS + 1)]

    dask = Windows(DaskExecutor(client=dask_cluster))
    assert dask.width == 2
    remote = map_streamed(dask, circuit, dask.feed(release.tasks), CHUNKS)
    assert release.check(compiled, [out[0] for out in remote]) == expected
    assert dask.calls == [(2, 2), (2, 4), (1, 5)]


class FakeStore:
    """The compute server as noisy-greedy's role uses it (``computeserver.store``): the key
    server's score bits served, the noisy scores it is sent kept, progress recorded."""

    def __init__(self, directory: Path, ks_bits: list[bytes]):
        self.db = Database(directory / "cs.sqlite", NOISY_GREEDY_SQL)
        self.directory = directory
        self.ks_bits = ks_bits
        self.sent: bytes | None = None
        self.progress: list[tuple[str, int, int]] = []

    def session_dir(self, session_id: str) -> Path:
        return self.directory / session_id

    def peer_request(self, method: str, url: str, **kw) -> httpx.Response:
        assert (method, url) == ("GET", "/peer/sessions/s/selection/score-bits")
        return httpx.Response(200, content=pack_blobs(self.ks_bits))

    def peer(self, method: str, url: str, model, **kw):
        assert (method, url) == ("PUT", "/peer/sessions/s/selection/noisy-scores")
        self.sent = kw["content"]
        return model(pairs=[(0, 1)], rho="1/100")

    def report_progress(self, session_id, phase, done, total, unit="tasks", note=""):
        self.progress.append((phase, done, total))

    def set_progress(self, session_id, detail) -> None:
        pass

    def block(self, session_id, detail) -> None:
        raise AssertionError(f"blocked: {detail}")


@pytest.fixture(scope="module")
def scores(booting_cluster, tmp_path_factory):
    """The tiny joint score module, keyed; each pair's encrypted score (as P2 leaves it), the
    key server's bits in clear and encrypted."""
    module = compile_noisy_scores(SCORE_SHAPE, 2.0 ** -40)
    module.keygen(seed=31, encryption_seed=32)
    directory = tmp_path_factory.mktemp("scores")
    (directory / "circuit").mkdir()
    module.server.save(directory / "circuit" / "server.zip")
    (directory / "circuit" / "keys.bin").write_bytes(module.keys.evaluation.serialize())
    circuit = Circuit.of_files("s", directory / "circuit" / "server.zip",
                               directory / "circuit" / "keys.bin")
    rng = np.random.default_rng(3)
    clear = [int(x) for x in rng.integers(0, 1 << SCORE_SHAPE.score_bits, PAIRS)]
    encrypted = [module.joint.encrypt(np.array([(x >> j) & 1 for j in range(6)]), None,
                                      None)[0].serialize() for x in clear]
    k = SCORE_SHAPE.joint.ciphertexts
    a = rng.integers(0, 2, (PAIRS, k))
    a_encrypted = [module.joint.encrypt(None, bits, None)[1].serialize() for bits in a]
    return module, circuit, clear, encrypted, a, a_encrypted


def test_noisy_greedys_joint_scores_on_dask_decrypt_to_the_in_process_ones(
        scores, dask_cluster, tmp_path, monkeypatch):
    """The role's own path (``NoisyGreedyRole.run``) on each executor, the compute server's
    bits b drawn from the same seeded source both times, so both build the same tasks."""
    from concrete import fhe

    module, circuit, clear, encrypted, a, a_encrypted = scores
    plan = SimpleNamespace(selection=SimpleNamespace(noisy_shape=lambda sizes: SCORE_SHAPE),
                           used_chunk_sizes=lambda: (6,))
    decrypted = {}
    for name, executor in (("in-process", InProcessExecutor()),
                           ("dask", DaskExecutor(client=dask_cluster))):
        seeded = random.Random(8).randbytes
        monkeypatch.setattr("feddpsyn.computeserver.noisy_greedy.draw_bits",
                            lambda cells, shape, seeded=seeded: _draw_bits(cells, shape, seeded))
        (tmp_path / name / "s" / "outputs").mkdir(parents=True)
        store = FakeStore(tmp_path / name, a_encrypted)
        role = NoisyGreedyRole(store, executor, lambda session_id: circuit,
                               lambda session_id, plan, seeds: list(encrypted))
        assert role.run("s", plan, {}) == [(0, 1)]
        decrypted[name] = [module.joint.decrypt(fhe.Value.deserialize(out)).tolist()
                           for out in unpack_blobs(store.sent, expected=PAIRS)]
        assert store.progress[-1][1:] == (PAIRS, PAIRS)
    assert decrypted["dask"] == decrypted["in-process"]
    b = _draw_bits(PAIRS, SCORE_SHAPE.joint.ciphertexts, random.Random(8).randbytes)
    for pair, digits in enumerate(decrypted["dask"]):
        assert digits == joint_score_plaintext(clear[pair], a[pair], b[pair], SCORE_SHAPE)
        z = int(np.bitwise_xor(a[pair], b[pair]) @ np.array(SCORE_SHAPE.joint.weights()))
        assert decode_joint_score(digits, SCORE_SHAPE) == (clear[pair] + z
                                                           - SCORE_SHAPE.joint.span // 2)


def _draw_bits(cells, shape, token_bytes):
    from feddpsyn.crypto.joint_noise import draw_bits

    return draw_bits(cells, shape, token_bytes)
