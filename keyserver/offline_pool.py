"""The key server's offline job on local worker processes: drawing the joint noise's bits and
encrypting them, the clients' masked vectors and P2's inputs, each job's chunks spread over
``--workers`` processes of this host.

Design concerns:

* **The secret key stays on this host, and off the wire between processes.** A worker is a
  process spawned by the key server on its own host (no cluster: the secret key must never
  leave it). It is told where a session's key files are (:class:`KeyFiles`: a path in the
  key server's state directory, whose key files are 0600) and reads them itself; the key is
  never on a command line, in the environment, in a pipe or in a message. A task's answer
  is ciphertexts, or a decryption the server charged the ledger for before it sent the task
  (its own view, as it would be in its own process). A worker's error reaches the log and
  the caller as its type and a short message (``common.serving``'s rule for library text);
  a task's own refusal (:class:`TaskRefused`, text of its own) as a 422.
* **Randomness is drawn where it is used, never reused.** A task that needs noise draws it
  in its worker from the OS CSPRNG (``secrets``, through ``crypto.joint_noise.draw_bits``,
  which fails closed on a short read) and sends back only its ciphertext; no seed or
  generator state crosses a process boundary, so no two chunks can share randomness. The
  encryption randomness is concrete's, seeded afresh in every process that loads a key
  (measured: the same value encrypted in two processes after loading the same key file gives
  different ciphertexts, as it does twice in one process).
* **Off the server's process, whatever the pool.** Every task runs in a worker process,
  with one worker (the default) as with more: concrete's encryption holds the interpreter
  for the seconds a chunk takes (6 s for a chunk of coins at the ``default`` set), and in the
  server's own process every request handler would wait that long. A task is a frozen
  value with ``run(keys)``, run on the worker's own handle loaded from the session's files,
  so what is stored, what decrypts and what the ledger charges do not depend on
  ``--workers``; only the ciphertexts' bytes do, as they do between any two encryptions.
* **Bounded, and failing loudly.** A map sends at most one task to each worker at a time
  and waits in ``poll`` steps; a worker that exits (killed, out of memory) fails the map at
  once with a 503 that says what died and that nothing of the pass was stored, as does a
  task past ``task_timeout`` or a server that stops; the pool's workers are then ended and
  new ones spawned by the next map. Spawned, never forked (a forked child of a process that
  runs concrete hangs: ``computeserver.executor``). A worker exits when the key server does:
  an idle one sees its pipe close (or its parent change) within a second, a busy one when it
  tries to answer.
* **Below the online work in CPU priority.** Workers run at ``NICENESS`` (``os.nice``): on a
  host the key server shares with the compute server (the demo; a small deployment) the
  offline job's guesses (``keyserver.coins``) take a share of a core rather than a whole
  one from P2, and whoever waits for one of its answers (a release's coins, a decryption)
  leaves a core idle for it, so it runs at full speed then. Measured with the demo on 2
  cores: at niceness 0 the job held one core for the first 160 s of P2's 292 s; at 10 it
  made 13 chunks of about 5 CPU seconds each in P2's 264 s, a quarter of a core. On a host
  of its own the priority changes nothing. Raising a process's niceness needs no privilege.
* **Memory held only while there is work.** A worker holds the keys it loaded (gigabytes for
  a selection module at Adult's widths), so the pool ends its workers once none has had a
  task for ``idle_timeout`` seconds (:meth:`OfflinePool.end_idle`, called by the offline
  job's idle passes); the next map spawns them again, each reloading its keys (seconds).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Protocol

from feddpsyn.common.serving import ServiceError
from feddpsyn.common.sigpipe import ignore_sigpipe

__all__ = ["KeyFiles", "OfflinePool", "OfflineTask", "TaskRefused", "split_evenly"]

log = logging.getLogger("feddpsyn.keyserver")

# The workers' niceness (module docstring): 10 leaves them about a tenth of a core that a
# compute-server thread also wants (Linux's weights 110 against 1024). The environment's
# FEDDPSYN_OFFLINE_NICENESS overrides it (0: the scheduler's fair share), e.g. where other
# work of equal weight shares the host, as the test suite's two workers do.
NICENESS = 10
NICENESS_VARIABLE = "FEDDPSYN_OFFLINE_NICENESS"


def offline_niceness() -> int:
    """The workers' niceness: NICENESS unless the environment sets one in 0..19."""
    text = os.environ.get(NICENESS_VARIABLE)
    if text is None:
        return NICENESS
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{NICENESS_VARIABLE} must be an integer in 0..19, not {text!r}") from None
    if not 0 <= value <= 19:
        raise ValueError(f"{NICENESS_VARIABLE} must be in 0..19, not {value}")
    return value

# Key handles a worker keeps loaded (the sessions it last encrypted for): the selection
# module's key file holds its bootstrap keys too, gigabytes at Adult's widths.
CACHED_KEYS = 2


