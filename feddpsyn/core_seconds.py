"""Where the machine's core-seconds went during a demo: each server's process tree, this
process, and what no one used.

A server's CPU seconds are its own and its descendants' (the key server's offline workers,
the compute server's worker processes), read from ``/proc/PID/stat`` (user + system time).
A worker may exit between two looks (idle workers stop), so every process is sampled while
it lives, at least as often as ``interval``: an exited worker's last interval is missed,
which the report states. Cumulative child times (``cutime``) are not read, so a reaped
worker is never counted twice.

At each phase's end the demo calls :meth:`CoreSeconds.mark`: the report gives each phase's
seconds per process tree and the idle rest, ``cores x wall`` minus what was used. With the
compute server's own account of its encrypted steps (``wire.StepCost``), this says where a
session's time went (``report.json``: ``core_seconds``).

Linux only (``/proc``); elsewhere the watcher reports nothing rather than guessing.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from feddpsyn.peak_memory import descendants

__all__ = ["CoreSeconds", "cpu_ticks"]

PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_ticks(pid: int) -> int | None:
    """User + system clock ticks of one process so far, or None when it has exited."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)


class CoreSeconds:
    """Samples named root processes' trees (and this process) until :meth:`stop`."""

    def __init__(self, roots: dict[str, int], interval: float = 0.5):
        self._roots = {**roots, "this process": os.getpid()}
        self._interval = interval
        self._seen: dict[str, dict[int, int]] = {name: {} for name in self._roots}
        self._lock = threading.Lock()
        self._marks: list[tuple[str, float, dict[str, float]]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="core-seconds", daemon=True)
        self.available = PROC.joinpath("self", "stat").exists()
        self._started = time.monotonic()
        self._first = self._totals() if self.available else {}

    def _sample(self) -> None:
        for name, root in self._roots.items():
            for pid in [root, *descendants(root)]:
                ticks = cpu_ticks(pid)
                if ticks is not None:
                    with self._lock:
                        seen = self._seen[name]
                        seen[pid] = max(ticks, seen.get(pid, 0))

    def _totals(self) -> dict[str, float]:
        self._sample()
        with self._lock:
            return {name: sum(seen.values()) / TICKS for name, seen in self._seen.items()}

    def _watch(self) -> None:
        while not self._done.wait(self._interval):  # bounded by stop()
            self._sample()

    def start(self) -> CoreSeconds:
        if self.available and not self._thread.is_alive():
            self._thread.start()
        return self

    def mark(self, phase: str) -> None:
        """The end of ``phase`` (which began at the previous mark, or at the start)."""
        if self.available:
            self._marks.append((phase, time.monotonic(), self._totals()))

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def report(self, cores: int | None = None) -> dict:
        """Per marked phase: its wall seconds, each tree's CPU seconds and the idle rest of
        ``cores`` (default: this machine's) x wall; empty where /proc is not available."""
        if not self.available:
            return {}
        cores = cores or os.cpu_count() or 1
        out: dict = {"cores": cores, "interval_s": self._interval,
                     "how": "user + system time of each process tree from /proc/PID/stat, "
                            "sampled while each process lives; an exited worker's last "
                            "interval is not counted", "phases": {}}
        before, at = self._first, self._started
        for phase, when, totals in self._marks:
            wall = when - at
            used = {name: round(totals[name] - before.get(name, 0.0), 2) for name in totals}
            out["phases"][phase] = {"wall_s": round(wall, 2), **used,
                                    "idle": round(max(0.0, cores * wall - sum(used.values())),
                                                  2)}
            before, at = totals, when
        return out
