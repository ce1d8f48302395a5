"""The compute server's executors on P2 and P3, 1 and 2 local workers in the same run, and a
model of many cores built from the measured per-task cost and overhead.

What runs: a selection module at the demo's P2 width (k = 12, chunks of 16 cells) with a small
P3 (``--candidates``, as one ``select`` call and in batches of at most ``--batch``), keyed
once; a few pairs of uneven size (``PAIRS``: chunks per pair, one large pair among small
ones, as a small table has) and ``--rounds`` P3 rounds, each run as one call and by
candidate batches (``computeserver.selection.batched_select``) on the same ciphertexts and
shares, on (a) the
in-process executor (two threads, concrete's default OpenMP threads), (b) one spawned worker
process and (c) two, each worker pinned to one OpenMP thread (``computeserver.executor``), the
three alternating across ``--repeats`` so that machine noise hits each. P2 runs as the compute
server runs it, one task per chunk and a tree of encrypted adds per pair
(``computeserver.executor.map_summed``); on two workers it also runs in the earlier form, one
task per pair (its chunks and adds in one task), the same run. Every score decrypts to the
clear InDif; every executor's P3 outputs decrypt to the in-process ones, and the batched
round's to the single call's.

Then the two steps that carry a joint noise, run as the compute server runs them, on the same
three executors and alternating the same way: a 2-way joint release (``--release-chunks``
chunks of ``RELEASE_CELLS`` cells from ``RELEASE_CLIENTS`` clients at k = ``RELEASE_K``,
every cell with ``RELEASE_SHAPE``'s joint noise: ``computeserver.release``'s chunk tasks, a
window of the executor's width at a time, ``computeserver.executor.map_streamed``) and
noisy-greedy's joint scores (``--score-pairs`` calls of a score module's ``joint`` at
``SCORE_SHAPE``, one ``map`` as ``computeserver.noisy_greedy`` runs them). Each executor's
outputs decrypt to the in-process ones, and those to the plaintext circuit.

Overhead per task, measured apart: pickling a task, serialising and parsing a ciphertext, and
the round trip of one task at a time on a warm worker minus its time inside concrete, on the
local pool and on a one-worker Dask cluster on loopback; the key load once per worker process
(on Dask with the plugin's transfer).

The model (stated as a model, not a measurement): Adult's P2 at its session widths (k = 17,
17 score digits; 453 chunks of 8, 16 or 32 cells over 105 pairs, ``SessionPlan``). A chunk
costs the measured chunk time scaled by its bootstrap count (``crypto.indif.chunk_bootstraps``)
against the measured chunk's, an add the measured add scaled by its digits; each task pays
the measured overhead o. Chunks are list-scheduled longest first on n one-thread workers, then
each level of adds runs in ceil(adds / n) waves; plus one key load. The earlier one-task-per-
pair form is modelled the same way (its critical path is the largest pair).

P3 in the model: Adult's 15 rounds over 105 candidates at its session widths, by candidate
batches (the session plan's layout, ``params.selection_plan.candidate_batches``, or
``--adult-batch`` candidates at most) and as one call. A function call costs its bootstrap
count (``crypto.selection_cost.batched_pbs_estimate``, exact against concrete's count in the
tests) times the measured seconds per bootstrap of the batched functions on one worker; per
round the five steps run one after another, each in ceil(tasks / n) waves of its dearest
task plus o. The one call a round does not shorten with workers. The whole online phase is P2 plus the rounds, next to FedDPSyn's 13.7 min on
an A6000 and Fu et al.'s 24 min over a WAN.

The key server's offline job (``keyserver.offline_pool``), as its ``--workers`` runs it: at the
default parameter set's chunk (k = ``KS_K``, ``KS_CELLS`` cells) with a joint noise of
``KS_COLUMNS`` encrypted bits a cell, ``--ks-coin-chunks`` chunks of the joint noise's bits
drawn and encrypted a pass of one chunk a worker (``keyserver.coins``), then one client's
masked vector of ``--ks-upload-chunks`` chunks encrypted in one map (``keyserver.uploads``),
with ``--workers 1`` (one worker process) and 2 worker processes (each loading the key from
the 0600 files), alternating. Each run's first coin set and first upload
chunk go through the P1 circuit with weight 1 on one bit a cell: the decryption minus the
masked values is a bit; every coin set is a distinct ciphertext.

Run: .venv/bin/python bench/scale/bench_scaleout.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import pickle
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# No concrete import at this level: spawned workers re-import this file as their main
# module, and concrete must load there only after the worker has pinned its OpenMP threads.
from feddpsyn.computeserver.executor import (  # noqa: E402
    CallTask,
    Circuit,
    InProcessExecutor,
    LocalPoolExecutor,
    map_streamed,
    map_summed,
)
from feddpsyn.computeserver.selection import batched_select  # noqa: E402

K, CHUNK = 12, 16
# The 2-way joint release: a chunk of 32 cells at a 16-bit count width, every cell with 14
# XOR-shared 7-bit uniforms (98 encrypted bits a cell: the plans' 2-way releases carry
# 56-240), from 4 clients.
RELEASE_K, RELEASE_CELLS, RELEASE_CLIENTS = 16, 32, 4
# noisy-greedy's joint scores: 10 score digits and 6 XOR-shared 3-bit uniforms (4-bit
# lookups); the module's P2 functions at their smallest, as only ``joint`` runs here.
SCORE_DIGITS, SCORE_UNIFORMS, SCORE_UNIFORM_BITS = 10, 6, 3
# Chunks per pair: a small table's P2, one large pair among small ones.
PAIRS = {"quick": (5, 1, 1, 1), "full": (8, 3, 2, 1, 1, 1)}
FEDDPSYN_A6000_MIN, FU_ET_AL_MIN = 13.7, 24.0


@dataclass(frozen=True)
class PairTask:
    """The earlier scheduling unit, kept here for comparison: a whole pair in one task (its
    chunks, then their sum by sequential adds)."""

    chunks: tuple[CallTask, ...]

    def run(self, server, keys) -> tuple[bytes]:
        from concrete import fhe

        total = None
        for chunk in self.chunks:
            score = server.run(fhe.Value.deserialize(chunk.arguments[0]), chunk.arguments[1],
                               evaluation_keys=keys, function_name=chunk.function)
            total = score if total is None else server.run(
                total, score, evaluation_keys=keys, function_name="add")
        return (total.serialize(),)


class Recording:
    """An executor that keeps, across its ``map`` calls (a map_summed's levels), each task's
    seconds inside concrete and, per call, the CPU seconds each worker process got."""

    def __init__(self, executor):
        self.executor = executor
        self.run_seconds: list[float] = []
        self.cpu_by_call: list[dict[int, float]] = []

    def map(self, circuit, tasks, progress=None):
        out = self.executor.map(circuit, tasks, progress)
        stats = self.executor.stats
        self.run_seconds.extend(stats.run_seconds)
        by_pid: dict[int, float] = {}
        for pid, cpu in zip(stats.pids, stats.cpu_seconds):
            by_pid[pid] = by_pid.get(pid, 0.0) + cpu
        self.cpu_by_call.append(by_pid)
        return out

    def cpu_total(self) -> float:
        return sum(sum(call.values()) for call in self.cpu_by_call)

    def cpu_makespan(self) -> float:
        """The step's length had every worker had a core of its own: per call (a level,
        a barrier) the busiest worker's CPU seconds, summed."""
        return sum(max(call.values()) for call in self.cpu_by_call)


