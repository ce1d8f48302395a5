"""Peak resident memory of the servers the demo starts, and of their worker processes.

The demo's report states each server's peak so that a user can size a host from a run of
their own (``report.json``, ``peak_memory_mb``). A server's own peak is the kernel's high-water
mark (``VmHWM`` in ``/proc/PID/status``), exact whatever happened between two looks. Its
workers (the key server's offline pool, the compute server's local processes) may exit
before the end (idle workers stop after a few minutes), so they are sampled while they live:
the largest resident size seen, at least as often as ``interval``. A sampled peak can miss a
spike shorter than the interval, which the report says by naming how it was measured.

Linux only (``/proc``); elsewhere the watcher reports nothing rather than guessing.
"""

from __future__ import annotations

import threading
from pathlib import Path

__all__ = ["PeakMemory", "status_kb", "descendants"]

PROC = Path("/proc")


def status_kb(pid: int, field: str) -> int | None:
    """A kB field of ``/proc/PID/status`` (``VmHWM``, ``VmRSS``), or None when the process
    has exited or the field is absent."""
    try:
        text = (PROC / str(pid) / "status").read_text()
    except OSError:  # the process has exited
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (its children's children too), from the kernel's
    per-thread child lists; bounded by the processes that exist."""
    found: list[int] = []
    frontier = [pid]
    seen = {pid}
    while frontier:  # bounded: each pid is visited once
        parent = frontier.pop()
        try:
            tasks = list((PROC / str(parent) / "task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in seen:
                    seen.add(child)
                    found.append(child)
                    frontier.append(child)
    return found


class PeakMemory:
    """Watches named root processes and their descendants until :meth:`stop`."""

    def __init__(self, roots: dict[str, int], interval: float = 0.5):
        self._roots = dict(roots)
        self._interval = interval
        self._workers = dict.fromkeys(roots, 0)
        self._hwm = dict.fromkeys(roots, 0)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="peak-memory", daemon=True)
        self.available = PROC.joinpath("self", "status").exists()

    def start(self) -> PeakMemory:
        if self.available and not self._thread.is_alive():
            self._thread.start()
        return self

    def __enter__(self) -> PeakMemory:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _look(self) -> None:
        for name, pid in self._roots.items():
            hwm = status_kb(pid, "VmHWM")
            if hwm is not None:
                self._hwm[name] = max(self._hwm[name], hwm)
            for child in descendants(pid):
                rss = status_kb(child, "VmRSS")
                if rss is not None:
                    self._workers[name] = max(self._workers[name], rss)

    def _watch(self) -> None:
        # Bounded by stop(): the event ends the loop within one interval.
        while not self._done.wait(self._interval):
            self._look()

    def stop(self) -> None:
        """Take a last look (the servers must still be running) and end the watch."""
        if not self.available or self._done.is_set():
            return
        self._look()
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def report(self) -> dict[str, dict[str, float | str]] | None:
        """Per root: its own peak (MB, the kernel's high-water mark) and its largest worker
        process's sampled peak (MB; 0 if it started none)."""
        if not self.available:
            return None
        return {name: {"process_mb": round(self._hwm[name] / 1024, 1),
                       "largest_worker_mb": round(self._workers[name] / 1024, 1),
                       "workers_sampled_every_s": self._interval}
                for name in self._roots}
