"""Progress a person watches: a live bar per phase on a terminal, plain lines elsewhere.

On a terminal, :class:`ProgressDisplay` draws one bar per phase (rich's live display): the
phase, done/total, the time since the phase began and, once the total is known and some
work is done, the time left. When the output is not a terminal (CI, a pipe, a log file), it
writes one plain line when a phase begins, then at most one line every ``interval`` seconds
(10 by default) while anything changes: never a Python repr, and never the same line twice.

A wait loop needs only :func:`wait_for` and a ``poll`` that returns the :class:`Step` s to
show, or None once the wait is over::

    def poll():
        status = agent.status()
        if status.state == "ready":
            return None
        return [Step("preparing the session", note=status.detail)]

    wait_for(poll, timeout=600, prefix="[session] ")

:func:`session_steps` turns the two servers' status of a session into steps (owners
uploaded, releases, and the compute server's current task with its count).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from feddpsyn.common import wire

__all__ = ["Step", "ProgressDisplay", "wait_for", "session_steps", "detail_steps",
           "format_duration", "eta_seconds", "step_text", "DEFAULT_INTERVAL", "KEEP_FINISHED"]

DEFAULT_INTERVAL = 10.0  # seconds between two plain lines about the same phases
KEEP_FINISHED = 6  # finished bars left on the screen (a long session has many rounds)


@dataclass(frozen=True)
class Step:
    """What one phase has done: ``done`` of ``total`` ``unit`` (either count may be
    unknown), and a short note shown after them (where the work runs, what is done)."""

    phase: str
    done: int | None = None
    total: int | None = None
    note: str = ""
    unit: str = ""  # what is counted, after the counts ("tasks", "chunks")
    estimate: bool = True  # units alike enough for a time left (not releases of any size)


def format_duration(seconds: float) -> str:
    """``45 s``, ``3 min 04 s``, ``1 h 05 min``: what a person reads at a glance."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def eta_seconds(first_done: int, first_at: float, done: int, total: int,
                now: float) -> float | None:
    """Seconds left at the average rate since the phase was first seen (``first_done`` units
    done at time ``first_at``); None until a unit has been done since then."""
    if done >= total:
        return 0.0
    if done <= first_done or now <= first_at:
        return None
    return (total - done) * (now - first_at) / (done - first_done)


@dataclass(eq=False)  # a phase is itself: compared by identity
class _Phase:
    step: Step
    started: float  # when the phase was first seen
    first_done: int | None
    ended: float | None = None  # when it was last seen, once it is over
    task: TaskID | None = None  # its bar on a terminal

    @property
    def finished(self) -> bool:
        return self.ended is not None

    def elapsed(self, now: float) -> float:
        return (self.ended if self.ended is not None else now) - self.started

    def update(self, step: Step) -> None:
        if self.first_done is None and step.done is not None:
            self.first_done = step.done
        self.step = step

    def eta(self, now: float) -> float | None:
        s = self.step
        if not s.estimate or s.done is None or s.total is None or self.first_done is None:
            return None
        return eta_seconds(self.first_done, self.started, s.done, s.total, now)


def step_text(step: Step, elapsed: float, eta: float | None = None,
              finished: bool = False) -> str:
    """One phase as plain text: ``dependency scores: 18 of 140 (13%), 3 min 34 s, about
    26 min left (in-process, 2 threads)``."""
    parts = []
    unit = f" {step.unit}" if step.unit else ""
    if step.done is not None and step.total is not None:
        percent = 100 * step.done // step.total if step.total else 100
        parts.append(f"{step.done} of {step.total}{unit} ({percent}%)")
    elif step.done is not None:
        parts.append(f"{step.done}{unit} done")
    parts.append(("done in " if finished else "") + format_duration(elapsed))
    if eta is not None and not finished and step.total is not None and step.done != step.total:
        parts.append(f"about {format_duration(eta)} left")
    text = f"{step.phase}: {', '.join(parts)}"
    return text + (f" ({step.note})" if step.note else "")


