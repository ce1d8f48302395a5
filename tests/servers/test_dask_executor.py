"""The compute server's executors (``computeserver.executor``) on a tiny P2 + P3 module: a
local Dask cluster of two worker processes on loopback and a local spawn pool decrypt to
exactly what the in-process path gives (P2's scores, P3's one call and P3 by candidate
batches), and a worker killed mid-task costs a retry, not a result.

Cost: the module is compiled and keyed once for the file (about 12 s), and the cluster's
workers start (and import concrete) in a thread meanwhile; every circuit is a few dozen
bootstraps. Everything is seeded, so no run differs from another."""

import os
import random
import signal
import threading
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from feddpsyn.computeserver.dask_executor import DaskExecutor
from feddpsyn.computeserver.executor import (
    CallTask,
    Circuit,
    InProcessExecutor,
    LocalPoolExecutor,
    map_summed,
)
from feddpsyn.computeserver.selection import batched_select
from feddpsyn.crypto.indif import digits_of, indif_exact, indif_offset
from feddpsyn.crypto.private_selection import (
    PrivateSelectionShape,
    batch_names,
    compile_private_selection,
    indif_name,
)
from feddpsyn.crypto.selection_batches import BatchLayout
from feddpsyn.crypto.selection_randomness import batch_randomness, random_priorities, random_share
from feddpsyn.crypto.tfhe_permute_and_flip import SelectionShape, clear_arguments, thresholds

# The smallest module with every function the compute server sends to workers: P2 on chunks
# of 2 and 4 cells at k = 4, add, and P3 over three candidates, as one call and in two
# batches of two (one padding position).
K = 4
SELECTION = SelectionShape(candidates=3, score_bits=4, drop_bits=0, nb=2, kappa_prime=(3, 3))
LAYOUT = BatchLayout(candidates=3, size=2)
SHAPE = PrivateSelectionShape(count_bits=K, chunk_sizes=(2, 4), selection=SELECTION,
                              batches=LAYOUT)
EPS = Fraction(1, 2)
# Pair 0 is three chunks (two levels of adds, one carried over a level), pair 1 one chunk.
PAIR_CHUNKS = ((4, 2, 2), (2,))


@pytest.fixture(scope="module")
def step(booting_cluster, tmp_path_factory):
    """The module and its circuit files as the compute server stores them; one step's P2
    tasks (chunks grouped by pair) with the clear InDif they must give; P3 tasks built from
    the in-process scores and a batched round's inputs; and the in-process path's results:
    (scores, one-hot outputs, the batched round's one-hot)."""
    module = compile_private_selection(SHAPE, thresholds(SELECTION, EPS), 2.0 ** -40)
    module.keygen(seed=11, encryption_seed=12)
    directory = tmp_path_factory.mktemp("circuit")
    module.server.save(directory / "selection_server.zip")
    (directory / "selection_evaluation_keys.bin").write_bytes(
        module.keys.evaluation.serialize())
    circuit = Circuit.of_files("tiny", directory / "selection_server.zip",
                               directory / "selection_evaluation_keys.bin")
    rng = np.random.default_rng(5)
    groups, exact = [], []
    for sizes in PAIR_CHUNKS:
        group, total = [], 0
        for cells in sizes:
            counts, expected = rng.integers(0, 3, cells), rng.integers(0, 3, cells)
            mask = rng.integers(0, 2 ** K, cells)
            masked, _ = getattr(module, indif_name(cells)).encrypt(
                digits_of((counts + mask) % 2 ** K, K), None)
            group.append(CallTask(indif_name(cells), (
                masked.serialize(), digits_of(indif_offset(mask, expected, K), K))))
            total += indif_exact(counts, expected)
        groups.append(group)
        exact.append(total)
    in_process = InProcessExecutor()
    scores = map_summed(in_process, circuit, groups, "add")
    assert [decode(module, s) for s in scores] == exact
    selects = select_tasks(module, scores)
    outputs = in_process.map(circuit, selects)
    assert all(sum(one_hot(module, out)) == 1 for out in outputs)
    batched = batched_round(module, scores)
    hot = batched_one_hot(module, batched_select(in_process, circuit, LAYOUT, *batched))
    assert sum(hot) == 1
    return module, circuit, groups, selects, (scores, outputs), (batched, hot)


def select_tasks(module, candidates: list[bytes]) -> list[CallTask]:
    """One P3 call (candidates in the compute server's order: second first, then the first
    again), the key server's shares encrypted."""
    randbits = random.Random(7).getrandbits
    args = clear_arguments(np.zeros((1, 3, SELECTION.score_bits), dtype=np.int64),
                           np.array([1, 1, 1]), random_share(SELECTION, randbits),
                           random_share(SELECTION, randbits),
                           random_priorities(SELECTION, randbits))
    shares = module.select.encrypt(None, None, None, None, args[2], args[3], None, None)
    return [CallTask("select", (candidates[1], candidates[0], candidates[0], args[1],
                                *[v.serialize() for v in shares[4:6]], *args[4:]))]


def batched_round(module, candidates: list[bytes]) -> tuple:
    """``batched_select``'s arguments after the layout: the candidates in the compute
    server's order (one of them inactive), the key server's encrypted shares per batch, the
    compute server's bits."""
    randbits = random.Random(9).getrandbits
    r_ks, priority = batch_randomness(SELECTION, LAYOUT, randbits)
    r_cs = random_share(SelectionShape(LAYOUT.positions, 4, 0, 2, (3, 3)), randbits)
    pick = getattr(module, batch_names(LAYOUT)["pick"])
    n, shares = LAYOUT.size, []
    for b in range(LAYOUT.count):
        part = LAYOUT.batch(b)
        encrypted = pick.encrypt(*([None] * (n + 2)), r_ks[:, part], priority[:, part],
                                 None, None)
        shares += [encrypted[n + 2].serialize(), encrypted[n + 3].serialize()]
    active = np.array([1, 0, 1, 0])  # the last position is padding
    return [candidates[1], candidates[0], candidates[0]], active, shares, r_cs


