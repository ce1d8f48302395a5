"""The compute server's executors (``computeserver.executor``) on a tiny P2 + P3 module: a
local Dask cluster of two worker processes on loopback and a local spawn pool decrypt to
exactly what the in-process path gives, and a worker killed mid-task costs a retry, not a
result."""

import os
import secrets
import signal
import threading
import time
from fractions import Fraction

import numpy as np
import pytest

from computeserver.dask_executor import DaskExecutor
from computeserver.executor import (CallTask, Circuit, InProcessExecutor,
                                    LocalPoolExecutor, ScoreTask)
from crypto.indif import digits_of, indif_exact, indif_offset
from crypto.private_selection import PrivateSelectionShape, compile_private_selection, indif_name
from crypto.selection import (SelectionShape, clear_arguments, random_priorities, random_share,
                              thresholds)

# Smaller than tests/test_private_selection.py's module (72 MB of evaluation keys, 51
# bootstraps a select): these tests are about where tasks run, not about the circuits.
K, CELLS = 4, 4
SELECTION = SelectionShape(candidates=2, score_bits=4, drop_bits=0, nb=2, kappa_prime=(3, 3))
SHAPE = PrivateSelectionShape(count_bits=K, chunk_sizes=(2, CELLS), selection=SELECTION)
EPS = Fraction(1, 2)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """The module, its circuit files as the compute server stores them, and one step's
    tasks: two pairs' P2 (the first cut into two chunks)."""
    module = compile_private_selection(SHAPE, thresholds(SELECTION, EPS), 2.0 ** -40)
    module.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    directory = tmp_path_factory.mktemp("circuit")
    module.server.save(directory / "selection_server.zip")
    (directory / "selection_evaluation_keys.bin").write_bytes(
        module.keys.evaluation.serialize())
    circuit = Circuit.of_files("tiny", directory / "selection_server.zip",
                               directory / "selection_evaluation_keys.bin")
    rng = np.random.default_rng(5)
    chunks, exact = [], []
    for cells in (CELLS, 2, CELLS):
        counts, expected = rng.integers(0, 3, cells), rng.integers(0, 3, cells)
        mask = rng.integers(0, 2 ** K, cells)
        masked, _ = getattr(module, indif_name(cells)).encrypt(
            digits_of((counts + mask) % 2 ** K, K), None)
        chunks.append((indif_name(cells), masked.serialize(),
                       digits_of(indif_offset(mask, expected, K), K)))
        exact.append(indif_exact(counts, expected))
    score_tasks = [ScoreTask((chunks[0], chunks[1])), ScoreTask((chunks[2],))]
    scores = [exact[0] + exact[1], exact[2]]
    return module, circuit, score_tasks, scores


def select_tasks(module, candidates: list[bytes]) -> list[CallTask]:
    """One P3 call, candidates in the compute server's order (second first)."""
    r_ks, r_cs = random_share(SELECTION), random_share(SELECTION)
    args = clear_arguments(np.zeros((1, 2, SELECTION.score_bits), dtype=np.int64),
                           np.array([1, 1]), r_ks, r_cs, random_priorities(SELECTION))
    shares = module.select.encrypt(None, None, None, args[2], args[3], None, None)
    return [CallTask("select", (candidates[1], candidates[0], args[1],
                                *[v.serialize() for v in shares[3:5]], *args[4:]))]


def decrypt_step(module, executor, score_tasks, select: bool = True
                 ) -> tuple[list[int], list[list[int]]]:
    """(the pairs' InDif, each P3 call's one-hot) as the key server would decrypt them."""
    from concrete import fhe

    circuit = executor_circuit[0]
    scores = executor.map(circuit, score_tasks)
    values = [int(sum(int(b) << j for j, b in enumerate(np.asarray(
        module.add.decrypt(fhe.Value.deserialize(s))).ravel()))) for s in scores]
    if not select:
        return values, []
    outputs = executor.map(circuit, executor_selects[0])
    one_hots = [[int(np.asarray(v).ravel()[0])
                 for v in module.select.decrypt(*[fhe.Value.deserialize(o) for o in out])]
                for out in outputs]
    return values, one_hots


# The select tasks draw fresh shares: built once (from in-process scores) so that every
# executor runs exactly the same ciphertexts.
executor_circuit: list = []
executor_selects: list = []


@pytest.fixture(scope="module")
def in_process(compiled):
    module, circuit, score_tasks, scores = compiled
    executor_circuit.append(circuit)
    candidates = InProcessExecutor().map(circuit, score_tasks)
    executor_selects.append(select_tasks(module, candidates))
    values, one_hots = decrypt_step(module, InProcessExecutor(), score_tasks)
    assert values == scores
    assert all(sum(h) == 1 for h in one_hots)
    return values, one_hots


@pytest.fixture(scope="module")
def dask_cluster():
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           host="127.0.0.1", scheduler_port=0, dashboard_address=None,
                           silence_logs=40)
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def test_dask_cluster_decrypts_to_the_in_process_scores_and_one_hots(compiled, in_process,
                                                                    dask_cluster):
    module, _, score_tasks, _ = compiled
    executor = DaskExecutor(client=dask_cluster)
    assert decrypt_step(module, executor, score_tasks) == in_process
    # Each worker process loaded the circuit at most once for both steps.
    assert len(executor.stats.load_seconds) <= 2


def test_dask_worker_killed_mid_task_has_its_task_run_again(compiled, in_process,
                                                            dask_cluster):
    module, circuit, score_tasks, _ = compiled
    executor = DaskExecutor(client=dask_cluster)
    executor.map(circuit, score_tasks[:1])  # circuit loaded on the workers
    pids = dask_cluster.run(os.getpid)
    killed: list[int] = []

    def kill_a_busy_worker() -> None:
        for _ in range(400):  # bounded: 20 s
            busy = [w for w, keys in dask_cluster.processing().items() if keys]
            if busy:
                time.sleep(0.2)  # inside the task, past its deserialisation
                killed.append(pids[busy[0]])
                os.kill(pids[busy[0]], signal.SIGKILL)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_busy_worker)
    killer.start()
    values, _ = decrypt_step(module, executor, score_tasks * 3, select=False)
    killer.join()
    assert killed, "no worker was seen running a task"
    assert values == in_process[0] * 3
    assert killed[0] not in dask_cluster.run(os.getpid).values()


def test_executor_local_pool_matches_in_process_and_survives_a_killed_worker(compiled,
                                                                             in_process):
    module, circuit, score_tasks, _ = compiled
    executor = LocalPoolExecutor(workers=2)
    try:
        killed: list[int] = []

        def kill_a_worker() -> None:
            for _ in range(400):  # bounded: 20 s for the pool to spawn its workers
                pids = executor.worker_pids()
                if pids:
                    time.sleep(0.5)
                    killed.append(pids[0])
                    os.kill(pids[0], signal.SIGKILL)
                    return
                time.sleep(0.05)

        killer = threading.Thread(target=kill_a_worker)
        killer.start()
        values, _ = decrypt_step(module, executor, score_tasks * 2, select=False)
        killer.join()
        assert killed and executor.stats.retries > 0
        assert values == in_process[0] * 2
        assert killed[0] not in executor.worker_pids()
    finally:
        executor.close()