class ProgressDisplay:
    """Phases and their progress, shown live on a terminal or as plain lines (module
    docstring). ``show`` takes every phase in progress at once; a phase shown before and
    absent now is over (its bar is completed). Use it as a context manager, or call
    ``close``.

    ``live``: None decides by whether the output is a terminal; ``stderr``: show it on
    stderr (stdout kept for a command's result); ``say`` writes the plain lines (printed by
    default), each after ``prefix``; ``clock`` is for the tests."""

    def __init__(self, *, prefix: str = "", live: bool | None = None,
                 say: Callable[[str], None] | None = None, stderr: bool = False,
                 interval: float = DEFAULT_INTERVAL,
                 clock: Callable[[], float] = time.monotonic, console: Console | None = None):
        stream = sys.stderr if stderr else sys.stdout
        self.prefix = prefix
        self.say = say or (lambda text: print(text, file=stream, flush=True))
        self.interval = interval
        self.clock = clock
        self._phases: dict[str, _Phase] = {}
        self._finished_bars: list[_Phase] = []  # on a terminal, oldest first
        self._last_line_at: float | None = None
        self._last_state: tuple[Step, ...] = ()
        self._progress: Progress | None = None
        if console is None and (live is None or live):
            from rich.console import Console

            console = Console(stderr=stderr)
        if live is None:
            assert console is not None
            live = console.is_terminal and not console.is_dumb_terminal
        if live:
            self._progress = _live_progress(self, console)
            self._progress.start()

    @property
    def live(self) -> bool:
        return self._progress is not None

    def __enter__(self) -> ProgressDisplay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the live display (the bars stay on the screen as they are)."""
        if self._progress is not None:
            self._progress.refresh()
            self._progress.stop()
            self._progress = None

    def message(self, text: str) -> None:
        """A line of its own: above the bars on a terminal, else through ``say``."""
        if self._progress is not None:
            self._progress.console.print(self.prefix + text, markup=False, highlight=False)
        else:
            self.say(self.prefix + text)

    def show(self, steps: Iterable[Step]) -> None:
        """Every phase in progress now; phases no longer among them are over."""
        now = self.clock()
        steps = list(steps)
        current = {s.phase for s in steps}
        for phase in self._phases.values():
            name = phase.step.phase
            # a phase is over once it is not shown, unless one of its parts is ("encrypted
            # selection" while "encrypted selection: round 2 of 4" is shown)
            if not phase.finished and name not in current and not any(
                    other.startswith(name + ":") for other in current):
                self._finish(phase, now)
        new: list[_Phase] = []
        for step in steps:
            seen = self._phases.get(step.phase)
            if seen is None:
                seen = self._phases[step.phase] = _Phase(step, now, step.done)
                new.append(seen)
            else:  # a phase seen again after a pause goes on from where it was
                if seen in self._finished_bars:
                    self._finished_bars.remove(seen)
                seen.ended = None
                seen.update(step)
            self._draw(seen)
        if self._progress is None:
            self._plain(new, now)

    def finish(self) -> None:
        """Every phase is over: each bar whose total is known is completed (and, as plain
        text, one last line says so)."""
        now = self.clock()
        ending = [phase for phase in self._phases.values() if not phase.finished]
        for phase in ending:
            self._finish(phase, now)
        if self._progress is None and ending:
            self.say(self.prefix + "; ".join(step_text(p.step, p.elapsed(now), finished=True)
                                             for p in ending))

    # ---------------------------------------------------------------- internals
    def _finish(self, phase: _Phase, now: float) -> None:
        s = phase.step
        if s.total is not None and s.done != s.total:
            # The note spoke of the count last shown ("done: one_way" at 1 of 2): at the
            # total it would contradict the count it stands beside.
            phase.step = replace(s, done=s.total, note="")
        phase.ended = now
        self._draw(phase)
        if self._progress is not None and phase.task is not None:
            self._finished_bars.append(phase)
            while len(self._finished_bars) > KEEP_FINISHED:
                old = self._finished_bars.pop(0)
                if old.finished and old.task is not None:
                    self._progress.remove_task(old.task)
                    old.task = None

    def _draw(self, phase: _Phase) -> None:
        if self._progress is None:
            return
        s = phase.step
        total, completed = s.total, s.done or 0
        if phase.finished and total is None:
            total, completed = 1, 1  # a full bar, not a pulse, once it is over
        if phase.task is None:
            phase.task = self._progress.add_task(s.phase, total=total, completed=completed,
                                                 phase=phase, note=s.note)
        else:
            self._progress.update(phase.task, total=total, completed=completed, note=s.note)

    def _plain(self, new: Sequence[_Phase], now: float) -> None:
        active = tuple(p.step for p in self._phases.values() if not p.finished)
        if new:
            for phase in new:
                self.say(self.prefix + step_text(phase.step, phase.elapsed(now),
                                                 phase.eta(now)))
        elif (active and active != self._last_state
              and (self._last_line_at is None
                   or now - self._last_line_at >= self.interval)):
            self.say(self.prefix + "; ".join(
                step_text(p.step, p.elapsed(now), p.eta(now))
                for p in self._phases.values() if not p.finished))
        else:
            return
        self._last_line_at, self._last_state = now, active


def _live_progress(display: ProgressDisplay, console: Console | None) -> Progress:
    """rich's Progress with the columns of the module docstring; elapsed and time left come
    from the display's own phases (and clock), as in the plain lines."""
    from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn
    from rich.text import Text

    class _Counts(ProgressColumn):
        def render(self, task: Any) -> Text:
            step = task.fields["phase"].step
            if step.done is None:
                return Text("")
            counts = f"{step.done}/{step.total}" if step.total is not None else f"{step.done}"
            return Text(counts + (f" {step.unit}" if step.unit else ""),
                        style="progress.download")

    class _Times(ProgressColumn):
        def render(self, task: Any) -> Text:
            phase: _Phase = task.fields["phase"]
            now = display.clock()
            if phase.finished:
                return Text(f"done in {format_duration(phase.elapsed(now))}",
                            style="progress.elapsed")
            eta = phase.eta(now)
            text = format_duration(phase.elapsed(now))
            if eta is not None and phase.step.done != phase.step.total:
                text += f", {format_duration(eta)} left"
            return Text(text, style="progress.elapsed")

    return Progress(TextColumn("{task.description}"), BarColumn(bar_width=30), _Counts(),
                    _Times(), TextColumn("{task.fields[note]}", style="dim"),
                    console=console, refresh_per_second=4, transient=False)