def build(candidates: int, batch: int, directory: Path):
    from feddpsyn.crypto.private_selection import PrivateSelectionShape, compile_private_selection
    from feddpsyn.crypto.selection_batches import batch_layout
    from feddpsyn.crypto.tfhe_permute_and_flip import choose_shape, thresholds

    selection = choose_shape(candidates, 10, 0.5)
    layout = batch_layout(candidates, batch)
    if layout is None:
        raise SystemExit(f"--batch {batch} leaves {candidates} candidates in one batch")
    shape = PrivateSelectionShape(count_bits=K, chunk_sizes=(CHUNK,), selection=selection,
                                  batches=layout)
    started = time.perf_counter()
    module = compile_private_selection(shape, thresholds(selection, Fraction(1, 4)),
                                       2.0 ** -40)
    compiled = time.perf_counter() - started
    module.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    module.server.save(directory / "server.zip")
    (directory / "keys.bin").write_bytes(module.keys.evaluation.serialize())
    print(f"module: P2 k = {K}, {CHUNK} cells a chunk "
          f"({module.indif_16.statistics['programmable_bootstrap_count']} bootstraps), add "
          f"({module.add.statistics['programmable_bootstrap_count']}); P3 over {candidates} "
          f"candidates, {selection.score_bits} score bits "
          f"({module.select.statistics['programmable_bootstrap_count']} bootstraps; in "
          f"{layout.count} batches of {layout.size}: "
          f"{batched_bootstraps(module, layout)} bootstraps a round); "
          f"compiled in {compiled:.0f} s; evaluation keys "
          f"{(directory / 'keys.bin').stat().st_size / 1e6:.0f} MB", flush=True)
    return module, selection, layout


def batched_bootstraps(module, layout) -> int:
    """A batched round's bootstraps, from the compiled functions' statistics."""
    from feddpsyn.crypto.private_selection import batch_names

    count = {stage: getattr(module, name).statistics["programmable_bootstrap_count"]
             for stage, name in batch_names(layout).items()}
    return (layout.count * (count["maximum"] + count["pick"] + count["mask"])
            + count["combine_maximum"] + count["least"])


def chunk_groups(module, pairs: tuple[int, ...], seed: int
                 ) -> tuple[list[list[CallTask]], list[int]]:
    """Per pair its chunks' P2 tasks (random counts), and the pair's clear InDif."""
    from feddpsyn.crypto.indif import digits_of, indif_exact, indif_offset

    rng = np.random.default_rng(seed)
    groups, exact = [], []
    for chunks in pairs:
        group, total = [], 0
        for _ in range(chunks):
            counts, expected = rng.integers(0, 20, CHUNK), rng.integers(0, 20, CHUNK)
            mask = rng.integers(0, 2 ** K, CHUNK)
            masked, _ = module.indif_16.encrypt(digits_of((counts + mask) % 2 ** K, K), None)
            group.append(CallTask("indif_16", (masked.serialize(),
                                               digits_of(indif_offset(mask, expected, K), K))))
            total += indif_exact(counts, expected)
        groups.append(group)
        exact.append(total)
    return groups, exact


def select_round(module, selection, layout, candidates: list[bytes]) -> tuple:
    """One round's P3 work on the same candidates and shares: the single ``select`` task and
    ``batched_select``'s arguments after the executor, circuit and layout."""
    from dataclasses import replace

    from feddpsyn.crypto.private_selection import batch_names
    from feddpsyn.crypto.selection_randomness import batch_randomness, random_share
    from feddpsyn.crypto.tfhe_permute_and_flip import clear_arguments

    s, n = selection.candidates, layout.size
    r_ks, priority = batch_randomness(selection, layout)
    r_cs = random_share(replace(selection, candidates=layout.positions))
    args = clear_arguments(np.zeros((1, s, selection.score_bits), dtype=np.int64),
                           np.ones(s, dtype=np.int64), r_ks[:, :s], r_cs[:, :s],
                           priority[:, :s])
    encrypted = module.select.encrypt(*([None] * (s + 1)), args[2], args[3], None, None)
    single = CallTask("select", (*candidates[:s], args[1],
                                 *[v.serialize() for v in encrypted[s + 1:s + 3]], *args[4:]))
    pick = getattr(module, batch_names(layout)["pick"])
    shares = []
    for b in range(layout.count):
        part = layout.batch(b)
        encrypted = pick.encrypt(*([None] * (n + 2)), r_ks[:, part], priority[:, part],
                                 None, None)
        shares += [encrypted[n + 2].serialize(), encrypted[n + 3].serialize()]
    active = np.zeros(layout.positions, dtype=np.int64)
    active[:s] = 1
    return single, (list(candidates[:s]), active, shares, r_cs)