def batched_one_hot(module, outputs: list[bytes]) -> list[int]:
    from concrete import fhe

    mask = getattr(module, batch_names(LAYOUT)["mask"])
    return [int(np.asarray(mask.decrypt(fhe.Value.deserialize(o))).ravel()[0])
            for o in outputs]


def decode(module, score: bytes) -> int:
    from concrete import fhe

    digits = np.asarray(module.add.decrypt(fhe.Value.deserialize(score))).ravel()
    return int(sum(int(b) << j for j, b in enumerate(digits)))


def one_hot(module, outputs: tuple[bytes, ...]) -> list[int]:
    from concrete import fhe

    return [int(np.asarray(v).ravel()[0])
            for v in module.select.decrypt(*[fhe.Value.deserialize(o) for o in outputs])]


def decrypted(module, scores, outputs) -> tuple[list[int], list[list[int]]]:
    return [decode(module, s) for s in scores], [one_hot(module, out) for out in outputs]


class CountingRetries:
    """An executor's retries summed over its ``map`` calls (map_summed makes one a level)."""

    def __init__(self, executor):
        self.executor = executor
        self.retries = 0

    def map(self, circuit, tasks, progress=None):
        out = self.executor.map(circuit, tasks, progress)
        self.retries += self.executor.stats.retries
        return out


def kill_when(pids_busy, killed: list[int], grace: float) -> threading.Thread:
    """A thread that kills the first worker process ``pids_busy()`` names, ``grace`` seconds
    after it appears (bounded: gives up after 30 s)."""

    def run() -> None:
        for _ in range(600):
            busy = pids_busy()
            if busy:
                time.sleep(grace)
                killed.append(busy[0])
                os.kill(busy[0], signal.SIGKILL)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_dask_cluster_decrypts_to_the_in_process_scores_and_one_hots(step, dask_cluster):
    module, circuit, groups, selects, (scores, outputs), (batched, hot) = step
    executor = DaskExecutor(client=dask_cluster)
    assert len(dask_cluster.scheduler_info()["workers"]) == 2
    seen: list[tuple[int, int]] = []
    dask_scores = map_summed(executor, circuit, groups, "add",
                             lambda done, total: seen.append((done, total)))
    dask_outputs = executor.map(circuit, selects)
    # Same ciphertexts in, same decryptions out (not the same bytes: another process's
    # outputs differ from this one's in their noise, computeserver.executor).
    assert decrypted(module, dask_scores, dask_outputs) == decrypted(module, scores, outputs)
    # Progress counts every call and add across the workers: 4 chunks + 2 adds.
    assert seen[-1] == (6, 6) and [d for d, _ in seen] == list(range(1, 7))
    # The circuit reached each worker process once, through the plugin, and loaded once.
    pids = set(dask_cluster.run(os.getpid).values())
    assert set(executor.stats.load_seconds) <= pids
    # P3 by candidate batches: 3 steps of 2 tasks and 2 combines, progress across them.
    seen.clear()
    assert batched_one_hot(module, batched_select(
        executor, circuit, LAYOUT, *batched,
        progress=lambda done, total: seen.append((done, total)))) == hot
    assert [d for d, _ in seen] == list(range(1, 9)) and seen[-1][1] == 8


def test_dask_worker_killed_mid_task_has_its_task_run_again(step, dask_cluster):
    module, circuit, groups, _, (scores, _), _ = step
    executor = DaskExecutor(client=dask_cluster)
    executor.map(circuit, groups[1])  # the circuit loaded on the workers
    pids = dask_cluster.run(os.getpid)
    killed: list[int] = []
    killer = kill_when(lambda: [pids[w] for w, keys in dask_cluster.processing().items()
                                if keys and w in pids], killed, grace=0.2)
    retried = map_summed(executor, circuit, groups, "add")
    killer.join()
    assert killed, "no worker was seen running a task"
    assert [decode(module, s) for s in retried] == [decode(module, s) for s in scores]
    # The nanny starts a replacement, which gets the circuit from the plugin.
    dask_cluster.wait_for_workers(2, timeout=120)
    assert killed[0] not in dask_cluster.run(os.getpid).values()
    assert [decode(module, s) for s in map_summed(executor, circuit, groups[1:], "add")] \
        == [decode(module, s) for s in scores[1:]]


def test_executor_local_pool_decrypts_to_the_in_process_path_despite_a_killed_worker(step):
    module, circuit, groups, selects, (scores, outputs), (batched, hot) = step
    # One worker: a restart respawns the whole pool, whatever its size.
    executor = LocalPoolExecutor(workers=1)
    counting = CountingRetries(executor)
    try:
        killed: list[int] = []
        killer = kill_when(executor.worker_pids, killed, grace=0.5)
        pool_scores = map_summed(counting, circuit, groups, "add")
        killer.join()
        assert killed and counting.retries > 0
        assert killed[0] not in executor.worker_pids()
        assert (decrypted(module, pool_scores, executor.map(circuit, selects))
                == decrypted(module, scores, outputs))
        assert batched_one_hot(module, batched_select(executor, circuit, LAYOUT,
                                                      *batched)) == hot
    finally:
        pids = executor.worker_pids()
        executor.close()
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()], "a worker outlived close"
