"""The key server's offline job on worker processes (``keyserver.offline_pool``): two workers
store what one stores, ciphertexts that decrypt alike; a worker that dies fails the pass with a
clear error, stores nothing, and the next pass runs on new workers.

One tiny joint session (3 columns, 2 clients, the ``test-small`` set: 2 chunks of 32 cells,
244 encrypted bits a cell), compiled once for the module; its leveled P1 circuit runs here on
the stored ciphertexts, with clear weights that pick one of the key server's bits a cell, so
every stored upload is checked to decrypt to its masked values and every coin set to bits.
The pool's own behaviour (order, errors, timeouts, stopping) is checked with stand-in tasks
(``tests/offline_targets.py``).
"""

import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from concrete import fhe

from feddpsyn.common import wire
from feddpsyn.common.serving import ServiceError
from feddpsyn.crypto.blobs import unpack_blobs
from feddpsyn.crypto.masking import seed_commitment
from feddpsyn.keyserver.coins import StoredOnce
from feddpsyn.keyserver.offline_pool import (
    NICENESS,
    NICENESS_VARIABLE,
    KeyFiles,
    OfflinePool,
    offline_niceness,
)
from feddpsyn.keyserver.preparation import prepare_files
from feddpsyn.keyserver.service import KeyServer
from feddpsyn.keyserver.sessions import build_plan
from tests import offline_targets as targets

# A spawned worker imports the stand-in tasks by name: it gets this process's sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SCHEMA = {"name": "tiny", "columns": [
    {"name": "age", "type": "continuous", "min": 0, "max": 100, "bins": 4},
    {"name": "sex", "type": "categorical", "i2s": ["F", "M"]},
    {"name": "smoker", "type": "categorical", "i2s": ["no", "yes", "unknown"]}]}
CLIENTS = ["alice", "bob"]
SID = "s-offline"
REQUEST = wire.SessionCreate(schema=SCHEMA, clients=CLIENTS, parameter_set="test-small",
                             budget=wire.BudgetSpec(epsilon=1.0, delta=1e-6), max_rows=1000,
                             noise="joint", selection=wire.SelectionRequest(mode="none"))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The session's plan and its prepared folder (circuit, keys, noise pool), made once."""
    plan = build_plan(REQUEST)
    folder = tmp_path_factory.mktemp("prepared") / SID
    prepare_files(plan, len(CLIENTS), folder)
    return plan, folder


def key_server(root, prepared, workers: int) -> KeyServer:
    """A key server with the prepared session recorded, its uploads still to come."""
    plan, folder = prepared
    service = KeyServer(root, offline_workers=workers)
    shutil.copytree(folder, service.session_dir(SID))
    service.sessions.add(SID, REQUEST, plan.to_public(SID, CLIENTS), {}, plan)
    return service


def masked_vectors(plan) -> dict[str, np.ndarray]:
    # The data only (uniform stand-ins for masked counts); every noise is the server's own.
    rng = np.random.default_rng(3)
    k = plan.parameters.count_bits
    return {c: rng.integers(0, 1 << k, plan.layout.total_cells) for c in CLIENTS}


def run_offline_job(service: KeyServer, vectors: dict[str, np.ndarray]):
    """Upload every client's vector and run the offline job until it has nothing left:
    (each client's ciphertexts by chunk, the coin sets by (release, chunk), passes)."""
    for client, vector in vectors.items():
        service.store_masked(SID, client, wire.MaskedUpload(
            commitment=seed_commitment(client.encode() * 4, SID, client),
            values=vector.tolist()))
    done: list[int] = []
    while not done or done[-1] > 0:  # bounded: at most 20 passes
        assert len(done) < 20, "the offline job did not finish in 20 passes"
        done.append(service.run_encryption_job())
    directory = service.session_dir(SID) / "ciphertexts"
    clients = {c: unpack_blobs((directory / f"{c}.bin").read_bytes()) for c in CLIENTS}
    sets = StoredOnce(service.db)
    coins = {held: sets.get(SID, *held) for held in sorted(sets.held(SID))}
    return clients, coins, len(done)