def batched_one_hot(module, layout, outputs: list[bytes]) -> list[int]:
    from concrete import fhe

    from feddpsyn.crypto.private_selection import batch_names

    mask = getattr(module, batch_names(layout)["mask"])
    return [int(np.asarray(mask.decrypt(fhe.Value.deserialize(o))).ravel()[0])
            for o in outputs]


def decode(module, score: bytes) -> int:
    from concrete import fhe

    bits = np.asarray(module.add.decrypt(fhe.Value.deserialize(score))).ravel()
    return int(sum(int(b) << j for j, b in enumerate(bits)))


def one_hot(module, outputs: tuple[bytes, ...]) -> list[int]:
    from concrete import fhe

    return [int(np.asarray(v).ravel()[0])
            for v in module.select.decrypt(*[fhe.Value.deserialize(o) for o in outputs])]


def overhead(executor, circuit: Circuit, task, repeats: int) -> tuple[float, float]:
    """(seconds per task outside concrete, seconds inside) for one task at a time on a warm
    worker: medians."""
    extra, inside = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        executor.map(circuit, [task])
        inside.append(executor.stats.run_seconds[0])
        extra.append(time.perf_counter() - started - inside[-1])
    return float(np.median(extra)), float(np.median(inside))


def dask_overhead(circuit: Circuit, chunk: CallTask, partial: bytes
                  ) -> tuple[float, float, float]:
    """On a one-worker Dask cluster on loopback: seconds per chunk task and per add outside
    concrete (scheduler, transfer, serialisation), and the seconds to hand the circuit to
    the worker and load it there (the plugin, then the first task's load)."""
    from distributed import Client, LocalCluster

    from feddpsyn.computeserver.dask_executor import DaskExecutor

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                      scheduler_port=0, dashboard_address=None, silence_logs=40,
                      preload=["concrete.fhe"]) as cluster, Client(cluster) as client:
        executor = DaskExecutor(client=client)
        started = time.perf_counter()
        executor.map(circuit, [CallTask("add", (partial, partial))])
        register = time.perf_counter() - started - executor.stats.run_seconds[0]
        chunk_trip, _ = overhead(executor, circuit, chunk, 3)
        add_trip, _ = overhead(executor, circuit, CallTask("add", (partial, partial)), 3)
    return chunk_trip, add_trip, register


class JointRelease:
    """The 2-way joint release's chunks as the compute server builds them
    (``computeserver.release``): the clients' uploads written as containers and read back a
    chunk at a time, the key server's coins, this server's draws; built once, so every
    executor runs the same tasks."""

    def __init__(self, chunks: int, directory: Path):
        from feddpsyn.computeserver.release import UploadChunks, chunk_task
        from feddpsyn.crypto.blobs import pack_blobs
        from feddpsyn.crypto.joint_noise import (
            JointNoiseShape,
            compile_joint_release,
            encrypt_key_server_bits,
        )

        self.shape = JointNoiseShape(14, 7)
        started = time.perf_counter()
        self.compiled = compile_joint_release(RELEASE_CLIENTS, RELEASE_CELLS, RELEASE_K,
                                              self.shape, 2.0 ** -40)
        self.compiled.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
        compiled_s = time.perf_counter() - started
        directory.mkdir()
        self.compiled.server.save(directory / "server.zip")
        (directory / "evaluation_keys.bin").write_bytes(
            self.compiled.keys.evaluation.serialize())
        self.circuit = Circuit.of_files("bench-release", directory / "server.zip",
                                        directory / "evaluation_keys.bin")
        rng = np.random.default_rng(3)
        modulus = 1 << RELEASE_K
        self.masked = rng.integers(0, modulus, (RELEASE_CLIENTS, chunks, RELEASE_CELLS))
        masks = rng.integers(0, modulus, (RELEASE_CLIENTS, chunks, RELEASE_CELLS))
        paths = []
        for i in range(RELEASE_CLIENTS):
            blobs = []
            for c in range(chunks):
                args: list = [None] * (RELEASE_CLIENTS + 4)
                args[i] = self.masked[i][c]
                blobs.append(self.compiled.encrypt(*args)[i].serialize())
            paths.append(directory / f"client{i}.bin")
            paths[-1].write_bytes(pack_blobs(blobs))
        uploads = UploadChunks(paths, chunks)
        self.ks_bits = rng.integers(0, 2, (chunks, RELEASE_CELLS, self.shape.ciphertexts))
        select = np.ones(RELEASE_CELLS, dtype=np.int64)
        self.tasks = [chunk_task(uploads.chunk(c), masks.sum(axis=0)[c], select, RELEASE_K,
                                 shapes=[self.shape] * RELEASE_CELLS,
                                 columns=self.shape.ciphertexts,
                                 coins=encrypt_key_server_bits(self.compiled, RELEASE_CLIENTS,
                                                               self.ks_bits[c]).serialize())
                      for c in range(chunks)]
        print(f"2-way joint release: {chunks} chunks of {RELEASE_CELLS} cells, k = "
              f"{RELEASE_K}, {RELEASE_CLIENTS} clients, {self.shape.ciphertexts} encrypted "
              f"bits a cell ({RELEASE_CELLS * self.shape.ciphertexts} a chunk); compiled and "
              f"keyed in {compiled_s:.0f} s", flush=True)

    def run(self, executor) -> list[bytes]:
        return [out[0] for out in map_streamed(executor, self.circuit, iter(self.tasks),
                                               len(self.tasks))]

    def decrypted(self, outputs: list[bytes]) -> list[list[int]]:
        """Each chunk's decryption, checked against the plaintext circuit on its task's
        operands."""
        from concrete import fhe

        from feddpsyn.crypto.joint_noise import joint_release_plaintext

        out = []
        for c, (task, blob) in enumerate(zip(self.tasks, outputs)):
            got = np.asarray(self.compiled.decrypt(fhe.Value.deserialize(blob)), dtype=np.int64)
            weights, select, offset = task.arguments[RELEASE_CLIENTS + 1:]
            model = joint_release_plaintext([m[c] for m in self.masked], self.ks_bits[c],
                                            weights, select, offset, RELEASE_K)
            assert np.array_equal(got % (1 << (RELEASE_K + 1)), model), \
                f"release chunk {c} differs from the plaintext circuit"
            out.append(got.tolist())
        return out