def wait_for(poll: Callable[[], Sequence[Step] | None], *, timeout: float,
             every: float = 0.5, display: ProgressDisplay | None = None, prefix: str = "",
             sleep: Callable[[float], None] = time.sleep,
             clock: Callable[[], float] = time.monotonic) -> None:
    """Call ``poll`` every ``every`` seconds and show the steps it returns, until it returns
    None (the wait is over: every bar is completed) or ``timeout`` seconds have passed
    (TimeoutError). An exception from ``poll`` ends the wait as it is. ``display``: one to
    reuse (left open), else a new one with ``prefix`` (closed on return)."""
    own = display is None
    shown = display or ProgressDisplay(prefix=prefix, clock=clock)
    deadline = clock() + timeout
    try:
        while True:
            steps = poll()
            if steps is None:
                shown.finish()
                return
            shown.show(steps)
            if clock() > deadline:
                raise TimeoutError(f"not done after {format_duration(timeout)}")
            sleep(every)
    finally:
        if own:
            shown.close()


# ------------------------------------------------------- the two servers' session status
# A count in a server's progress text, its unit before or after it: "task 18 of 140",
# "round 0 of 4", "18 of 140 tasks", "0 of 1 chunks".
_COUNT = re.compile(r"(?:(?P<before>[a-z][a-z ]*?) )?(?P<done>\d+) of (?P<total>\d+)"
                    r"(?: (?P<after>[a-z]+(?: [a-z]+)*))?")