@pytest.fixture(scope="module")
def one_and_two(prepared, tmp_path_factory):
    """The offline job on one worker process and on two."""
    plan, _ = prepared
    vectors = masked_vectors(plan)
    out = {}
    for workers in (1, 2):
        service = key_server(tmp_path_factory.mktemp(f"ks{workers}"), prepared, workers)
        pool, pids = service.offline_pool, set()

        def recorded_map(*args, map_=pool.map, pool=pool, pids=pids):
            result = map_(*args)
            pids.update(pool.last_pids)
            return result

        pool.map = recorded_map
        try:
            out[workers] = run_offline_job(service, vectors)
            out[f"pids{workers}"] = pids
        finally:
            service.close()
    return vectors, out


def test_two_workers_store_what_one_worker_stores(one_and_two):
    _, out = one_and_two
    clients_1, coins_1, passes_1 = out[1]
    clients_2, coins_2, passes_2 = out[2]
    # The same chunks of the same releases, the same ciphertexts a client, the same sizes.
    assert list(coins_2) == list(coins_1) == [("one_way", 0), ("two_way", 0), ("two_way", 1)]
    assert {c: [len(b) for b in blobs] for c, blobs in clients_2.items()} == \
        {c: [len(b) for b in blobs] for c, blobs in clients_1.items()}
    assert [len(c) for c in coins_2.values()] == [len(c) for c in coins_1.values()]
    # Two chunks a pass on two workers (3 chunks: 2 passes), one a pass on one (3).
    assert passes_1 - 1 == 1 + 3 and passes_2 - 1 == 1 + 2
    assert len(out["pids2"]) == 2 and os.getpid() not in out["pids2"]
    assert len(out["pids1"]) == 1 and os.getpid() not in out["pids1"]
    # Every set is its own draw: no two workers' (or chunks') ciphertexts coincide.
    every = [*coins_2.values(), *coins_1.values()]
    assert len(set(every)) == len(every)


@pytest.mark.parametrize("workers", [1, 2])
def test_every_stored_ciphertext_decrypts_to_the_uploads_and_to_bits(prepared, one_and_two,
                                                                     workers):
    plan, folder = prepared
    vectors, out = one_and_two
    clients, coins, _ = out[workers]
    cells, k = plan.parameters.chunk_cells, plan.parameters.count_bits
    server = fhe.Server.load(folder / "server.zip")
    evaluation = fhe.EvaluationKeys.deserialize((folder / "evaluation_keys.bin").read_bytes())
    client = fhe.Client.load(folder / "client.zip")
    client.keys.load_from_bytes((folder / "keys.bin").read_bytes())
    seen = []
    for (release, chunk), coin_set in coins.items():
        masked_sum = np.zeros(cells, dtype=np.int64)
        for vector in vectors.values():
            part = vector[chunk * cells:(chunk + 1) * cells]
            masked_sum[:len(part)] += part
        # Weight 1 on one bit a cell, a different column from cell to cell.
        weights = np.zeros((cells, plan.joint_columns), dtype=np.int64)
        weights[np.arange(cells), (7 * np.arange(cells) + chunk) % plan.joint_columns] = 1
        out_value = server.run(
            *[fhe.Value.deserialize(clients[c][chunk]) for c in CLIENTS],
            fhe.Value.deserialize(coin_set), weights, np.ones(cells, dtype=np.int64),
            np.zeros(cells, dtype=np.int64), evaluation_keys=evaluation)
        decrypted = np.asarray(client.decrypt(out_value), dtype=np.int64)
        bits = (decrypted - masked_sum) % (1 << k)
        assert set(bits.tolist()) <= {0, 1}, f"{release} chunk {chunk}: not bits"
        seen.extend(bits.tolist())
    # 96 uniform bits: all equal with probability 2^-95.
    assert 0 < sum(seen) < len(seen)


def test_a_worker_that_dies_fails_the_pass_and_the_next_pass_recovers(prepared, tmp_path):
    plan, _ = prepared
    service = key_server(tmp_path / "ks", prepared, workers=2)
    try:
        vectors = masked_vectors(plan)
        for client, vector in vectors.items():
            service.store_masked(SID, client, wire.MaskedUpload(
                commitment=seed_commitment(client.encode() * 4, SID, client),
                values=vector.tolist()))
        assert service.run_encryption_job() == 2  # the uploads; the workers are up
        pids = service.offline_pool.worker_pids()
        assert len(pids) == 2
        outcome: list[object] = []

        def coins_pass() -> None:
            try:
                outcome.append(service.run_encryption_job())
            except Exception as exc:
                outcome.append(exc)

        thread = threading.Thread(target=coins_pass)
        thread.start()
        time.sleep(0.5)  # the pass's two chunks are in the workers (each takes over a second)
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        thread.join(30)
        assert not thread.is_alive()
        failure = outcome[0]
        assert isinstance(failure, ServiceError), outcome
        assert failure.status == 503
        assert "offline worker process" in failure.message
        assert "exited with code -9" in failure.message
        assert "nothing of this pass is stored" in failure.message
        assert StoredOnce(service.db).held(SID) == set()
        assert service.run_encryption_job() == 1  # new workers, two chunks
        assert len(StoredOnce(service.db).held(SID)) == 2
        assert not set(service.offline_pool.worker_pids()) & set(pids)
    finally:
        service.close()
    assert service.offline_pool.worker_pids() == []


