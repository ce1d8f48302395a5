"""feddpsyn.progress: the plain lines (what CI and logs get), the time left, the servers'
progress texts as steps, the wait loop, and the live bars on a terminal. Fast: a fake clock,
no server."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from feddpsyn.common import wire
from feddpsyn.progress import (
    KEEP_FINISHED,
    ProgressDisplay,
    Step,
    detail_steps,
    eta_seconds,
    format_duration,
    session_steps,
    step_text,
    wait_for,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _plain(clock: Clock, interval: float = 10.0) -> tuple[ProgressDisplay, list[str]]:
    lines: list[str] = []
    return ProgressDisplay(prefix="[demo] ", live=False, say=lines.append, clock=clock,
                           interval=interval), lines


def test_durations_read_at_a_glance():
    assert [format_duration(s) for s in (0, 4.4, 59.6, 60, 214, 3599, 3600, 3900, 90061)] == [
        "0 s", "4 s", "1 min 00 s", "1 min 00 s", "3 min 34 s", "59 min 59 s", "1 h 00 min",
        "1 h 05 min", "25 h 01 min"]
    assert format_duration(-3) == "0 s"


def test_time_left_is_the_average_rate_since_the_phase_was_first_seen():
    # 18 of 140 tasks in 214 s: 122 more at 214/18 s each
    assert eta_seconds(0, 0.0, 18, 140, 214.0) == pytest.approx(122 * 214 / 18)
    # first seen at 10 of 140: only the work done since counts
    assert eta_seconds(10, 100.0, 20, 140, 150.0) == pytest.approx(120 * 5.0)
    assert eta_seconds(10, 100.0, 10, 140, 150.0) is None  # nothing done since
    assert eta_seconds(0, 100.0, 140, 140, 150.0) == 0.0


def test_step_text_has_no_repr_and_says_what_is_left():
    step = Step("dependency scores under encryption", 18, 140, "in-process, 2 threads")
    assert step_text(step, 214, 1450.4) == (
        "dependency scores under encryption: 18 of 140 (12%), 3 min 34 s, about 24 min 10 s "
        "left (in-process, 2 threads)")
    assert step_text(Step("waiting for the key server"), 5) == "waiting for the key server: 5 s"
    assert step_text(Step("rows", 7), 61) == "rows: 7 done, 1 min 01 s"
    assert step_text(Step("releases", 3, 3), 250, finished=True) == (
        "releases: 3 of 3 (100%), done in 4 min 10 s")


def test_plain_lines_come_when_a_phase_begins_then_at_most_every_interval():
    clock = Clock()
    display, lines = _plain(clock)
    display.show([Step("releases", 0, 3), Step("scores", 0, 10, "2 threads")])
    assert lines == ["[demo] releases: 0 of 3 (0%), 0 s",
                     "[demo] scores: 0 of 10 (0%), 0 s (2 threads)"]
    clock.now += 5
    display.show([Step("releases", 0, 3), Step("scores", 2, 10, "2 threads")])
    assert len(lines) == 2  # within the interval
    clock.now += 5
    display.show([Step("releases", 0, 3), Step("scores", 3, 10, "2 threads")])
    assert lines[2] == ("[demo] releases: 0 of 3 (0%), 10 s; scores: 3 of 10 (30%), 10 s, "
                        "about 23 s left (2 threads)")
    clock.now += 15
    display.show([Step("releases", 0, 3), Step("scores", 3, 10, "2 threads")])
    assert len(lines) == 3  # nothing changed: no line, however long
    clock.now += 1
    display.show([Step("releases", 1, 3, "done: one_way")])  # scores are over
    assert lines[3] == "[demo] releases: 1 of 3 (33%), 26 s, about 52 s left (done: one_way)"
    clock.now += 9
    display.show([Step("releases", 1, 3, "done: one_way"), Step("round", 0, 4)])
    assert lines[-1] == "[demo] round: 0 of 4 (0%), 0 s"  # a new phase: at once
    display.finish()
    assert lines[-1] == ("[demo] releases: 3 of 3 (100%), done in 35 s; "
                         "round: 4 of 4 (100%), done in 0 s")
    assert not any("[" in line.removeprefix("[demo] ") or "'" in line for line in lines)


def test_a_changed_state_after_the_interval_gives_one_line():
    clock = Clock()
    display, lines = _plain(clock)
    display.show([Step("releases", 0, 3)])
    clock.now += 12
    display.show([Step("releases", 1, 3, "done: one_way")])
    assert lines == ["[demo] releases: 0 of 3 (0%), 0 s",
                     "[demo] releases: 1 of 3 (33%), 12 s, about 24 s left (done: one_way)"]


def test_not_a_terminal_means_plain_lines():
    lines: list[str] = []
    display = ProgressDisplay(say=lines.append)  # pytest captures stdout: not a terminal
    assert not display.live
    display.show([Step("phase", 1, 2)])
    display.close()
    assert lines == ["phase: 1 of 2 (50%), 0 s"]


def test_the_servers_progress_texts_as_steps():
    assert detail_steps("dependency scores under encryption: task 18 of 140 "
                        "(in-process, 2 threads)") == [
        Step("dependency scores under encryption", 18, 140, "in-process, 2 threads")]
    assert detail_steps("encrypted selection: round 1 of 4, batch task 3 of 12 "
                        "(2 Dask workers)") == [
        Step("encrypted selection", 1, 4),
        Step("encrypted selection: round 2 of 4", 3, 12, "2 Dask workers")]
    assert detail_steps("encrypted selection: round 0 of 4") == [
        Step("encrypted selection", 0, 4)]
    assert detail_steps("release one_way: chunk 1 of 3") == [Step("release one_way", 1, 3)]
    # the same with the unit after the counts
    assert detail_steps("release one_way: 0 of 1 chunks") == [
        Step("release one_way", 0, 1, unit="chunks")]
    assert detail_steps("dependency scores: 18 of 140 tasks (in-process, 2 threads)") == [
        Step("dependency scores", 18, 140, "in-process, 2 threads", "tasks")]
    assert detail_steps("encrypted selection: round 0 of 4: 3 of 12 batch tasks (x)") == [
        Step("encrypted selection", 0, 4),
        Step("encrypted selection: round 1 of 4", 3, 12, "x", "batch tasks")]
    assert detail_steps("waiting for the key server's greedy selection") == [
        Step("waiting for the key server's greedy selection")]
    assert detail_steps("") == []


def _status(state: str, uploaded: list[str], missing: list[str], done: list[str],
            detail: str = "") -> wire.SessionStatus:
    return wire.SessionStatus(session_id="s1", state=state, clients_uploaded=uploaded,
                              clients_missing=missing, releases_done=done, detail=detail)


def test_session_steps_from_both_servers_status():
    assert session_steps(_status("collecting", ["a"], ["b", "c"], [])) == [
        Step("owners uploaded", 1, 3, "waiting for b, c", estimate=False)]
    ks = _status("computing", ["a", "b"], [], ["one_way"], "selection round 0 of 4 decided")
    cs = _status("computing", ["a", "b"], [], ["one_way"],
                 "dependency scores under encryption: task 18 of 140 (in-process, 2 threads)")
    assert session_steps(ks, cs, 2) == [
        Step("releases", 1, 2, "done: one_way; selection round 0 of 4 decided",
             estimate=False),
        Step("dependency scores under encryption", 18, 140, "in-process, 2 threads")]
    assert session_steps(_status("blocked", [], [], [], "seeds do not match")) == [
        Step("blocked", note="seeds do not match")]


def test_session_steps_show_the_offline_job_until_its_sets_are_done():
    offline = wire.WorkProgress(phase="joint noise encrypted", done=12, total=48, unit="sets")
    collecting = _status("collecting", ["a"], ["b"], []).model_copy(update={"offline": offline})
    assert session_steps(collecting) == [
        Step("owners uploaded", 1, 2, "waiting for b", estimate=False),
        Step("joint noise encrypted", 12, 48, unit="sets")]
    computing = _status("computing", ["a", "b"], [], []).model_copy(update={"offline": offline})
    assert session_steps(computing, None, 2)[-1] == Step("joint noise encrypted", 12, 48,
                                                         unit="sets")
    done = offline.model_copy(update={"done": 48})
    assert session_steps(computing.model_copy(update={"offline": done}), None, 2) == [
        Step("releases", 0, 2, estimate=False)]


def test_session_steps_take_the_relayed_progress_and_the_preparation():
    # A key server that relays the compute server's progress (structured, and quoted in its
    # detail) and states its preparation: the quote is not repeated in the releases' note.
    ks = _status("computing", ["a"], [], [],
                 "selection round 1 of 4 decided; compute server: scores: 3 of 9 tasks "
                 "(2 s ago)")
    relayed = SimpleNamespace(**{**dict(ks), "progress": SimpleNamespace(
        phase="scores", done=3, total=9, unit="tasks")})
    assert session_steps(relayed, None, 3) == [
        Step("releases", 0, 3, "selection round 1 of 4 decided", estimate=False),
        Step("scores", 3, 9, unit="tasks")]
    preparing = SimpleNamespace(**{**dict(_status("collecting", [], ["a"], [])),
                                   "state": "preparing",
                                   "preparation": SimpleNamespace(phase="compiling the circuits")})
    assert session_steps(preparing) == [Step("compiling the circuits")]
    del preparing.preparation
    preparing.detail = "keys"
    assert session_steps(preparing) == [Step("preparing the session", note="keys")]


def test_a_phase_stays_while_one_of_its_parts_is_shown():
    clock = Clock()
    display, lines = _plain(clock)
    display.show([Step("encrypted selection", 0, 4)])
    display.show([Step("encrypted selection: round 1 of 4", 3, 12)])
    clock.now += 10
    display.show([Step("encrypted selection", 1, 4)])
    assert lines == ["[demo] encrypted selection: 0 of 4 (0%), 0 s",
                     "[demo] encrypted selection: round 1 of 4: 3 of 12 (25%), 0 s",
                     "[demo] encrypted selection: 1 of 4 (25%), 10 s, about 30 s left"]


def test_wait_for_shows_each_poll_and_completes_the_bars():
    clock = Clock()
    display, lines = _plain(clock, interval=1.0)
    polls = iter([[Step("owners uploaded", 1, 2)], [Step("owners uploaded", 2, 2)],
                  [Step("releases", 0, 2)], [Step("releases", 1, 2, unit="releases")], None])
    wait_for(lambda: next(polls), timeout=60, every=0.5, display=display, sleep=clock.sleep,
             clock=clock)
    assert lines == ["[demo] owners uploaded: 1 of 2 (50%), 0 s",
                     "[demo] releases: 0 of 2 (0%), 0 s",
                     "[demo] releases: 2 of 2 releases (100%), done in 1 s"]


def test_a_finished_phase_keeps_only_a_note_that_matches_its_count():
    clock = Clock()
    display, lines = _plain(clock)
    display.show([Step("releases", 1, 2, "done: one_way"), Step("owners", 2, 2, "all in")])
    clock.now += 3
    display.finish()
    # Filled in to 2 of 2, the note shown at 1 of 2 would say one release is still to come.
    assert lines[-1] == ("[demo] releases: 2 of 2 (100%), done in 3 s; "
                         "owners: 2 of 2 (100%), done in 3 s (all in)")


def test_wait_for_gives_up_after_its_timeout():
    clock = Clock()
    display, lines = _plain(clock)
    with pytest.raises(TimeoutError, match="not done after 5 s"):
        wait_for(lambda: [Step("preparing the session", note="compiling")], timeout=5,
                 display=display, sleep=clock.sleep, clock=clock)
    assert lines == ["[demo] preparing the session: 0 s (compiling)"]


def test_live_bars_on_a_terminal():
    clock = Clock()
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    with ProgressDisplay(console=console, clock=clock) as display:
        assert display.live
        display.show([Step("releases", 0, 3), Step("scores", 0, 140, "2 threads")])
        clock.now += 214
        display.show([Step("releases", 1, 3), Step("scores", 18, 140, "2 threads")])
        display.message("a line above the bars")
    text = out.getvalue()
    assert "a line above the bars" in text
    assert "18/140" in text and "3 min 34 s, 24 min 10 s left" in text and "2 threads" in text
    assert "1/3" in text


def test_a_long_session_keeps_the_last_finished_bars_on_the_screen():
    clock = Clock()
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    with ProgressDisplay(console=console, clock=clock) as display:
        for round_ in range(20):
            display.show([Step("releases", 1, 3), Step(f"round {round_ + 1}", 0, 12)])
            clock.now += 1
        shown = [task.description for task in display._progress.tasks]
    assert shown == ["releases"] + [f"round {r}" for r in range(21 - KEEP_FINISHED - 1, 21)]


def test_no_time_left_for_units_of_unequal_size():
    clock = Clock()
    display, lines = _plain(clock)
    display.show([Step("releases", 0, 3, estimate=False)])
    clock.now += 30
    display.show([Step("releases", 1, 3, estimate=False)])
    assert lines[-1] == "[demo] releases: 1 of 3 (33%), 30 s"