class JointScores:
    """noisy-greedy's joint score calls as ``computeserver.noisy_greedy`` builds them: each
    pair's encrypted score, the key server's encrypted bits a, this server's bits b; one
    ``map``."""

    def __init__(self, pairs: int, directory: Path):
        from feddpsyn.crypto.joint_noise import draw_bits
        from feddpsyn.crypto.noisy_scores import NoisyScoreShape, compile_noisy_scores
        from feddpsyn.dp.joint_noise_accounting import JointNoiseShape

        self.shape = NoisyScoreShape(count_bits=K, chunk_sizes=(2,), score_bits=SCORE_DIGITS,
                                     noise_bits=1,
                                     joint=JointNoiseShape(SCORE_UNIFORMS, SCORE_UNIFORM_BITS))
        started = time.perf_counter()
        self.module = compile_noisy_scores(self.shape, 2.0 ** -40)
        self.module.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
        compiled_s = time.perf_counter() - started
        directory.mkdir()
        self.module.server.save(directory / "server.zip")
        (directory / "keys.bin").write_bytes(self.module.keys.evaluation.serialize())
        self.circuit = Circuit.of_files("bench-scores", directory / "server.zip",
                                        directory / "keys.bin")
        rng = np.random.default_rng(4)
        bits = self.shape.joint.ciphertexts
        self.scores = [int(x) for x in rng.integers(0, 1 << SCORE_DIGITS, pairs)]
        self.a = rng.integers(0, 2, (pairs, bits))
        self.b = draw_bits(pairs, self.shape.joint)
        joint = self.module.joint
        self.tasks = [CallTask("joint", (
            joint.encrypt(np.array([(x >> j) & 1 for j in range(SCORE_DIGITS)]), None,
                          None)[0].serialize(),
            joint.encrypt(None, a, None)[1].serialize(), b))
            for x, a, b in zip(self.scores, self.a, self.b)]
        print(f"joint scores: {pairs} pairs, {SCORE_DIGITS} score digits, "
              f"{SCORE_UNIFORMS} x {SCORE_UNIFORM_BITS}-bit uniforms "
              f"({joint.statistics['programmable_bootstrap_count']} bootstraps a call); "
              f"compiled and keyed in {compiled_s:.0f} s", flush=True)

    def run(self, executor) -> list[bytes]:
        return [out[0] for out in executor.map(self.circuit, self.tasks)]

    def decrypted(self, outputs: list[bytes]) -> list[list[int]]:
        """Each call's digits, checked against the plaintext model."""
        from concrete import fhe

        from feddpsyn.crypto.noisy_scores import joint_score_plaintext

        out = []
        for x, a, b, blob in zip(self.scores, self.a, self.b, outputs):
            digits = self.module.joint.decrypt(fhe.Value.deserialize(blob)).tolist()
            assert digits == joint_score_plaintext(x, a, b, self.shape), \
                "a joint score differs from the plaintext model"
            out.append(digits)
        return out


def joint_steps(executors: dict, steps: dict, repeats: int) -> dict[str, dict[str, list]]:
    """Seconds of each step (``JointRelease``, ``JointScores``) on each executor, per repeat,
    the executors alternating as P2's do; every executor's decryptions equal the in-process
    ones. Each executor's workers load each circuit before anything is timed: a task per
    worker (the first call with a process's new keys costs several later ones)."""
    names = list(executors)
    for step in steps.values():
        for executor in executors.values():
            executor.map(step.circuit, step.tasks[:1] * executor.width)
    seconds: dict[str, dict[str, list]] = {s: {n: [] for n in names} for s in steps}
    reference: dict[str, list] = {}
    for repeat in range(repeats):
        for name in (names if repeat % 2 == 0 else names[::-1]):
            for label, step in steps.items():
                started = time.perf_counter()
                outputs = step.run(executors[name])
                seconds[label][name].append(time.perf_counter() - started)
                got = step.decrypted(outputs)
                assert reference.setdefault(label, got) == got, \
                    f"{name}: the {label} decrypts to other values"
        print(f"repeat {repeat}: " + "; ".join(
            f"{label} " + ", ".join(f"{n} {seconds[label][n][-1]:.1f} s" for n in names)
            for label in steps), flush=True)
    return seconds


ADULT_ROUNDS = 15


def adult_plan():
    """Adult's session plan at the default parameter set, em with ``ADULT_ROUNDS`` rounds, a
    public bound of 50,000 rows."""
    from feddpsyn.demo import dataset
    from feddpsyn.params.modes import SelectionMode
    from feddpsyn.params.plan_request import PlanRequest
    from feddpsyn.params.schema import Schema
    from feddpsyn.params.session_plan import SessionPlan

    return SessionPlan.build(PlanRequest(Schema.load(dataset("adult").schema), 1.0, 1e-5,
                                         50_000, selection=SelectionMode.EM,
                                         rounds=ADULT_ROUNDS, noise="two-server"))


def adult_p2() -> tuple[list[list[int]], int, int]:
    """Adult's chunk sizes per pair (the cut of ``SessionPlan``, :func:`adult_plan`) and its
    score digits."""
    plan = adult_plan()
    per_pair: dict[int, list[int]] = {}
    for index, _, size in plan.indif_chunks():
        per_pair.setdefault(index, []).append(size)
    return ([per_pair[i] for i in sorted(per_pair)], plan.selection.indif_bits,
            plan.selection.score_bits)