# ---------------------------------------------------------------- the pool alone
FILES = KeyFiles(targets.load_echo_keys, ".")


def test_results_come_back_in_task_order_from_both_workers():
    pool = OfflinePool(2)
    try:
        out = pool.map(FILES, [targets.Echo(i) for i in range(7)], "echo")
        values = [blob[0].decode().split("@") for blob in out]
        assert [int(v) for v, _ in values] == list(range(7))
        assert len({pid for _, pid in values}) == 2
        assert sorted(set(pool.last_pids)) == sorted(int(pid) for pid in {p for _, p in values})
    finally:
        pool.close()


def test_one_worker_is_a_process_of_its_own_never_the_callers():
    pool = OfflinePool(1)
    try:
        out = pool.map(FILES, [targets.Echo(5), targets.Echo(6)], "echo")
        (worker,) = pool.worker_pids()
        assert out == [[f"5@{worker}".encode()], [f"6@{worker}".encode()]]
        assert worker != os.getpid()
    finally:
        pool.close()


def test_workers_run_below_the_servers_cpu_priority():
    """Every worker runs NICENESS above the server (at most 19): the offline job yields to
    the online work on a shared host."""
    pool = OfflinePool(2, niceness=NICENESS)
    try:
        out = pool.map(FILES, [targets.Niceness(), targets.Niceness()], "niceness")
    finally:
        pool.close()
    assert [int(answer[0]) for answer in out] == [min(19, os.nice(0) + NICENESS)] * 2


def test_the_environment_sets_the_niceness_and_a_bad_value_is_named(monkeypatch):
    monkeypatch.setenv(NICENESS_VARIABLE, "3")
    assert offline_niceness() == 3 and OfflinePool(1).niceness == 3
    monkeypatch.delenv(NICENESS_VARIABLE)
    assert offline_niceness() == NICENESS
    for bad in ("-1", "20", "low"):
        monkeypatch.setenv(NICENESS_VARIABLE, bad)
        with pytest.raises(ValueError, match=NICENESS_VARIABLE):
            OfflinePool(1)


def test_idle_workers_are_ended_and_the_next_map_spawns_new_ones():
    pool = OfflinePool(2, idle_timeout=1.0)
    try:
        assert not pool.end_idle()  # no workers yet
        pool.map(FILES, [targets.Echo(i) for i in range(2)], "echo")
        workers = pool.worker_pids()
        assert len(workers) == 2
        assert not pool.end_idle() and pool.worker_pids() == workers  # idle for under 1 s
        time.sleep(1.2)
        assert pool.end_idle()
        assert pool.worker_pids() == []
        for pid in workers:  # exited, and reaped: no process of that id is left
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
        pool.map(FILES, [targets.Echo(1)], "echo")
        assert pool.worker_pids() and not set(pool.worker_pids()) & set(workers)
    finally:
        pool.close()


def test_noise_bits_are_drawn_in_each_worker_and_never_twice():
    from feddpsyn.keyserver.noisy_greedy import DrawAndEncryptScoreBits

    pool = OfflinePool(2)
    try:
        out = pool.map(FILES, [DrawAndEncryptScoreBits(256)] * 6, "bits")
        drawn = [blob[0] for blob in out]
        assert all(len(d) == 256 and set(d) <= {0, 1} for d in drawn)
        assert len(set(drawn)) == 6  # equal draws: probability 15 * 2^-256
        assert len(set(pool.last_pids)) == 2
    finally:
        pool.close()


