"""Progress of the compute server's long steps, said without flooding: logged at most every
:data:`LOG_EVERY` seconds a session, and sent to the key server (whose ``session status``
shows it) at most every :data:`PUSH_EVERY` seconds a session.

A long step (noisy-greedy's encrypted dependency scores took 24 minutes on a 22k-row table)
reports each task it finishes; most reports only update what this server's own status shows.
Sending is best effort: a key server that does not answer costs the step a short timeout
at most every :data:`PUSH_EVERY` seconds and is logged once, never fails the step.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from feddpsyn.common import wire

__all__ = ["ProgressReporter", "LOG_EVERY", "PUSH_EVERY"]

log = logging.getLogger("feddpsyn.computeserver")

LOG_EVERY = 10.0
PUSH_EVERY = 2.0


class ProgressReporter:
    """Throttled logging and sending of :class:`common.wire.WorkProgress` per session."""

    def __init__(self, push: Callable[[str, wire.WorkProgress], None], *,
                 log_every: float = LOG_EVERY, push_every: float = PUSH_EVERY,
                 clock: Callable[[], float] = time.monotonic):
        self._push = push
        self._log_every = log_every
        self._push_every = push_every
        self._clock = clock
        self._logged: dict[str, float] = {}
        self._pushed: dict[str, float] = {}
        self._failing: set[str] = set()
        self._lock = threading.Lock()

    def update(self, session_id: str, progress: wire.WorkProgress) -> None:
        now = self._clock()
        with self._lock:
            log_now = now - self._logged.get(session_id, -float("inf")) >= self._log_every
            # The last report of a step always goes out, so the key server shows it done.
            push_now = (progress.done >= progress.total
                        or now - self._pushed.get(session_id, -float("inf")) >= self._push_every)
            if log_now:
                self._logged[session_id] = now
            if push_now:
                self._pushed[session_id] = now
        if log_now:
            log.info("session %s: %s", session_id, progress.text())
        if push_now:
            try:
                self._push(session_id, progress)
            except Exception as exc:  # best effort (module docstring)
                if session_id not in self._failing:
                    log.warning("session %s: progress not sent to the key server: %s",
                                session_id, f"{exc}"[:200])
                self._failing.add(session_id)
            else:
                self._failing.discard(session_id)

    def clear(self, session_id: str) -> None:
        """The step is over: the next one's first report is sent at once (and logged when
        the last line is :data:`LOG_EVERY` seconds old)."""
        with self._lock:
            self._pushed.pop(session_id, None)
