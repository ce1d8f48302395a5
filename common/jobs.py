"""Long work off the request path: a bounded queue of jobs on threads the server owns, and a
child process for work that holds the interpreter.

Design concerns:

* **A request never waits for a job.** A route validates what it can from the request,
  records the job and answers; the job runs on one of :class:`JobQueue`'s threads.
* **Bounded.** A queue has ``workers`` threads and holds at most ``max_pending`` jobs,
  waiting or running; :meth:`JobQueue.submit` refuses more (:class:`JobsBusy`), so a
  burst of requests cannot pile up unbounded work. Every wait below is bounded by a poll
  interval and a stop event.
* **CPU work in a child process.** concrete's compiler and key generation hold the
  interpreter's lock for tens of seconds in one call (measured: 24 s compiling a
  noisy-greedy selection module), so on a thread they stall every request of the server,
  its event loop included. :func:`run_in_child` runs a top-level function in a spawned
  process (fork is never used: a forked child of a process that has started concrete's
  runtime hangs, ``computeserver.executor``), relays the phases it reports, stops it when
  the server stops, and the child dies with the server (``PR_SET_PDEATHSIG`` on Linux), so
  a killed server leaves no orphan writing into its state.
"""

from __future__ import annotations

import collections
import ctypes
import importlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["JobQueue", "JobsBusy", "JobStopped", "ChildFailed", "ChildProcesses",
           "run_in_child"]

log = logging.getLogger("feddpsyn")

Job = Callable[[threading.Event], None]


class JobsBusy(Exception):
    """The queue holds ``max_pending`` jobs already."""


class JobStopped(Exception):
    """The server is stopping: the job was cut short and will be resumed or retried."""


class ChildFailed(RuntimeError):
    """The child process raised, or exited without an answer; the message says which."""


