"""Where the compute server's encrypted work runs: in this process, in local worker processes,
or on a Dask cluster, behind one interface.

Design concerns:

* **Pure tasks, same answer anywhere.** A task is one call of a module function: one chunk of
  a pair's P2, one encrypted add of two partial scores, a P3 round or one step of a P3
  batch (``computeserver.selection.batched_select``), a noisy score, one chunk of a release
  (``computeserver.release``). It takes
  serialized ciphertexts and clear arrays and returns serialized ciphertexts; nothing else
  is read or written. So the same ciphertexts in give the same decryptions out whatever the
  executor (not the same bytes: measured, a call repeated in one process gives the same
  bytes, the same call in another process other bytes, with one OpenMP thread or two; only
  the noise differs), and a task whose worker died is simply run
  again: the session's stored state is written by the compute server only after every task
  of a step has answered.
* **The chunk is the scheduling unit, not the pair; the candidate batch, not the round.** A
  pair's P2 is its chunks' calls, then a tree of encrypted adds (:func:`map_summed`) whose
  shape depends only on the chunk count, so where the calls ran changes no decryption. With
  one task per pair, the largest pair (Adult: 21 of 453 chunks, 5% of P2) would bound P2
  from about 20 cores on. A P3 round is one task per batch in each of its batch steps
  (``computeserver.selection.batched_select``).
* **A step's inputs in windows when they are large.** :func:`map_streamed` takes a step's
  tasks from an iterator one window at a time (as many as the executor runs at once), so the
  server holds the arguments of one window, not of the whole step: a release reads its
  chunks' ciphertexts and fetches their coins only as their window comes up.
* **Evaluation keys only, loaded once per worker.** A worker receives the session's compiled
  server and evaluation keys (never a secret key: the compute server has none) and keeps
  them per process, keyed by session and the digest of both files, so a task carries only
  its ciphertexts. concrete's ``Server``, ``EvaluationKeys`` and ``Value`` do not pickle,
  so everything crosses a process boundary as bytes.
* **One core's worth of threads per worker process.** concrete's ``run`` parallelises its
  loops with OpenMP, which by default starts one thread per core in every process; worker
  processes sharing a machine then contend. A local worker sets ``OMP_NUM_THREADS`` before
  concrete is first imported in it, which is why this module imports concrete only inside
  functions; Dask's nanny sets the same variable to 1 for its workers by default.
* **A dead worker's pipe must not kill the parent.** concrete's runtime (HPX), started by the
  first circuit run in a process, replaces the process's SIGPIPE disposition (Python ignores
  SIGPIPE) with a handler that aborts: a pool's feeder thread writing to a worker that was
  just killed then took the whole test process down (a core dump showed it). Every process
  that runs tasks or feeds workers ignores SIGPIPE again (:func:`ignore_sigpipe`), so a
  broken pipe is an ``EPIPE`` error, as Python expects.
* **Fork is never used.** A fork-based pool hangs once concrete is initialised in the parent
  (measured); local workers are spawned.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Protocol

import numpy as np

from feddpsyn.common.sigpipe import ignore_sigpipe

__all__ = ["Circuit", "CallTask", "Executor", "InProcessExecutor", "LocalPoolExecutor",
           "map_summed", "map_streamed", "TaskStats", "run_task", "ignore_sigpipe"]

log = logging.getLogger("feddpsyn.computeserver")

# A clear argument is a numpy array; an encrypted one the bytes of a serialized fhe.Value.
Argument = bytes | np.ndarray


@dataclass(frozen=True)
class Circuit:
    """A session's compiled server and evaluation keys, as files on the compute server.

    ``digest`` names the pair of files: a worker's cache is keyed by (session, digest), so a
    re-keyed session can never run on stale keys."""

    session_id: str
    server_path: str
    keys_path: str
    digest: str

    @classmethod
    def of_files(cls, session_id: str, server_path: Path, keys_path: Path) -> Circuit:
        sha = hashlib.sha256()
        for path in (server_path, keys_path):
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 22), b""):
                    sha.update(block)
        return cls(session_id, str(server_path), str(keys_path), sha.hexdigest())

    def payload(self) -> tuple[bytes, bytes]:
        """The bytes a remote worker needs (it cannot read this server's files)."""
        return Path(self.server_path).read_bytes(), Path(self.keys_path).read_bytes()

    def remote(self) -> Circuit:
        """This circuit as a remote worker names it: no paths of this machine."""
        return Circuit(self.session_id, "", "", self.digest)


@dataclass(frozen=True)
class CallTask:
    """One call of a module function (a P2 chunk's ``indif_<s>``, an ``add``, a P3 round's
    ``select`` or one of its batch steps, a noisy score's ``noise``), or, with ``function``
    None, of a single-function circuit's one function (a release chunk's P1); returns its
    outputs serialized, always as a tuple."""

    function: str | None
    arguments: tuple[Argument, ...]

    def run(self, server, keys) -> tuple[bytes, ...]:
        from concrete import fhe

        args = [fhe.Value.deserialize(a) if isinstance(a, bytes) else a
                for a in self.arguments]
        out = server.run(*args, evaluation_keys=keys, function_name=self.function)
        return tuple(v.serialize() for v in (out if isinstance(out, tuple) else (out,)))


@dataclass
class TaskStats:
    """What one ``map`` cost: per task, seconds inside concrete on its worker and seconds
    from submission to result here (the difference is scheduling, transfer and
    serialisation), CPU seconds its process got meanwhile and the process; per worker
    process, seconds spent loading the circuit."""

    run_seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    wall_seconds: list[float] = field(default_factory=list)
    load_seconds: dict[int, float] = field(default_factory=dict)
    retries: int = 0

    def record(self, run_s: float, cpu_s: float, pid: int) -> None:
        self.run_seconds.append(run_s)
        self.cpu_seconds.append(cpu_s)
        self.pids.append(pid)


# ---------------------------------------------------------------- worker side
# Per process: (session, digest) -> (server, keys). Module-level so that every task a worker
# process runs shares it; the lock keeps two threads of one process from loading twice.
_LOADED: dict[tuple[str, str], tuple] = {}
# Per Dask worker process: (session, digest) -> the circuit's bytes
# (``computeserver.dask_executor.CircuitPlugin``).
_PAYLOADS: dict[tuple[str, str], tuple[bytes, bytes]] = {}
_LOAD_LOCK = threading.Lock()


def _load(circuit: Circuit) -> tuple[tuple, float]:
    """The circuit's (server, keys) in this process, and the seconds this call spent loading
    them (0 when cached): from its files, or from the bytes a Dask plugin left here."""
    with _LOAD_LOCK:
        key = (circuit.session_id, circuit.digest)
        if key in _LOADED:
            return _LOADED[key], 0.0
        from concrete import fhe

        payload = _PAYLOADS.get(key)
        if payload is None and not circuit.server_path:
            raise RuntimeError(f"session {circuit.session_id}: this worker has no copy of "
                               "the circuit")

        started = time.perf_counter()
        if payload is None:
            server = fhe.Server.load(circuit.server_path)
            keys = fhe.EvaluationKeys.deserialize(Path(circuit.keys_path).read_bytes())
        else:
            # fhe.Server.load reads a path only; the file lives for the load and no longer.
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "server.zip"
                path.write_bytes(payload[0])
                server = fhe.Server.load(path)
            keys = fhe.EvaluationKeys.deserialize(payload[1])
        _LOADED[key] = (server, keys)
        return _LOADED[key], time.perf_counter() - started


def run_task(circuit: Circuit, task: CallTask) -> tuple[object, float, float, float, int]:
    """Run one task where this is called: (result, run seconds, CPU seconds of this process
    meanwhile, load seconds, process id). The CPU seconds are the task's own in a worker
    with one OpenMP thread and one task at a time; a shared core shows as run > CPU."""
    (server, keys), loaded = _load(circuit)
    started, cpu = time.perf_counter(), time.process_time()
    result = task.run(server, keys)
    ignore_sigpipe()  # concrete's runtime may have started in this call
    return (result, time.perf_counter() - started, time.process_time() - cpu, loaded,
            os.getpid())


def _pin_threads(threads: int) -> None:
    """A spawned worker's initializer: runs before concrete is imported in the process."""
    for name in ("OMP_NUM_THREADS", "RAYON_NUM_THREADS"):
        os.environ[name] = str(threads)


# ---------------------------------------------------------------- the interface
Progress = Callable[[int, int], None]


class Executor(Protocol):
    """Runs a step's tasks and returns their results in task order."""

    description: str

    @property
    def width(self) -> int:
        """How many tasks it runs at once (threads, worker processes, or the cluster's
        worker threads now)."""

    def map(self, circuit: Circuit, tasks: Sequence[CallTask],
            progress: Progress | None = None) -> list:
        """Every task's result, in order; ``progress(done, total)`` after each one."""

    def close(self) -> None:
        """Release workers (idempotent)."""


def _collect(futures: dict[Future, int], total: int, results: list, stats: TaskStats,
             started: dict[int, float], progress: Progress | None, done: int) -> int:
    """Record finished futures' results (re-raising a task's own error); new ``done``."""
    for future in list(futures):
        if not future.done():
            continue
        index = futures.pop(future)
        result, run_s, cpu_s, load_s, pid = future.result()
        results[index] = result
        stats.record(run_s, cpu_s, pid)
        stats.wall_seconds.append(time.perf_counter() - started[index])
        if load_s:
            stats.load_seconds[pid] = stats.load_seconds.get(pid, 0.0) + load_s
        done += 1
        if progress is not None:
            progress(done, total)
    return done


class InProcessExecutor:
    """Threads in this process (the compute server's behaviour before workers existed):
    concrete parallelises a call's lookups but leaves a core idle during its sequential
    parts, so two tasks at a time fill a 2-core machine."""

    def __init__(self, threads: int | None = None):
        self.threads = threads or max(1, min(2, os.cpu_count() or 1))
        self.description = f"in-process, {self.threads} threads"
        self.stats = TaskStats()

    @property
    def width(self) -> int:
        return self.threads

    def map(self, circuit: Circuit, tasks: Sequence[CallTask],
            progress: Progress | None = None) -> list:
        self.stats = TaskStats()
        results: list = [None] * len(tasks)
        started = {i: time.perf_counter() for i in range(len(tasks))}
        with ThreadPoolExecutor(max_workers=self.threads) as pool:
            futures = {pool.submit(run_task, circuit, task): i for i, task in enumerate(tasks)}
            done = 0
            while futures:
                wait(list(futures), return_when=FIRST_COMPLETED)
                done = _collect(futures, len(tasks), results, self.stats, started, progress,
                                done)
        return results

    def close(self) -> None:
        pass


class LocalPoolExecutor:
    """Spawned worker processes on this machine, each with ``threads`` OpenMP threads.

    A worker that dies breaks a ``ProcessPoolExecutor`` as a whole: the pool is started again
    and every task without a result is submitted again (tasks are pure), at most
    ``max_restarts`` times per ``map``."""

    def __init__(self, workers: int | None = None, threads: int = 1, max_restarts: int = 3):
        self.workers = workers or (os.cpu_count() or 1)
        self.threads = threads
        self.max_restarts = max_restarts
        self.description = f"{self.workers} local worker processes, {threads} threads each"
        self.stats = TaskStats()
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    @property
    def width(self) -> int:
        return self.workers

    def _start(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_pin_threads, initargs=(self.threads,))
            return self._pool

    def worker_pids(self) -> list[int]:
        """The live worker processes (for a fault test or an operator's ``kill``)."""
        pool = self._pool
        return [] if pool is None else [p.pid for p in (pool._processes or {}).values()]

    def map(self, circuit: Circuit, tasks: Sequence[CallTask],
            progress: Progress | None = None) -> list:
        self.stats = TaskStats()
        ignore_sigpipe()  # this process feeds the workers' pipes
        results: list = [None] * len(tasks)
        pending = set(range(len(tasks)))
        done, restarts = 0, 0
        while pending:
            pool = self._start()
            started = {i: time.perf_counter() for i in pending}
            futures = {pool.submit(run_task, circuit, tasks[i]): i for i in sorted(pending)}
            try:
                while futures:
                    wait(list(futures), return_when=FIRST_COMPLETED)
                    done = _collect(futures, len(tasks), results, self.stats, started,
                                    progress, done)
            except BrokenProcessPool:
                restarts += 1
                self.stats.retries += len(futures)
                log.warning("a worker process died; %d unfinished tasks run again "
                            "(restart %d of %d)", len(futures), restarts, self.max_restarts)
                self._discard()
                if restarts > self.max_restarts:
                    raise RuntimeError(f"worker processes died {restarts} times in one step; "
                                       "giving up (no stored state was changed)") from None
            pending = {i for i in pending if results[i] is None}
        return results

    def _discard(self) -> None:
        """Stop the pool and its worker processes, also one busy with a task (tasks are pure,
        so nothing is lost); without the terminate, an idle worker could outlive the pool
        (seen once in the tests)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list((pool._processes or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join(timeout=10)

    def close(self) -> None:
        self._discard()


def map_summed(executor: Executor, circuit: Circuit, groups: Sequence[Sequence[CallTask]],
               add: str, progress: Progress | None = None) -> list[bytes]:
    """Each group's task outputs summed under encryption, one result per group: every task
    of every group in one ``map``, then each group's partial results added pairwise by the
    module function ``add`` (neighbours 0+1, 2+3, ...; an odd last one waits a level), one
    ``map`` per level of the tree for all groups at once. The tree's shape depends only on
    the group sizes, so the same tasks give the same decryptions whatever the executor.
    Each task returns one output; ``progress(done, total)`` counts calls and adds."""
    sizes = [len(group) for group in groups]
    if not sizes or min(sizes) < 1:
        raise ValueError("map_summed: one or more groups, each of one or more tasks")
    total = sum(sizes) * 2 - len(sizes)  # a group of n tasks needs n - 1 adds

    def offset_progress(base: int) -> Progress | None:
        return None if progress is None else (lambda done, _: progress(base + done, total))

    outputs = executor.map(circuit, [task for group in groups for task in group],
                           offset_progress(0))
    done = len(outputs)
    partials, start = [], 0
    for size in sizes:
        partials.append([out[0] for out in outputs[start:start + size]])
        start += size
    for _ in range(max(sizes).bit_length()):  # bounded: each level halves every group
        adds = [(g, i) for g, group in enumerate(partials) for i in range(0, len(group) - 1, 2)]
        if not adds:
            break
        sums = iter(executor.map(circuit, [CallTask(add, (partials[g][i], partials[g][i + 1]))
                                           for g, i in adds], offset_progress(done)))
        done += len(adds)
        partials = [[next(sums)[0] for _ in range(len(group) // 2)] + group[len(group) // 2 * 2:]
                    for group in partials]
    return [group[0] for group in partials]


def map_streamed(executor: Executor, circuit: Circuit, tasks: Iterator[CallTask], count: int,
                 progress: Progress | None = None) -> list:
    """The results of ``count`` tasks drawn from ``tasks``, in order: one ``map`` per window of
    as many tasks as the executor runs at once (its ``width``, read again for each window, so
    a cluster that grows is used), so that only one window's arguments are built and held
    here at a time. A window waits for its slowest task; a step of tasks of equal cost (a
    release's chunks) loses little to that. ``progress(done, count)`` after each task."""
    results: list = []
    while len(results) < count:
        window = list(islice(tasks, min(max(1, executor.width), count - len(results))))
        if not window:
            raise ValueError(f"map_streamed: {count} tasks announced, {len(results)} given")
        base = len(results)
        report = None if progress is None else (
            lambda done, _, base=base: progress(base + done, count))
        results.extend(executor.map(circuit, window, report))
        del window  # the window's arguments go before the next window's are built
    return results