def test_a_task_that_kills_its_worker_fails_the_map_at_once():
    pool = OfflinePool(2)
    try:
        started = time.monotonic()
        with pytest.raises(ServiceError) as failure:
            pool.map(FILES, [targets.Sleep(0.2), targets.Exit(3),
                                            targets.Sleep(0.2)], "the test's job")
        assert time.monotonic() - started < 20
        assert failure.value.status == 503
        assert failure.value.message.startswith("the test's job: an offline worker process")
        assert "exited with code 3" in failure.value.message
        assert pool.worker_pids() == []  # every worker ended: none holds a stale answer
        assert pool.map(FILES, [targets.Echo(1)], "echo")[0][0].startswith(b"1@")
    finally:
        pool.close()


def test_a_task_that_raises_fails_the_map_with_its_type_and_message():
    pool = OfflinePool(2)
    try:
        with pytest.raises(ServiceError, match=r"task failed .*ValueError: no such chunk"):
            pool.map(FILES, [targets.Refuse("no such chunk")], "refusal")
    finally:
        pool.close()


def test_a_tasks_refusal_is_a_422_in_its_own_words():
    pool = OfflinePool(1)
    try:
        with pytest.raises(ServiceError) as refused:
            pool.map(FILES, [targets.Undecryptable()], "decrypting")
        assert refused.value.status == 422
        assert refused.value.message == "the outputs do not decrypt under this session's keys"
    finally:
        pool.close()


def test_a_stuck_task_and_a_stopping_server_end_the_map():
    pool = OfflinePool(2, task_timeout=1.0)
    try:
        with pytest.raises(ServiceError, match="more than 1 s on one task"):
            pool.map(FILES, [targets.Sleep(30)], "stuck")
        pool.task_timeout = 900.0
        failure: list[BaseException] = []

        def stuck_map() -> None:
            try:
                pool.map(FILES, [targets.Sleep(30)], "stuck")
            except BaseException as exc:
                failure.append(exc)

        thread = threading.Thread(target=stuck_map)
        thread.start()
        time.sleep(3)  # the workers are up and busy
        started = time.monotonic()
        pool.close()
        thread.join(20)
        assert time.monotonic() - started < 20 and not thread.is_alive()
        assert isinstance(failure[0], ServiceError) and "stopping" in failure[0].message
        assert pool.worker_pids() == []
    finally:
        pool.close()


def test_only_the_key_files_place_crosses_to_a_worker(prepared, tmp_path):
    import pickle

    service = key_server(tmp_path / "ks", prepared, workers=2)
    try:
        files = service.sessions.key_files(SID)
        message = pickle.dumps(files)
        secret = (service.session_dir(SID) / "keys.bin").read_bytes()
        middle = len(secret) // 2
        assert secret[middle:middle + 64] not in message and secret[-64:] not in message
        assert files.directory == str(service.session_dir(SID))
        assert (service.session_dir(SID) / "keys.bin").stat().st_mode & 0o077 == 0
    finally:
        service.close()


def test_a_request_for_a_chunk_being_encrypted_waits_for_it_instead_of_redoing_it(
        prepared, tmp_path):
    """The compute server asks for a chunk while the offline pass encrypts that very chunk:
    the request gets the pass's set, and the chunk is encrypted once."""
    service = key_server(tmp_path / "ks", prepared, 1)
    pool = service.offline_pool
    mapped: list[int] = []
    started = threading.Event()

    def recorded_map(files, tasks, what, map_=pool.map):
        mapped.append(len(tasks))
        started.set()
        return map_(files, tasks, what)

    pool.map = recorded_map
    try:
        offline = threading.Thread(target=service.coins.prepare_one)
        offline.start()  # its first missing chunk is the 1-ways' chunk 0
        assert started.wait(60)
        served = service.coins.coins(SID, "one_way", 0)
        offline.join(120)
        assert not offline.is_alive()
        assert mapped == [1]  # one encryption of one chunk, the pass's
        assert served == StoredOnce(service.db).get(SID, "one_way", 0)
    finally:
        service.close()


def test_the_status_counts_the_offline_jobs_sets(prepared, tmp_path):
    """``SessionStatus.offline``: none of the three sets before the job, all after it."""
    plan, _ = prepared
    service = key_server(tmp_path / "ks", prepared, 1)
    try:
        before = service.status(SID).offline
        assert before is not None and (before.done, before.total) == (0, 3)
        run_offline_job(service, masked_vectors(plan))
        after = service.status(SID).offline
        assert after is not None and (after.done, after.total, after.unit) == (3, 3, "sets")
    finally:
        service.close()