_NOTE = re.compile(r"^(?P<text>.*?) \((?P<note>[^()]*)\)$")
_COMPUTE_SERVER = "compute server:"  # the key server's detail quoting the compute server's


def detail_steps(detail: str) -> list[Step]:
    """A server's progress text as steps: ``dependency scores under encryption: task 18 of
    140 (in-process, 2 threads)`` is one phase at 18 of 140 with its note; ``encrypted
    selection: round 1 of 4, batch task 3 of 12`` is the rounds (1 of 4 done) and that
    round's batch tasks (3 of 12); text without a count is a phase of its own."""
    text, note = detail.strip(), ""
    if m := _NOTE.match(text):
        text, note = m.group("text"), m.group("note")
    counts = list(_COUNT.finditer(text))
    if not counts:
        return [Step(text, note=note)] if text else []
    outer = counts[0]
    head = text[:outer.start()].rstrip(" :,") or (outer["before"] or "progress")
    steps = [Step(head, int(outer["done"]), int(outer["total"]),
                  note if len(counts) == 1 else "", outer["after"] or "")]
    for inner in counts[1:]:
        # an outer count names the item in progress, counted from 0 (the compute server's
        # rounds): the inner count is that item's, the round "1 of 4" being the second.
        what = outer["before"] or outer["after"] or "part"
        steps.append(Step(f"{head}: {what} {int(outer['done']) + 1} of {outer['total']}",
                          int(inner["done"]), int(inner["total"]), note,
                          inner["after"] or ""))
    return steps


def _work_step(progress: Any) -> Step:
    """A structured ``progress`` of a status (phase, done, total, unit) as a step."""
    return Step(progress.phase, progress.done, progress.total, unit=progress.unit)


def session_steps(status: wire.SessionStatus, compute: wire.SessionStatus | None = None,
                  planned_releases: int | None = None) -> list[Step]:
    """The key server's ``status`` of a session (and the compute server's, ``compute``) as
    steps: the preparation's phase while preparing, the owners uploaded while collecting;
    then the releases done of those planned (the key server's detail as their note) and the
    compute server's current task, from its own status or as the key server relays it; and
    the key server's offline job while it has sets left to encrypt."""
    state = str(status.state)
    if state == "preparing":
        preparation = getattr(status, "preparation", None)
        if preparation is not None:
            return [Step(preparation.phase)]
        return [Step("preparing the session", note=status.detail)]
    # The key server's offline job while it still has sets to encrypt (a release waits for
    # the chunks it reaches).
    offline = getattr(status, "offline", None)
    pending = [] if offline is None or offline.done >= offline.total else [_work_step(offline)]
    if state == "collecting":
        owners = len(status.clients_uploaded) + len(status.clients_missing)
        missing = ", ".join(status.clients_missing)
        return [Step("owners uploaded", len(status.clients_uploaded), owners,
                     f"waiting for {missing}" if missing else "", estimate=False)] + pending
    if state not in ("computing", "released"):
        return [Step(state, note=status.detail)]
    done = ", ".join(status.releases_done)
    notes = [f"done: {done}" if done else ""] + [
        part for part in status.detail.split("; ") if not part.startswith(_COMPUTE_SERVER)]
    steps = [Step("releases", len(status.releases_done), planned_releases,
                  "; ".join(n for n in notes if n), estimate=False)]
    work = detail_steps(compute.detail) if compute is not None else []
    relayed = getattr(status, "progress", None) or getattr(compute, "progress", None)
    if not work and relayed is not None:
        work = [_work_step(relayed)]
    return steps + [s for s in work if s.phase != "releases"] + pending