class JobQueue:
    """``workers`` threads running submitted jobs in order; each job is called with the
    queue's stop event, which it must observe (:func:`run_in_child` does)."""

    def __init__(self, name: str, workers: int = 1, max_pending: int = 8):
        if workers < 1 or max_pending < 1:
            raise ValueError("a job queue needs a worker and room for a job")
        self.name = name
        self.workers = workers
        self.max_pending = max_pending
        self._queue: collections.deque[tuple[str, Job]] = collections.deque()
        self._keys: set[str] = set()  # queued or running
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def pending(self) -> int:
        """Jobs waiting or running."""
        with self._cond:
            return len(self._keys)

    def holds(self, key: str) -> bool:
        with self._cond:
            return key in self._keys

    def full(self) -> bool:
        return self.pending() >= self.max_pending

    def submit(self, key: str, job: Job, *, force: bool = False) -> bool:
        """Queue ``job`` under ``key``; False if a job of that key is queued or running.
        Raises :class:`JobsBusy` when the queue is full (``force``: queue it anyway, for
        work the server resumes at start-up)."""
        with self._cond:
            if key in self._keys:
                return False
            if not force and len(self._keys) >= self.max_pending:
                raise JobsBusy(f"{len(self._keys)} jobs are queued or running")
            self._keys.add(key)
            self._queue.append((key, job))
            self._start_locked()
            self._cond.notify()
        return True

    def _start_locked(self) -> None:
        # Threads start on the first job, and again after close(): a test transport may run
        # an app's shutdown and startup more than once.
        if self._stop.is_set():
            self._stop = threading.Event()
        self._threads = [t for t in self._threads if t.is_alive()]
        while len(self._threads) < self.workers:
            thread = threading.Thread(target=self._run, args=(self._stop,),
                                      name=f"{self.name}-{len(self._threads)}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self._cond:
                while not self._queue and not stop.is_set():
                    self._cond.wait(1.0)  # bounded: re-checks the stop event every second
                if stop.is_set():
                    return
                key, job = self._queue.popleft()
            try:
                job(stop)
            except Exception as exc:  # the job records its own outcome; keep serving
                log.warning("%s: job %s failed: %s", self.name, key, f"{exc}"[:300])
            finally:
                with self._cond:
                    self._keys.discard(key)

    def close(self, timeout: float = 30) -> None:
        """Stop: running jobs see the stop event (a child process is terminated), queued ones
        are dropped (the server resumes them from its state at the next start)."""
        with self._cond:
            self._stop.set()
            for key, _ in self._queue:  # a running job's key stays until its thread ends
                self._keys.discard(key)
            self._queue.clear()
            threads, self._threads = self._threads, []
            self._cond.notify_all()
        for thread in threads:
            thread.join(timeout)


def _die_with_parent() -> None:
    """Ask the kernel to kill this process when the thread that started it ends (a job's
    thread, or the server's main thread: each lives as long as it may hand us work, and a
    killed server takes them along)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _child(conn: Connection, parent: int, preload: tuple[str, ...], idle: float) -> None:
    """A child's life: import ``preload`` (so a job does not wait for it), take one job from
    ``conn`` (or exit after ``idle`` seconds without one), send its phases and its outcome
    back, exit."""
    _die_with_parent()
    if os.getppid() != parent:  # the parent died before the request above took effect
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the server's to handle
    for module in preload:
        importlib.import_module(module)
    try:
        if not conn.poll(idle):  # a spare nobody took: its memory goes back
            return
        target, args = conn.recv()
    except EOFError:  # the parent let this spare go unused
        return

    def report(phase: str) -> None:
        conn.send(("phase", phase))

    try:
        result = target(*args, report=report)
    except BaseException as exc:  # every outcome goes back to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"[:500]))
    else:
        conn.send(("result", result))
    finally:
        conn.close()


class ChildProcesses:
    """Spawned child processes for :func:`run_in_child`, one kept ready: spawned ahead, its
    ``preload`` modules imported (concrete's import takes seconds), so a job starts at once.
    Each child runs one job and exits; the spare is replaced when it is taken, and exits
    after ``idle`` seconds untaken (concrete imported, it holds about 400 MB)."""

    def __init__(self, preload: tuple[str, ...] = (), idle: float = 600.0):
        self.preload = preload
        self.idle = idle
        self._context = multiprocessing.get_context("spawn")
        self._spare: tuple[Any, Connection] | None = None
        self._lock = threading.Lock()

    def _spawn(self) -> tuple[Any, Connection]:
        mine, theirs = self._context.Pipe(duplex=True)
        process = self._context.Process(target=_child,
                                        args=(theirs, os.getpid(), self.preload, self.idle),
                                        daemon=True, name="job-child")
        process.start()
        theirs.close()
        return process, mine

    def warm(self) -> None:
        """Have a spare ready (the calling thread should live as long as the server: the
        child dies with it)."""
        with self._lock:
            if self._spare is None or not self._spare[0].is_alive():
                self._spare = self._spawn()

    def take(self, *, replace: bool = True) -> tuple[Any, Connection]:
        """A live child waiting for its job (the spare, or a new one), and (``replace``) a
        new spare."""
        with self._lock:
            spare, self._spare = self._spare, None
            if spare is None or not spare[0].is_alive():
                if spare is not None:
                    spare[1].close()
                spare = self._spawn()
            if replace:
                self._spare = self._spawn()
        return spare

    def close(self) -> None:
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            _end(*spare)


def _end(process: Any, conn: Connection) -> None:
    conn.close()
    if process.is_alive():
        process.terminate()
        process.join(10)
        if process.is_alive():
            process.kill()
    process.join(10)


def run_in_child(target: Callable[..., Any], args: tuple[Any, ...], *, stop: threading.Event,
                 on_phase: Callable[[str], None] = lambda _: None,
                 children: ChildProcesses | None = None, poll: float = 0.2) -> Any:
    """``target(*args, report=...)`` in a spawned process (from ``children``, or a new one);
    its return value (pickled).

    ``target`` is a top-level function; it calls ``report(text)`` at each phase, which
    reaches ``on_phase`` here. Raises :class:`JobStopped` when ``stop`` is set (the child
    is terminated), :class:`ChildFailed` when it raised or died without an answer."""
    process, conn = (children.take() if children is not None
                     else ChildProcesses().take(replace=False))

    def died() -> ChildFailed:
        process.join(10)
        return ChildFailed(f"the child process exited with code {process.exitcode} before "
                           "it finished (killed, or out of memory?)")

    try:
        try:
            conn.send((target, args))
        except (BrokenPipeError, ConnectionResetError):
            raise died() from None
        while True:  # bounded: each pass waits at most ``poll``; ends with the child or stop
            if stop.is_set():
                raise JobStopped("the server is stopping")
            if conn.poll(poll):
                try:
                    kind, value = conn.recv()
                except EOFError:
                    raise died() from None
                if kind == "phase":
                    on_phase(str(value))
                elif kind == "result":
                    return value
                else:
                    raise ChildFailed(str(value))
            elif not process.is_alive() and not conn.poll(0):
                raise died()
    finally:
        _end(process, conn)