def longest_first(costs: list[float], workers: int) -> float:
    """Makespan of list scheduling, longest task first, on ``workers`` workers."""
    finish = [0.0] * workers
    for cost in sorted(costs, reverse=True):
        i = finish.index(min(finish))
        finish[i] += cost
    return max(finish)


def add_levels(sizes: list[int]) -> list[int]:
    """Adds per level of ``map_summed``'s tree over groups of these sizes."""
    levels = []
    while max(sizes) > 1:  # bounded: every group halves
        levels.append(sum(n // 2 for n in sizes))
        sizes = [n // 2 + n % 2 for n in sizes]
    return levels


# The key server's offline job: the default parameter set's chunk, and a joint noise of 128
# encrypted bits a cell (Adult's plans carry 126-130 on their releases: docs/scale.md).
KS_K, KS_CELLS, KS_COLUMNS = 20, 128, 128


class KeyServerOffline:
    """The key server's offline job as ``keyserver.coins`` and ``keyserver.uploads`` run it,
    on a session folder written as the key server writes one (``keyserver.keys``, 0600)."""

    def __init__(self, coin_chunks: int, upload_chunks: int, directory: Path):
        from feddpsyn.crypto.joint_noise import JointNoiseShape, compile_joint_release
        from feddpsyn.keyserver.keys import SessionKeys, _keys_for
        from feddpsyn.keyserver.offline_pool import KeyFiles

        started = time.perf_counter()
        self.compiled = compile_joint_release(1, KS_CELLS, KS_K,
                                              JointNoiseShape(KS_COLUMNS // 2, 2), 2.0 ** -40)
        self.client, _, _ = _keys_for(self.compiled, directory, "")
        compiled_s = time.perf_counter() - started
        self.files = KeyFiles(SessionKeys.load, str(directory), (1, True))
        self.coin_chunks = coin_chunks
        # Uniform stand-ins for a client's masked vector (data, not noise).
        self.masked = np.random.default_rng(5).integers(0, 1 << KS_K,
                                                        (upload_chunks, KS_CELLS))
        print(f"key server's offline job: {coin_chunks} chunks of the joint noise's bits "
              f"({KS_CELLS} cells x {KS_COLUMNS} bits), a client's masked vector of "
              f"{upload_chunks} chunks, k = {KS_K}; compiled and keyed in {compiled_s:.0f} s",
              flush=True)

    def run(self, pool) -> tuple[list[bytes], list[bytes], float]:
        """(coin sets, upload chunks, CPU span): the coins a pass of one chunk a worker, as
        ``JointCoins.prepare_one``; the upload in one map, as ``MaskedUploads``. The CPU
        span is the busiest worker's CPU seconds per map, summed: the job's length had every
        worker a core of its own."""
        from feddpsyn.keyserver.coins import DrawAndEncryptCoins
        from feddpsyn.keyserver.offline_pool import split_evenly
        from feddpsyn.keyserver.uploads import EncryptMaskedChunks

        span = 0.0

        def mapped(tasks: list, what: str) -> list[list[bytes]]:
            nonlocal span
            out = pool.map(self.files, tasks, what)
            by_pid: dict[int, float] = {}
            for pid, cpu in zip(pool.last_pids, pool.last_cpu_seconds):
                by_pid[pid] = by_pid.get(pid, 0.0) + cpu
            span += max(by_pid.values(), default=0.0)
            return out

        task = DrawAndEncryptCoins(KS_CELLS, KS_COLUMNS)
        coins = []
        for start in range(0, self.coin_chunks, pool.workers):  # bounded: the passes
            count = min(pool.workers, self.coin_chunks - start)
            coins += [out[0] for out in mapped([task] * count, "coins")]
        groups = split_evenly(list(self.masked), pool.workers)
        uploads = mapped([EncryptMaskedChunks(0, tuple(g)) for g in groups], "upload")
        return coins, [blob for group in uploads for blob in group], span

    def check(self, coins: list[bytes], uploads: list[bytes]) -> None:
        """The first coin set and upload chunk through P1, weight 1 on one bit a cell."""
        from concrete import fhe

        assert len(set(coins)) == len(coins) == self.coin_chunks
        assert len(uploads) == len(self.masked)
        weights = np.zeros((KS_CELLS, KS_COLUMNS), dtype=np.int64)
        weights[np.arange(KS_CELLS), (7 * np.arange(KS_CELLS)) % KS_COLUMNS] = 1
        out = self.compiled.server.run(
            fhe.Value.deserialize(uploads[0]), fhe.Value.deserialize(coins[0]), weights,
            np.ones(KS_CELLS, dtype=np.int64), np.zeros(KS_CELLS, dtype=np.int64),
            evaluation_keys=self.client.evaluation_keys)
        bits = (np.asarray(self.client.decrypt(out), dtype=np.int64) - self.masked[0]) \
            % (1 << KS_K)
        assert set(bits.tolist()) <= {0, 1} and 0 < bits.sum() < KS_CELLS, \
            "the key server's ciphertexts do not decrypt to the upload plus a bit"


def keyserver_offline_step(coin_chunks: int, upload_chunks: int, directory: Path,
                           repeats: int) -> tuple[dict[str, list[float]],
                                                  dict[str, list[float]]]:
    """Seconds and CPU spans (``KeyServerOffline.run``) of the key server's offline job
    with ``--workers 1`` and 2, per repeat, alternating; each pool's workers spawned and
    keyed before anything is timed."""
    from feddpsyn.keyserver.offline_pool import OfflinePool
    from feddpsyn.keyserver.uploads import EncryptMaskedChunks

    step = KeyServerOffline(coin_chunks, upload_chunks, directory)
    pools = {"--workers 1": OfflinePool(1), "2 workers": OfflinePool(2)}
    seconds: dict[str, list[float]] = {name: [] for name in pools}
    spans: dict[str, list[float]] = {name: [] for name in pools}
    try:
        for pool in pools.values():
            pool.map(step.files, [EncryptMaskedChunks(0, (step.masked[0],))] * 2, "warm-up")
        names = list(pools)
        for repeat in range(repeats):
            for name in (names if repeat % 2 == 0 else names[::-1]):
                started = time.perf_counter()
                coins, uploads, span = step.run(pools[name])
                seconds[name].append(time.perf_counter() - started)
                spans[name].append(span)
                if repeat == 0:  # each executor's first run
                    step.check(coins, uploads)
            print(f"repeat {repeat}: key server's offline job "
                  + ", ".join(f"{n} {seconds[n][-1]:.1f} s (CPU span {spans[n][-1]:.1f} s)"
                              for n in names), flush=True)
    finally:
        for pool in pools.values():
            pool.close()
    return seconds, spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few minutes")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--candidates", type=int, default=6)
    parser.add_argument("--batch", type=int, default=3,
                        help="candidates a P3 batch holds at most here")
    parser.add_argument("--release-chunks", type=int, default=None,
                        help="chunks of the 2-way joint release (default 8, --quick 6)")
    parser.add_argument("--score-pairs", type=int, default=None,
                        help="joint score calls (default 16, --quick 8)")
    parser.add_argument("--adult-batch", type=int, default=None,
                        help="candidates a P3 batch holds at most in the Adult model "
                             "(default: the session plan's layout)")
    parser.add_argument("--ks-coin-chunks", type=int, default=None,
                        help="chunks of the key server's joint-noise bits (default 8, "
                             "--quick 4)")
    parser.add_argument("--ks-upload-chunks", type=int, default=None,
                        help="chunks of the client vector the key server encrypts (default "
                             "48, Adult's vector; --quick 24)")
    args = parser.parse_args()
    pairs = PAIRS["quick" if args.quick else "full"]
    rounds = args.rounds or (1 if args.quick else 3)
    repeats = args.repeats or (1 if args.quick else 2)
    chunks = sum(pairs)

    directory = Path(tempfile.mkdtemp(prefix="scaleout-"))
    module, selection, layout = build(args.candidates, args.batch, directory)
    circuit = Circuit.of_files("bench", directory / "server.zip", directory / "keys.bin")
    groups, exact = chunk_groups(module, pairs, seed=1)
    pair_tasks = [PairTask(tuple(group)) for group in groups]
    executors = {"in-process (2 threads)": InProcessExecutor(),
                 "1 worker": LocalPoolExecutor(workers=1, threads=1),
                 "2 workers": LocalPoolExecutor(workers=2, threads=1)}
    print(f"P2: {len(pairs)} pairs of {pairs} chunks: {chunks} chunk tasks and "
          f"{chunks - len(pairs)} adds", flush=True)
    # Warm-up: every worker process spawned and keyed before anything is timed.
    loads = {}
    for name, executor in executors.items():
        started = time.perf_counter()
        executor.map(circuit, [groups[0][0]] * 2)
        loads[name] = (time.perf_counter() - started, dict(executor.stats.load_seconds))
        print(f"warm-up {name}: {loads[name][0]:.1f} s (key load per process: "
              f"{', '.join(f'{s:.2f} s' for s in loads[name][1].values()) or 'cached'})",
              flush=True)

    p2: dict[str, list[float]] = {name: [] for name in executors}
    p2_per_pair: list[float] = []
    inside: dict[str, list[float]] = {name: [] for name in executors}
    cpu: dict[str, list[tuple[float, float]]] = {name: [] for name in executors}
    p3: dict[str, list[float]] = {name: [] for name in executors}
    p3_batched: dict[str, list[float]] = {name: [] for name in executors}
    p3_batched_inside: dict[str, list[float]] = {name: [] for name in executors}
    reference_hots: list[list[int]] = []
    names = list(executors)
    selects = None
    for repeat in range(repeats):
        for name in (names if repeat % 2 == 0 else names[::-1]):
            executor = executors[name]
            recording = Recording(executor)
            started = time.perf_counter()
            scores = map_summed(recording, circuit, groups, "add")
            p2[name].append(time.perf_counter() - started)
            inside[name].append(sum(recording.run_seconds))
            cpu[name].append((recording.cpu_total(), recording.cpu_makespan()))
            assert [decode(module, s) for s in scores] == exact, \
                f"{name}: a score differs from the clear InDif"
            if name == "2 workers":
                started = time.perf_counter()
                whole = executor.map(circuit, pair_tasks)
                p2_per_pair.append(time.perf_counter() - started)
                assert [decode(module, out[0]) for out in whole] == exact
            if selects is None:
                candidates = (scores * args.candidates)[:args.candidates]
                selects = [select_round(module, selection, layout, candidates)
                           for _ in range(rounds)]
            for r, (task, batched) in enumerate(selects):
                started = time.perf_counter()
                outputs = executor.map(circuit, [task])[0]
                p3[name].append(time.perf_counter() - started)
                hot = one_hot(module, outputs)
                assert sum(hot) == 1
                if len(reference_hots) <= r:
                    reference_hots.append(hot)
                assert hot == reference_hots[r], f"{name}: a P3 output differs"
                recording = Recording(executor)
                started = time.perf_counter()
                outputs = batched_select(recording, circuit, layout, *batched)
                p3_batched[name].append(time.perf_counter() - started)
                p3_batched_inside[name].append(sum(recording.run_seconds))
                assert batched_one_hot(module, layout, outputs) == hot, \
                    f"{name}: the batched round differs from the single call"
            print(f"repeat {repeat} {name}: P2 {p2[name][-1]:.1f} s ({inside[name][-1]:.1f} s "
                  f"inside concrete)"
                  + (f" (one task per pair: {p2_per_pair[-1]:.1f} s)" if name == "2 workers"
                     else "")
                  + f", P3 {np.mean(p3[name][-rounds:]):.1f} s a call, "
                  f"{np.mean(p3_batched[name][-rounds:]):.1f} s a batched round", flush=True)

    joint = joint_steps(executors, {
        "2-way joint release": JointRelease(args.release_chunks or (6 if args.quick else 8),
                                            directory / "release"),
        "joint scores": JointScores(args.score_pairs or (8 if args.quick else 16),
                                    directory / "scores")}, repeats)

    # Per-task overhead, apart from the timings above.
    from concrete import fhe

    task = groups[0][0]
    started = time.perf_counter()
    blob = pickle.dumps(task)
    pickle.loads(blob)
    pickling = time.perf_counter() - started
    value = fhe.Value.deserialize(task.arguments[0])
    started = time.perf_counter()
    for _ in range(10):
        fhe.Value.deserialize(value.serialize())
    value_codec = (time.perf_counter() - started) / 10
    one_trip, chunk_seconds = overhead(executors["1 worker"], circuit, task, 3)
    partial = executors["1 worker"].map(circuit, [task])[0][0]
    add_trip, add_seconds = overhead(executors["1 worker"], circuit,
                                     CallTask("add", (partial, partial)), 3)
    for executor in executors.values():
        executor.close()
    dask_trip, dask_add_trip, dask_register = dask_overhead(circuit, task, partial)

    p2_median = {n: float(np.median(v)) for n, v in p2.items()}
    p3_median = {n: float(np.median(v)) for n, v in p3.items()}
    per_pair_median = float(np.median(p2_per_pair))
    load = max(loads["2 workers"][1].values(), default=0.0)
    print(f"\nP2 ({chunks} chunks + {chunks - len(pairs)} adds, median of {repeats}): "
          + ", ".join(f"{n} {s:.1f} s" for n, s in p2_median.items())
          + f"; 2 workers, one task per pair: {per_pair_median:.1f} s")
    p3_batched_median = {n: float(np.median(v)) for n, v in p3_batched.items()}
    print("P3 (one call a round, median): "
          + ", ".join(f"{n} {s:.1f} s" for n, s in p3_median.items()))
    print(f"P3 by candidate batches ({layout.count} batches of {layout.size}, "
          f"{3 * layout.count + 2} tasks in 5 steps, median): "
          + ", ".join(f"{n} {s:.1f} s" for n, s in p3_batched_median.items()))
    p3_speedup = p3_batched_median["1 worker"] / p3_batched_median["2 workers"]
    print(f"P3 one call a round, 2 workers vs 1: "
          f"x{p3_median['1 worker'] / p3_median['2 workers']:.2f} (same run)")
    joint_median = {label: {n: float(np.median(v)) for n, v in by_name.items()}
                    for label, by_name in joint.items()}
    for label, medians in joint_median.items():
        print(f"{label} (median of {repeats}): "
              + ", ".join(f"{n} {s:.1f} s" for n, s in medians.items()))
    print(f"overhead per task: task pickle {len(blob) / 1e3:.1f} KB in {pickling * 1e3:.2f} ms, "
          f"one ciphertext serialise+parse {value_codec * 1e3:.2f} ms, round trip on a warm "
          f"worker process outside concrete {one_trip * 1e3:.1f} ms a chunk task, "
          f"{add_trip * 1e3:.1f} ms an add; key load {load:.2f} s per worker process, once")
    print(f"overhead per task on a one-worker Dask cluster on loopback: {dask_trip * 1e3:.1f} "
          f"ms a chunk task, {dask_add_trip * 1e3:.1f} ms an add; circuit to the worker "
          f"(plugin, transfer, load) {dask_register:.2f} s, once")
    print(f"task time on one worker, one thread: chunk {chunk_seconds:.2f} s, add "
          f"{add_seconds:.2f} s; overhead / task time {one_trip / chunk_seconds:.2%} (chunk), "
          f"{add_trip / add_seconds:.2%} (add)")
    # Contention made visible: a worker whose core is shared takes longer inside concrete.
    cores_got = float(np.median(inside["2 workers"])) / p2_median["2 workers"]
    slower = float(np.median(inside["2 workers"])) / float(np.median(inside["1 worker"]))
    print(f"P2 2 workers: busy inside concrete {cores_got:.2f} worker-seconds a second; the "
          f"same tasks took x{slower:.2f} as long inside concrete as on 1 worker, so the two "
          f"together computed at most x{2 / slower:.2f} the 1-worker run's rate")
    # What the schedule gives when each worker has a core: CPU seconds, not wall.
    one_cpu = float(np.median([total for total, _ in cpu["1 worker"]]))
    two_total = float(np.median([total for total, _ in cpu["2 workers"]]))
    two_span = float(np.median([span for _, span in cpu["2 workers"]]))
    print(f"P2 in CPU seconds (each task's worker process; one OpenMP thread): 1 worker "
          f"{one_cpu:.1f} s, 2 workers {two_total:.1f} s in all (x{two_total / one_cpu:.2f}), "
          f"busiest worker per level summed {two_span:.1f} s: with a core per worker the "
          f"schedule gives x{one_cpu / two_span:.2f} (CPU-time speed-up, not a wall-clock one)")
    print(f"P2 2 workers: chunk tasks vs one task per pair x{per_pair_median / p2_median['2 workers']:.2f}, "
          f"vs in-process default x{p2_median['in-process (2 threads)'] / p2_median['2 workers']:.2f}; "
          f"P3 2 workers vs in-process x{p3_median['in-process (2 threads)'] / p3_median['2 workers']:.2f}")

    offline, offline_spans = keyserver_offline_step(
        args.ks_coin_chunks or (4 if args.quick else 8),
        args.ks_upload_chunks or (24 if args.quick else 48), directory / "keyserver", repeats)
    offline_median = {n: float(np.median(v)) for n, v in offline.items()}
    span_median = {n: float(np.median(v)) for n, v in offline_spans.items()}
    print(f"key server's offline job (median of {repeats}): "
          + ", ".join(f"{n} {s:.1f} s" for n, s in offline_median.items())
          + f"; in CPU seconds, --workers 1 {span_median['--workers 1']:.1f} s, 2 workers' "
          f"busiest per pass summed {span_median['2 workers']:.1f} s: with a core per worker "
          f"x{span_median['--workers 1'] / span_median['2 workers']:.2f} (a CPU-time "
          "speed-up, not a wall-clock one)")

    # The model (module docstring), applied to Adult's P2.
    from feddpsyn.crypto.indif import chunk_bootstraps

    adult, k_adult, digits_adult = adult_p2()
    measured = chunk_bootstraps(CHUNK, K)
    chunk_cost = {size: chunk_seconds * chunk_bootstraps(size, k_adult) / measured
                  for size in {s for pair in adult for s in pair}}
    add_cost = add_seconds * (2 * digits_adult - 1) / (2 * selection.score_bits - 1)
    o = max(one_trip, add_trip, dask_trip, dask_add_trip)  # the dearest measured
    costs = [chunk_cost[s] for pair in adult for s in pair]
    levels = add_levels([len(pair) for pair in adult])
    pair_costs = [sum(chunk_cost[s] for s in pair) + (len(pair) - 1) * add_cost + o
                  for pair in adult]
    print(f"\nMODEL (not a measurement): Adult's P2, {len(adult)} pairs, {len(costs)} chunks "
          f"(k = {k_adult}); t = {min(chunk_cost.values()):.2f}-{max(chunk_cost.values()):.2f} s "
          f"a chunk, {add_cost:.2f} s an add ({sum(levels)} adds in {len(levels)} levels), "
          f"o = {o * 1e3:.0f} ms a task (the dearest measured), L = "
          f"{max(load, dask_register):.1f} s; one thread a core")
    for cores in (2, 16, 64, 192):
        chunk_step = longest_first([c + o for c in costs], cores)
        add_step = sum(math.ceil(n / cores) * (add_cost + o) for n in levels)
        minutes = (chunk_step + add_step + max(load, dask_register)) / 60
        per_pair = (longest_first(pair_costs, cores) + max(load, dask_register)) / 60
        busy = sum(costs) + sum(levels) * add_cost
        share = o * (len(costs) + sum(levels)) / busy
        print(f"  {cores:>3} cores: P2 {minutes:.1f} min (one task per pair: {per_pair:.1f} "
              f"min); overhead {share:.2%} of task time ({o / add_cost:.2%} on an add, the "
              f"smallest task)")
    p2_minutes = {}
    for cores in (2, 16, 64, 192):
        chunk_step = longest_first([c + o for c in costs], cores)
        add_step = sum(math.ceil(n / cores) * (add_cost + o) for n in levels)
        p2_minutes[cores] = (chunk_step + add_step + max(load, dask_register)) / 60

    # P3 (module docstring): seconds per bootstrap measured on one worker, one thread.
    from feddpsyn.crypto.selection_batches import batch_layout
    from feddpsyn.crypto.selection_cost import batched_pbs_estimate, pbs_estimate

    batched_spb = (float(np.median(p3_batched_inside["1 worker"]))
                   / batched_bootstraps(module, layout))
    single_spb = (float(np.median(p3["1 worker"]))
                  / module.select.statistics["programmable_bootstrap_count"])
    adult_selection = adult_plan().selection
    adult_shape = adult_selection.shape
    adult_layout = (adult_selection.batches if args.adult_batch is None
                    else batch_layout(adult_shape.candidates, args.adult_batch))
    per_call = batched_pbs_estimate(adult_shape, adult_layout)
    single_round = pbs_estimate(adult_shape) * single_spb + o
    print(f"\nMODEL (not a measurement): Adult's P3, {ADULT_ROUNDS} rounds over "
          f"{adult_shape.candidates} candidates ({adult_shape.score_bits} score digits, n_b = "
          f"{adult_shape.nb}); by batches: {adult_layout.count} batches of {adult_layout.size}, "
          f"{per_call['round']:,} bootstraps a round (one call: {pbs_estimate(adult_shape):,}); "
          f"{batched_spb * 1e3:.1f} ms a bootstrap in the batched functions, "
          f"{single_spb * 1e3:.1f} ms in the one call (measured here, one worker); o = "
          f"{o * 1e3:.0f} ms a task")
    for cores in (2, 16, 64, 192):
        waves = math.ceil(adult_layout.count / cores)
        round_s = (waves * (per_call["maximum"] + per_call["pick"] + per_call["mask"])
                   * batched_spb + 3 * waves * o
                   + (per_call["combine_maximum"] + per_call["least"]) * batched_spb + 2 * o)
        share = o * (3 * adult_layout.count + 2) / (per_call["round"] * batched_spb)
        p3_min = ADULT_ROUNDS * round_s / 60
        print(f"  {cores:>3} cores: P3 {p3_min:.1f} min by batches ({round_s:.0f} s a round; "
              f"overhead {share:.2%} of task time), one call a round "
              f"{ADULT_ROUNDS * single_round / 60:.1f} min; online phase P2 + P3 "
              f"{p2_minutes[cores] + p3_min:.1f} min (one call a round: "
              f"{p2_minutes[cores] + ADULT_ROUNDS * single_round / 60:.1f} min)")
    print(f"  compare FedDPSyn {FEDDPSYN_A6000_MIN} min (A6000), Fu et al. {FU_ET_AL_MIN} min "
          f"(WAN); the model gives each worker a core of its own and one OpenMP thread")
    # One line a step, 1 worker's median over 2 workers' (same run).
    print(f"speedup 2 workers: {p2_median['1 worker'] / p2_median['2 workers']:.2f} "
          f"(P2 scores: chunk tasks and adds)")
    print(f"speedup 2 workers: {p3_speedup:.2f} (P3 by candidate batches)")
    for label, medians in joint_median.items():
        print(f"speedup 2 workers: {medians['1 worker'] / medians['2 workers']:.2f} "
              f"({label})")
    print(f"speedup 2 workers: "
          f"{offline_median['--workers 1'] / offline_median['2 workers']:.2f} "
          f"(key server's offline job: coins and encryption)")


if __name__ == "__main__":
    main()
