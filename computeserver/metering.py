"""Where the compute server's core-seconds go: every executor step's CPU, per session.

The encrypted work runs as tasks on the executor (``computeserver.executor``): P1 release
chunks, P2's InDif chunks and their encrypted sums, the score noise, P3's rounds. Each
``map`` of the executor is one step; :class:`MeteredExecutor` wraps the server's executor
and adds, per session and per kind of task, the step's CPU seconds (on worker processes:
each task's process time there, ``TaskStats``; on this process's threads: this process's
CPU over the step, as a task's own process time would count its neighbours' too), the
tasks' seconds inside concrete, the step's wall seconds
and the programmable bootstraps its tasks ran (concrete's count for the function called,
read once per circuit from its server artefact). The session's status carries the sums
(``wire.StepCost``), so that a run can say how many core-seconds a bootstrap cost inside a
session against the same function alone (``bench/scale/bench_demo_time.py``).

Kept in memory: a restarted server counts from its restart (the status says what it saw).
Nothing here touches a ciphertext or a key.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from feddpsyn.common import wire
from feddpsyn.computeserver.executor import (
    CallTask,
    Circuit,
    Executor,
    InProcessExecutor,
    Progress,
)

__all__ = ["StepCosts", "MeteredExecutor", "task_kind"]


def task_kind(function: str | None) -> str:
    """The step a task belongs to, by the function it calls."""
    if function is None:
        return "release"  # a release chunk's P1 (its circuit's one function)
    if function.startswith("indif_"):
        return "p2_indif"
    if function == "add":
        return "p2_sums"
    if function in ("noise", "joint"):
        return "score_noise"
    return "p3_select"  # the em round's select and its batch steps


@dataclass
class _Sums:
    tasks: int = 0
    cpu_seconds: float = 0.0
    run_seconds: float = 0.0
    wall_seconds: float = 0.0
    bootstraps: int = 0
    counted: bool = True  # every task's bootstraps known


class StepCosts:
    """Per session, per kind of task: the sums above (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sums: dict[str, dict[str, _Sums]] = {}

    def add(self, session_id: str, kind: str, tasks: int, cpu_seconds: float,
            run_seconds: float, wall_seconds: float, bootstraps: int | None) -> None:
        with self._lock:
            sums = self._sums.setdefault(session_id, {}).setdefault(kind, _Sums())
            sums.tasks += tasks
            sums.cpu_seconds += cpu_seconds
            sums.run_seconds += run_seconds
            sums.wall_seconds += wall_seconds
            if bootstraps is None:
                sums.counted = False
            else:
                sums.bootstraps += bootstraps

    def of(self, session_id: str) -> list[wire.StepCost]:
        with self._lock:
            steps = dict(self._sums.get(session_id, {}))
        return [wire.StepCost(step=kind, tasks=s.tasks, cpu_seconds=round(s.cpu_seconds, 3),
                              run_seconds=round(s.run_seconds, 3),
                              wall_seconds=round(s.wall_seconds, 3),
                              bootstraps=s.bootstraps if s.counted else None)
                for kind, s in sorted(steps.items())]


class MeteredExecutor:
    """The server's executor, with each ``map`` added to :class:`StepCosts`; everything
    else is the wrapped executor's."""

    def __init__(self, inner: Executor, costs: StepCosts):
        self.inner = inner
        self.costs = costs
        self._bootstraps: dict[str, dict[str, int]] = {}  # circuit digest -> per function
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    @property
    def description(self) -> str:
        return self.inner.description

    @property
    def width(self) -> int:
        return self.inner.width

    def close(self) -> None:
        self.inner.close()

    def _count(self, circuit: Circuit, function: str | None) -> int | None:
        """Bootstraps of one call of ``function``, from the circuit's server artefact (no
        keys), read once per circuit for all its functions; None where it is not here."""
        with self._lock:
            counts = self._bootstraps.get(circuit.digest)
        if counts is None:
            counts = {}
            if circuit.server_path:
                try:
                    from concrete import fhe

                    server = fhe.Server.load(circuit.server_path)
                    counts = {name: int(server.programmable_bootstrap_count(name))
                              for name in server.program_info.function_list()}
                except Exception:  # noqa: BLE001 - counts we cannot read are reported unknown
                    counts = {}
            with self._lock:
                self._bootstraps[circuit.digest] = counts
        # A single-function circuit's tasks name no function: its one function.
        if function is None:
            return next(iter(counts.values())) if len(counts) == 1 else None
        return counts.get(function)

    def map(self, circuit: Circuit, tasks: Sequence[CallTask],
            progress: Progress | None = None) -> list:
        started, cpu = time.perf_counter(), time.process_time()
        results = self.inner.map(circuit, tasks, progress)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        stats = getattr(self.inner, "stats", None)
        if stats is None or not tasks:
            return results
        kinds: dict[str, list[CallTask]] = {}
        for task in tasks:  # bounded: the step's tasks
            kinds.setdefault(task_kind(task.function), []).append(task)
        # A step is one kind of task in practice; a mixed one is split by task count.
        total = len(tasks)
        step_cpu = cpu if isinstance(self.inner, InProcessExecutor) else sum(stats.cpu_seconds)
        for kind, members in kinds.items():
            share = len(members) / total
            counts = [self._count(circuit, t.function) for t in members]  # cached
            bootstraps = None if None in counts else sum(c for c in counts if c is not None)
            self.costs.add(circuit.session_id, kind, len(members),
                           step_cpu * share, sum(stats.run_seconds) * share,
                           wall * share, bootstraps)
        return results
