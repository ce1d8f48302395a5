"""The compute server's executor on a Dask distributed cluster (``computeserver.executor``
states what every executor guarantees).

Design concerns:

* **Keys reach every worker, also a late one.** The session's compiled server and evaluation
  keys travel as bytes in a worker plugin held by the scheduler: each worker, including one
  that joins or restarts after a crash, receives them once, and loads them at its first
  task. The scheduler and every worker therefore hold the evaluation keys and the
  ciphertexts of the tasks they run, never a secret key (the compute server has none).
* **A lost worker costs a rerun.** The scheduler runs a task whose worker died on another
  worker; tasks are pure (``computeserver.executor``), so the result is the same.
* **TLS when configured.** ``security`` is a ``distributed.Security`` (CA, certificate and
  key files); the scheduler address then starts with ``tls://``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from distributed import Client, as_completed
from distributed.diagnostics.plugin import WorkerPlugin

from feddpsyn.computeserver import executor
from feddpsyn.computeserver.executor import CallTask, Circuit, Progress, TaskStats, run_task

__all__ = ["DaskExecutor", "CircuitPlugin"]


class CircuitPlugin(WorkerPlugin):
    """Hands a circuit's bytes to every Dask worker, present and future (a worker restarted
    after a crash gets them again from the scheduler); the worker loads them at its first
    task."""

    idempotent = True

    def __init__(self, circuit: Circuit, payload: tuple[bytes, bytes]):
        super().__init__()
        self.circuit = circuit
        self.payload = payload

    def setup(self, worker) -> None:
        executor._PAYLOADS[(self.circuit.session_id, self.circuit.digest)] = self.payload

    def teardown(self, worker) -> None:
        executor._PAYLOADS.pop((self.circuit.session_id, self.circuit.digest), None)


class DaskExecutor:
    """Tasks on a Dask distributed cluster (``distributed.Client``).

    The circuit's bytes go to every worker once per (session, digest), through a worker
    plugin, and each worker process loads them once. A worker lost mid-task is the
    scheduler's to handle: it runs the task again on another worker (up to its
    ``allowed-failures``), and a replacement worker receives the plugin on arrival."""

    def __init__(self, scheduler: str | None = None, security=None, client=None):
        self._client = client or Client(scheduler, security=security, timeout="30s")
        self._owns_client = client is None
        self._registered: set[tuple[str, str]] = set()
        self.description = f"Dask cluster at {self._client.scheduler.address}"
        self.stats = TaskStats()

    @property
    def width(self) -> int:
        """The cluster's worker threads now (at least 1: a task waits for a worker)."""
        return max(1, sum(self._client.nthreads().values()))

    def _register(self, circuit: Circuit) -> Circuit:
        key = (circuit.session_id, circuit.digest)
        if key not in self._registered:
            self._client.register_plugin(CircuitPlugin(circuit.remote(), circuit.payload()),
                                         name=f"feddpsyn-circuit-{circuit.session_id}-"
                                              f"{circuit.digest[:16]}")
            self._registered.add(key)
        return circuit.remote()

    def map(self, circuit: Circuit, tasks: Sequence[CallTask],
            progress: Progress | None = None) -> list:
        self.stats = TaskStats()
        remote = self._register(circuit)
        started = time.perf_counter()
        futures = {self._client.submit(run_task, remote, task, pure=False): i
                   for i, task in enumerate(tasks)}
        results: list = [None] * len(tasks)
        done = 0
        for future in as_completed(list(futures)):
            result, run_s, cpu_s, load_s, pid = future.result()
            index = futures[future]
            results[index] = result
            self.stats.record(run_s, cpu_s, pid)
            self.stats.wall_seconds.append(time.perf_counter() - started)
            if load_s:
                self.stats.load_seconds[pid] = self.stats.load_seconds.get(pid, 0.0) + load_s
            done += 1
            if progress is not None:
                progress(done, len(tasks))
        return results

    def close(self) -> None:
        if self._owns_client:
            self._client.close()