class OfflineTask(Protocol):
    """One unit of an offline job: picklable, its answer ciphertexts (or a charged
    decryption) as bytes."""

    def run(self, keys: Any) -> list[bytes]:
        """Encrypt (or decrypt) with ``keys`` (a session's key handle); serialized."""
        ...


class TaskRefused(Exception):
    """A task's refusal of its input (a ciphertext that does not decrypt under the session's
    keys): its message, the task's own words and never a library's, reaches the caller as
    a 422."""


@dataclass(frozen=True)
class KeyFiles:
    """Where a worker finds a session's key handle: ``load(Path(directory), *args)`` reads
    the key files there (0600, in the key server's state directory). Only this crosses to a
    worker, never the key."""

    load: Callable[..., Any]
    directory: str
    args: tuple[Any, ...] = ()

    def cache_key(self) -> tuple[str, str, int]:
        # The loader's repr names its class too (a classmethod's qualname is its base's);
        # a session's folder is moved into place once, so its inode names this copy of it.
        return (repr(self.load), self.directory, os.stat(self.directory).st_ino)


def split_evenly(items: Sequence[Any], parts: int) -> list[list[Any]]:
    """``items`` in at most ``parts`` contiguous groups of sizes differing by at most one.

    >>> split_evenly([1, 2, 3, 4, 5], 2)
    [[1, 2, 3], [4, 5]]
    """
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for part in range(parts):
        end = start + size + (1 if part < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return [group for group in out if group]


# ---------------------------------------------------------------- worker side
def _worker(conn: Connection, parent: int, niceness: int = NICENESS) -> None:
    """A worker's life: one task at a time from ``conn`` until the pool ends it or the key
    server is gone (module docstring)."""
    # Before concrete is imported here: one core's worth of threads a worker, so N workers
    # share N cores rather than each starting a thread per core.
    for name in ("OMP_NUM_THREADS", "RAYON_NUM_THREADS"):
        os.environ[name] = "1"
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the server's to handle
    os.nice(niceness)  # below the online work (module docstring)
    loaded: collections.OrderedDict[tuple[str, str, int], Any] = collections.OrderedDict()
    while True:  # bounded: ends when the pool sends None or the key server is gone
        try:
            if not conn.poll(1.0):
                if os.getppid() != parent:
                    return
                continue
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return
        started, cpu = time.perf_counter(), time.process_time()
        try:
            # Unpickled here, so a task this process cannot import is that task's error.
            request = pickle.loads(message)
            if request is None:
                return
            files, task = request
            key = files.cache_key()
            if key not in loaded:
                loaded[key] = files.load(Path(files.directory), *files.args)
                while len(loaded) > CACHED_KEYS:  # bounded: drops the oldest
                    loaded.popitem(last=False)
            loaded.move_to_end(key)
            result = task.run(loaded[key])
            reply: tuple[Any, ...] = ("ok", result, os.getpid(),
                                      time.perf_counter() - started,
                                      time.process_time() - cpu)
        except TaskRefused as exc:
            reply = ("refused", str(exc)[:300])
        except Exception as exc:  # every outcome goes back; the text is cut short
            reply = ("error", f"{type(exc).__name__}: {exc}"[:300])
        ignore_sigpipe()  # concrete's runtime may have replaced the disposition
        try:
            conn.send(reply)
        except (BrokenPipeError, ConnectionResetError, OSError):
            return


@dataclass
class _Worker:
    process: Any
    conn: Connection


# ---------------------------------------------------------------- the pool
class OfflinePool:
    """``workers`` local processes for the offline job's tasks, spawned by the first map and
    ended after ``idle_timeout`` seconds without a task (:meth:`end_idle`).

    One map at a time: the offline pass and a request that makes a missing chunk take turns,
    so a worker never holds answers for two callers."""

    def __init__(self, workers: int = 1, *, task_timeout: float = 900.0, poll: float = 0.2,
                 idle_timeout: float = 300.0, niceness: int | None = None):
        if workers < 1:
            raise ValueError("the offline job needs at least one worker")
        self.workers = workers
        # Read when the server starts: a bad value stops it with the variable's name.
        self.niceness = offline_niceness() if niceness is None else niceness
        self.task_timeout = task_timeout
        self.poll = poll
        self.idle_timeout = idle_timeout
        self._last_map_ended = time.monotonic()
        # Per task of the last map on worker processes: the process that ran it, and its
        # seconds and CPU seconds there (a shared core shows as seconds > CPU seconds).
        self.last_pids: list[int] = []
        self.last_seconds: list[float] = []
        self.last_cpu_seconds: list[float] = []
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    def worker_pids(self) -> list[int]:
        """The live worker processes (for a fault test or an operator's ``kill``)."""
        return [w.process.pid for w in self._workers if w.process.is_alive()]

    def map(self, files: KeyFiles, tasks: Sequence[OfflineTask],
            what: str) -> list[list[bytes]]:
        """Every task's ciphertexts, in task order, each made in a worker process on its own
        key handle, loaded from ``files``; ``what`` names the job in an error."""
        with self._lock:
            try:
                return self._map_locked(files, tasks, what)
            except BaseException:
                # A worker may still hold a task of this map: none may answer the next one.
                self._discard()
                raise
            finally:
                self._last_map_ended = time.monotonic()

    def end_idle(self) -> bool:
        """End the workers if no map has run for ``idle_timeout`` seconds, freeing the keys
        they hold; True if any was ended. Never waits for a running map."""
        if not self._workers or time.monotonic() - self._last_map_ended < self.idle_timeout:
            return False
        if not self._lock.acquire(blocking=False):
            return False  # a map is running: the workers are not idle
        try:
            if time.monotonic() - self._last_map_ended < self.idle_timeout:
                return False
            ended = len(self._workers)
            self._discard()
        finally:
            self._lock.release()
        log.info("ended %d idle offline worker process(es) after %.0f s without a task",
                 ended, self.idle_timeout)
        return True

    def _spawn(self) -> _Worker:
        mine, theirs = self._context.Pipe(duplex=True)
        process = self._context.Process(target=_worker,
                                        args=(theirs, os.getpid(), self.niceness),
                                        daemon=True, name="offline-worker")
        process.start()
        theirs.close()
        return _Worker(process, mine)

    def _map_locked(self, files: KeyFiles, tasks: Sequence[OfflineTask],
                    what: str) -> list[list[bytes]]:
        if self._stopping.is_set():
            raise ServiceError(503, "the key server is stopping")
        ignore_sigpipe()  # this process writes to the workers' pipes
        self._workers = [w for w in self._workers if w.process.is_alive()]
        while len(self._workers) < self.workers:  # bounded: up to ``workers`` spawns
            self._workers.append(self._spawn())
        results: list[list[bytes] | None] = [None] * len(tasks)
        pids, seconds, cpu = [0] * len(tasks), [0.0] * len(tasks), [0.0] * len(tasks)
        queue = collections.deque(range(len(tasks)))
        idle = list(self._workers)
        busy: dict[Connection, tuple[_Worker, int, float]] = {}
        while queue or busy:  # bounded: each pass hands out or collects, or raises
            while queue and idle:
                worker, index = idle.pop(), queue.popleft()
                try:
                    worker.conn.send((files, tasks[index]))
                except (BrokenPipeError, ConnectionResetError, OSError):
                    raise self._died(worker, what) from None
                busy[worker.conn] = (worker, index, time.monotonic())
            sentinels = {w.process.sentinel: w for w, _, _ in busy.values()}
            ready = wait([*busy, *sentinels], timeout=self.poll)
            for conn in [r for r in ready if r in busy]:
                worker, index, _ = busy.pop(conn)
                try:
                    reply = conn.recv()
                except (EOFError, OSError):
                    raise self._died(worker, what) from None
                if reply[0] == "refused":
                    raise ServiceError(422, reply[1])
                if reply[0] != "ok":
                    raise ServiceError(503, f"{what}: a task failed in an offline worker "
                                            f"process ({reply[1]}); nothing of this pass is "
                                            "stored")
                results[index], pids[index], seconds[index], cpu[index] = reply[1:5]
                idle.append(worker)
            for sentinel in [r for r in ready if r in sentinels]:
                worker = sentinels[sentinel]
                if worker.conn in busy:  # died without answering
                    raise self._died(worker, what)
            if self._stopping.is_set():
                raise ServiceError(503, "the key server is stopping")
            now = time.monotonic()
            if any(now - started > self.task_timeout for _, _, started in busy.values()):
                raise ServiceError(503, f"{what}: an offline worker process took more than "
                                        f"{self.task_timeout:.0f} s on one task; the workers "
                                        "are restarted and nothing of this pass is stored")
        self.last_pids, self.last_seconds, self.last_cpu_seconds = pids, seconds, cpu
        return [r for r in results if r is not None]

    @staticmethod
    def _died(worker: _Worker, what: str) -> ServiceError:
        worker.process.join(5)
        message = (f"{what}: an offline worker process (pid {worker.process.pid}) exited "
                   f"with code {worker.process.exitcode} before it answered (killed, or out "
                   "of memory?); nothing of this pass is stored, and the next pass runs it "
                   "again on new workers")
        log.warning("%s", message)
        return ServiceError(503, message)

    def _discard(self) -> None:
        """End every worker (one busy with a task too: its answer is not wanted)."""
        workers, self._workers = self._workers, []
        for worker in workers:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError, OSError):
                worker.conn.send(None)
            worker.conn.close()
            if worker.process.is_alive():
                worker.process.terminate()
            worker.process.join(10)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(10)

    def close(self, timeout: float = 30.0) -> None:
        """End the workers; a map running now fails within ``poll`` seconds (503). The pool
        spawns new workers if it is used again (a test transport may restart an app)."""
        self._stopping.set()
        acquired = self._lock.acquire(timeout=timeout)
        try:
            self._discard()
        finally:
            self._stopping.clear()
            if acquired:
                self._lock.release()
