"""A session's preparation as a job (``keyserver.preparation``): ``POST /sessions`` answers
202 before anything is compiled, the session shows "preparing" then "ready" (or "failed"
with the reason), requests on it wait with a 409 until then, a restart resumes or fails
it, the server answers its peer while a preparation runs, and the compute server's long
steps show in ``session status`` (``computeserver.progress``).

The served tests run the key server in this process (uvicorn on 127.0.0.1) with a
preparation held at a gate (a ``threading.Event``) the test opens: what the server answers
while the gate is shut, it answered before its preparation finished, with no clock in the
assertion. Every wait here is bounded.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from concrete import fhe

import feddpsyn.keyserver.preparation as preparation
from feddpsyn.common import wire
from feddpsyn.common.credentials import new_token
from feddpsyn.common.jobs import ChildFailed, JobStopped, run_in_child
from feddpsyn.common.serving import Database, ServiceError, write_private
from feddpsyn.computeserver.progress import ProgressReporter
from feddpsyn.dp.noise_pool import draw_pool
from feddpsyn.keyserver.coins import ahead_of_time
from feddpsyn.keyserver.keys import SessionKeys
from feddpsyn.keyserver.preparation import MAX_ATTEMPTS, prepare_files
from feddpsyn.keyserver.service import KeyServer
from tests import job_targets
from tests.ports import loopback_port

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = {"name": "tiny", "columns": [
    {"name": "age", "type": "continuous", "min": 0, "max": 100, "bins": 4},
    {"name": "sex", "type": "categorical", "i2s": ["F", "M"]},
    {"name": "smoker", "type": "categorical", "i2s": ["no", "yes", "unknown"]},
]}
CLIENTS = ["alice", "bob"]
PEER = "peer-token-of-the-preparation-tests"


def request(selection: str = "none") -> wire.SessionCreate:
    return wire.SessionCreate(schema=SCHEMA, clients=CLIENTS, parameter_set="test-small",
                              budget=wire.BudgetSpec(epsilon=50, delta=1e-6), max_rows=1000,
                              selection=wire.SelectionRequest(mode=selection))


def wait_for(condition, what: str, timeout: float = 120):
    """Poll ``condition`` until it returns something true (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")


class Gate:
    """A preparation that waits at a gate the test opens, then makes the session's files
    (in this thread: the test-small circuit compiles in under a second); counts what it
    started and finished."""

    def __init__(self, make_files: bool = True):
        self.open = threading.Event()
        self.entered = threading.Event()
        self.finished = 0
        self.make_files = make_files

    def __call__(self, plan, n_clients, directory, *, report, stop):
        # The phase first: a test that sees ``entered`` then reads it from the status.
        report("waiting at the test's gate")
        self.entered.set()
        deadline = time.monotonic() + 300
        while not self.open.wait(0.05):  # bounded by the deadline and the server's stop
            if stop.is_set():
                raise JobStopped("the server is stopping")
            if time.monotonic() > deadline:
                raise RuntimeError("the test never opened the gate")
        if self.make_files:
            result = prepare_files(plan, n_clients, directory, report=report)
        else:
            directory.mkdir(parents=True)
            result = None
        self.finished += 1
        return result


def refusing(plan, n_clients, directory, *, report, stop):
    report("compiling something that cannot compile")
    raise RuntimeError("the test's compiler gave up")


def no_files(plan, n_clients, directory, *, report, stop):
    """A preparation that makes no files (a session without a selection needs none to be
    recorded; nothing here uploads to it)."""
    directory.mkdir(parents=True)
    return None


# ------------------------------------------------------------------ the job, in process
def test_bad_requests_are_refused_at_once_and_nothing_is_stored(tmp_path, monkeypatch):
    # The request waits for its plan however loaded the machine (the slow-plan path is
    # tests/servers/test_session_limits.py's).
    monkeypatch.setattr(preparation, "ACCEPT_WAIT_S", 300.0)
    service = KeyServer(tmp_path, prepare=no_files)
    # a schema of the documented shape whose columns share a name: only the plan sees it
    bad_schema = request().model_copy(update={"schema_": {"columns": [
        {"name": "a", "type": "categorical", "i2s": ["x"]},
        {"name": "a", "type": "categorical", "i2s": ["y"]}]}})
    too_small = request().model_copy(update={"max_rows": 30000, "budget": wire.BudgetSpec(
        epsilon=0.01, delta=1e-6)})
    for bad, status, needle in ((bad_schema, 409, "schema"), (too_small, 409, "does not fit")):
        with pytest.raises(ServiceError) as info:
            service.create_session(bad)
        assert info.value.status == status and needle in info.value.message
    with service.db.connect() as conn:
        for table in ("session_preparation", "client_tokens", "sessions"):
            assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0, table
    assert service.preparation.jobs.pending() == 0
    service.close()


def test_a_session_is_preparing_then_ready_and_says_so(tmp_path):
    gate = Gate(make_files=False)
    service = KeyServer(tmp_path, prepare=gate)
    accepted = service.create_session(request())
    sid = accepted.session_id
    assert accepted.state == "preparing" and accepted.status_url == f"/sessions/{sid}/status"
    assert set(accepted.client_tokens) == set(CLIENTS)
    wait_for(gate.entered.is_set, "the job started")
    status = service.status(sid)
    assert status.state == "preparing" and status.clients_missing == CLIENTS
    assert status.preparation.phase == "waiting at the test's gate"
    assert "waiting at the test's gate" in status.detail
    for call in (service.public, service.plan, service.ledger):
        with pytest.raises(ServiceError) as info:
            call(sid)
        assert info.value.status == 409 and "still being prepared" in info.value.message
    with pytest.raises(ServiceError) as info:
        service.require_ready(sid)
    assert info.value.status == 409 and "wait until its status" in info.value.message
    assert service.session_ids() == []  # the compute server is not told of it yet
    assert set(service.client_token_hashes(sid)) == set(CLIENTS)  # credentials check first
    gate.open.set()
    public = service.preparation.wait_ready(sid, timeout=60)
    assert public.session_id == sid and service.session_ids() == [sid]
    status = service.status(sid)
    assert status.state == "collecting" and status.preparation.state == "ready"
    service.require_ready(sid)
    service.close()


def test_a_failed_preparation_says_why_and_the_session_refuses_work(tmp_path):
    service = KeyServer(tmp_path, prepare=refusing)
    sid = service.create_session(request()).session_id
    status = wait_for(lambda: (s := service.status(sid)).state == "failed" and s,
                      "the preparation failed")
    assert status.preparation.reason == "RuntimeError: the test's compiler gave up"
    assert "compiling something that cannot compile" in status.detail
    with pytest.raises(ServiceError) as info:
        service.require_ready(sid)
    assert info.value.status == 409
    assert "failed while it was being prepared" in info.value.message
    assert "the test's compiler gave up" in info.value.message
    assert not list((tmp_path / "sessions").glob(f".{sid}.*"))  # the work folder is gone
    service.close()


def test_a_full_queue_refuses_new_sessions_with_503(tmp_path):
    gate = Gate(make_files=False)
    service = KeyServer(tmp_path, prepare=gate)
    service.preparation.jobs.max_pending = 1
    first = service.create_session(request()).session_id
    with pytest.raises(ServiceError) as info:
        service.create_session(request())
    assert info.value.status == 503 and "being prepared" in info.value.message
    gate.open.set()
    service.preparation.wait_ready(first, timeout=60)
    service.create_session(request())  # room again
    service.close()


def _stop_mid_preparation(state: Path) -> str:
    """A key server stopped while it prepares a session (the job sees the stop)."""
    gate = Gate(make_files=False)
    service = KeyServer(state, prepare=gate)
    sid = service.create_session(request()).session_id
    wait_for(gate.entered.is_set, "the job started")
    service.close()
    return sid


def test_a_restart_resumes_a_session_left_preparing(tmp_path):
    sid = _stop_mid_preparation(tmp_path)
    restarted = KeyServer(tmp_path, prepare=no_files)
    status = restarted.status(sid)
    assert status.state == "preparing"  # not failed: it resumes at the start
    restarted.preparation.resume()  # what the app's startup does
    restarted.preparation.wait_ready(sid, timeout=60)
    with restarted.db.connect() as conn:
        attempts = conn.execute("SELECT attempts FROM session_preparation WHERE id = ?",
                                (sid,)).fetchone()[0]
    assert attempts == 2
    restarted.close()


def test_a_session_cut_short_too_often_is_failed_with_the_reason(tmp_path):
    sid = _stop_mid_preparation(tmp_path)
    for _ in range(MAX_ATTEMPTS - 1):  # bounded: each restart is cut short again
        gate = Gate(make_files=False)
        again = KeyServer(tmp_path, prepare=gate)
        again.preparation.resume()
        wait_for(gate.entered.is_set, "the resumed job started")
        again.close()
    last = KeyServer(tmp_path, prepare=no_files)
    last.preparation.resume()
    status = last.status(sid)
    assert status.state == "failed"
    assert f"cut short {MAX_ATTEMPTS} times" in status.preparation.reason
    last.close()


def test_a_restart_under_other_plan_rules_fails_the_session(tmp_path):
    sid = _stop_mid_preparation(tmp_path)
    db = Database(tmp_path / "keyserver.sqlite", "")
    with db.transaction() as conn:
        draft = json.loads(conn.execute("SELECT draft_json FROM session_preparation WHERE "
                                        "id = ?", (sid,)).fetchone()[0])
        draft["rho_total"] = "1/3"  # what another version's rules would have published
        conn.execute("UPDATE session_preparation SET draft_json = ? WHERE id = ?",
                     (json.dumps(draft), sid))
    restarted = KeyServer(tmp_path, prepare=no_files)
    restarted.preparation.resume()
    status = restarted.status(sid)
    assert status.state == "failed" and "plan rules changed" in status.preparation.reason
    restarted.close()


def test_status_shows_the_compute_servers_progress(tmp_path):
    service = KeyServer(tmp_path, prepare=no_files)
    sid = service.create_session(request("noisy-greedy")).session_id
    service.preparation.wait_ready(sid, timeout=60)
    with service.db.transaction() as conn:  # every owner's upload, as the intake records it
        for client in CLIENTS:
            conn.execute("INSERT INTO masked (session_id, client_id, commitment, digest, "
                         "received) VALUES (?, ?, ?, ?, ?)",
                         (sid, client, "0" * 64, "0" * 64, time.time()))
    assert service.status(sid).state == "computing" and service.status(sid).progress is None
    service.record_progress(sid, wire.WorkProgress(
        phase="noisy-greedy scores: InDif of 3 pairs under encryption", done=7, total=12))
    status = service.status(sid)
    assert status.progress.done == 7 and status.progress.total == 12
    assert status.progress.age is not None and status.progress.age >= 0
    assert ("compute server: noisy-greedy scores: InDif of 3 pairs under encryption: 7 of 12 "
            "tasks") in status.detail
    with pytest.raises(ServiceError) as info:
        service.record_progress("s-unknown", wire.WorkProgress(phase="x", done=0, total=1))
    assert info.value.status == 404
    service.close()


def test_progress_is_logged_at_most_every_10_s_and_sent_at_most_every_2_s(caplog):
    now = [0.0]
    sent: list[tuple[float, int]] = []
    reporter = ProgressReporter(lambda sid, p: sent.append((now[0], p.done)),
                                clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="feddpsyn.computeserver"):
        for step in range(601):  # a step of 60 s, reporting every 0.1 s
            now[0] = step / 10
            reporter.update("s-1", wire.WorkProgress(phase="scores", done=step, total=600,
                                                     unit="scores"))
    logged = [r for r in caplog.records if "scores:" in r.getMessage()]
    assert 6 <= len(logged) <= 7  # at 0, 10, ..., 60 s
    times = [t for t, _ in sent]
    assert all(b - a >= 2 - 1e-9 for a, b in zip(times[:-2], times[1:-1], strict=True))
    assert sent[-1] == (60.0, 600)  # the last report always goes out
    assert len(sent) <= 32
    # A key server that does not answer: the step goes on, one warning.
    failing = ProgressReporter(lambda sid, p: (_ for _ in ()).throw(OSError("down")),
                               clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="feddpsyn.computeserver"):
        caplog.clear()
        for step in range(50):
            now[0] = 100 + step
            failing.update("s-2", wire.WorkProgress(phase="p", done=step, total=100))
    assert len([r for r in caplog.records if "not sent" in r.getMessage()]) == 1


def test_a_child_relays_its_phases_and_its_outcome():
    stop = threading.Event()
    phases: list[str] = []
    assert run_in_child(job_targets.phases_then_sum, ([1, 2, 3],), stop=stop,
                        on_phase=phases.append) == 6
    assert phases == ["phase 0", "phase 1", "phase 2"]
    with pytest.raises(ChildFailed, match="ValueError: no such thing"):
        run_in_child(job_targets.refuse, ("no such thing",), stop=stop)
    with pytest.raises(ChildFailed, match="exited with code 3"):
        run_in_child(job_targets.vanish, (3,), stop=stop)
    # The server stops: the child is terminated, the job says so.
    seen: list[str] = []

    def stop_when_sleeping(text: str) -> None:
        seen.append(text)
        stop.set()

    with pytest.raises(JobStopped):
        run_in_child(job_targets.sleep_long, (600.0,), stop=stop, on_phase=stop_when_sleeping)
    assert seen == ["sleeping"]


# ------------------------------------------------------------------ served, in process
class InProcessKeyServer:
    """The key server app under uvicorn on 127.0.0.1 in this process, with its
    preparation at ``gate``."""

    def __init__(self, state: Path, gate: Gate):
        import uvicorn

        from feddpsyn.keyserver.app import create_app

        self.state = state
        self.app = create_app(state, PEER, prepare=gate)
        port = loopback_port()
        self.url = f"http://127.0.0.1:{port}"
        self._server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=port,
                                                     log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        wait_for(lambda: self._server.started, "the key server started", timeout=30)
        self.operator = (state / "operator.token").read_text().strip()

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(30)


@pytest.fixture
def gated(tmp_path):
    gate = Gate()
    server = InProcessKeyServer(tmp_path / "ks", gate)
    yield server, gate
    gate.open.set()
    server.stop()


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_post_answers_202_before_the_preparation_and_uploads_wait_for_ready(gated):
    server, gate = gated
    body = request().model_dump_json(by_alias=True)
    r = httpx.post(f"{server.url}/sessions", content=body, timeout=60,
                   headers={**_auth(server.operator), "Content-Type": "application/json"})
    # Answered while the preparation cannot have finished: it waits at a gate still shut.
    assert r.status_code == 202, r.text
    assert gate.finished == 0 and not gate.open.is_set()
    accepted = wire.SessionAccepted.model_validate_json(r.content)
    sid = accepted.session_id
    assert r.headers["location"] == accepted.status_url == f"/sessions/{sid}/status"
    alice = _auth(accepted.client_tokens["alice"])
    wait_for(gate.entered.is_set, "the job started")
    status = wire.SessionStatus.model_validate_json(
        httpx.get(server.url + accepted.status_url, headers=alice).content)
    assert status.state == "preparing" and status.preparation.state == "preparing"
    masked = {"commitment": "a" * 64, "values": [1] * 35}
    url = f"{server.url}/sessions/{sid}/clients/alice/masked"
    early = httpx.put(url, json=masked, headers=alice)
    assert early.status_code == 409, early.text
    assert "still being prepared" in early.json()["detail"]
    assert "wait until its status" in early.json()["detail"]
    assert httpx.put(url, json=masked, headers=_auth("not-a-token")).status_code == 403
    public = httpx.get(f"{server.url}/sessions/{sid}", headers=alice)
    assert public.status_code == 409 and "still being prepared" in public.json()["detail"]
    ledger = httpx.get(f"{server.url}/sessions/{sid}/ledger", headers=_auth(server.operator))
    assert ledger.status_code == 409
    assert gate.finished == 0
    gate.open.set()
    ready = wait_for(lambda: (s := wire.SessionStatus.model_validate_json(httpx.get(
        server.url + accepted.status_url, headers=alice).content)).state != "preparing" and s,
        "the session became ready")
    assert ready.state == "collecting" and ready.preparation.state == "ready"
    assert gate.finished == 1
    public = wire.SessionPublic.model_validate_json(
        httpx.get(f"{server.url}/sessions/{sid}", headers=alice).content)
    assert public.total_cells == 35
    stored = httpx.put(url, json=masked, headers=alice)
    assert stored.status_code == 200 and stored.json()["stored"] is True


def test_a_peer_request_is_answered_while_a_preparation_runs(gated):
    server, gate = gated
    r = httpx.post(f"{server.url}/sessions", content=request().model_dump_json(by_alias=True),
                   headers={**_auth(server.operator), "Content-Type": "application/json"},
                   timeout=60)
    assert r.status_code == 202, r.text
    sid = r.json()["session_id"]
    wait_for(gate.entered.is_set, "the job started")
    peer = _auth(PEER)
    # The job is running (held at the gate): the peer's calls are answered meanwhile.
    listed = httpx.get(f"{server.url}/peer/sessions", headers=peer, timeout=30)
    assert listed.status_code == 200 and listed.json() == []  # not ready: not listed
    one = httpx.get(f"{server.url}/peer/sessions/{sid}", headers=peer, timeout=30)
    assert one.status_code == 409 and "still being prepared" in one.json()["detail"]
    assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
    assert gate.entered.is_set() and not gate.open.is_set() and gate.finished == 0
    gate.open.set()
    wait_for(lambda: httpx.get(f"{server.url}/peer/sessions", headers=peer).json() == [sid],
             "the session is listed once ready")


def feddpsyn(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "feddpsyn.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_session_create_waits_with_progress_or_returns_at_once(gated, tmp_path):
    server, gate = gated
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    operator = str(server.state / "operator.token")
    common = ["--keyserver", server.url, "--operator-token-file", operator, "--schema",
              str(schema), "--clients", ",".join(CLIENTS), "--epsilon", "50", "--delta",
              "1e-6", "--parameter-set", "test-small", "--max-rows", "1000", "--selection",
              "none"]
    # --no-wait: accepted, tokens written, back at once (the gate is shut).
    result = feddpsyn("session", "create", *common, "--tokens-dir", str(tmp_path / "a"),
                      "--no-wait", "--noise", "two-server")
    assert result.returncode == 0, result.stderr
    assert "accepted, preparing" in result.stdout and gate.finished == 0
    sid = result.stdout.split()[1].rstrip(":")
    # --noise reaches the request the key server keeps; a bad value is refused before it.
    with server.app.state.service.db.connect() as conn:
        stored = conn.execute("SELECT request_json FROM session_preparation WHERE id = ?",
                              (sid,)).fetchone()
    assert json.loads(stored["request_json"])["noise"] == "two-server"
    refused = feddpsyn("session", "create", *common, "--tokens-dir", str(tmp_path / "x"),
                       "--no-wait", "--noise", "loud")
    assert refused.returncode == 2 and "--noise is auto, joint or two-server" in refused.stderr
    assert not (tmp_path / "x").exists()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["alice.token", "bob.token"]
    status = feddpsyn("session", "status", "--keyserver", server.url, "--session", sid,
                      "--operator-token-file", operator)
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith(f"session {sid}: preparing; ")
    # A wait that runs out: the tokens are kept, the session goes on preparing.
    result = feddpsyn("session", "create", *common, "--tokens-dir", str(tmp_path / "b"),
                      "--timeout", "2")
    assert result.returncode == 1
    assert "is not ready after 2 s" in result.stderr and "session status" in result.stderr
    assert "preparing: " in result.stderr  # the progress line: phase and elapsed seconds
    assert (tmp_path / "b" / "alice.token").exists()
    # The default wait: returns once the session is ready.
    gate.open.set()
    result = feddpsyn("session", "create", *common, "--tokens-dir", str(tmp_path / "c"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("session s-") and "35 cells" in result.stdout


def _start_key_server(tmp_path: Path, peer_token: Path):
    """A real key server process on its state in ``tmp_path``, healthy."""
    from feddpsyn.demo import ServerProcess

    port = loopback_port()
    server = ServerProcess(["keyserver", "--host", "127.0.0.1", "--port", str(port),
                            "--state-dir", str(tmp_path / "ks"), "--peer-token-file",
                            str(peer_token)], tmp_path / "ks.log", f"http://127.0.0.1:{port}")
    server.wait_healthy()
    return server


CREATE_WITHIN_S = 1.0  # what an operator waits for a 202, whatever the server is doing


def test_a_saturated_server_answers_202_within_a_second_stops_on_sigterm_and_resumes(
        tmp_path):
    """A real key server whose CPU is saturated by another session's job (a noisy-greedy
    module compiling in its child process, and a busy loop on every other core): a
    second ``POST /sessions`` is answered 202 within a second. SIGTERM, with the first
    module still compiling, ends the server within 10 s; restarted on its state, it
    resumes both preparations."""
    import os
    import signal

    peer_token = tmp_path / "peer.token"
    peer_token.write_text(new_token())
    ks = _start_key_server(tmp_path, peer_token)
    burners: list[subprocess.Popen] = []
    try:
        operator = {**_auth((tmp_path / "ks" / "operator.token").read_text().strip()),
                    "Content-Type": "application/json"}
        first = httpx.post(f"{ks.url}/sessions", headers=operator, timeout=120,
                           content=request("noisy-greedy").model_dump_json(by_alias=True))
        assert first.status_code == 202, first.text

        def phase(accepted: httpx.Response) -> str:
            status = httpx.get(ks.url + accepted.json()["status_url"], headers=operator,
                               timeout=30).json()
            return status["preparation"]["phase"] if status["state"] == "preparing" else ""

        wait_for(lambda: "selection module" in phase(first), "the first session compiling",
                 timeout=300)
        # The compile holds one core; a busy loop on each other one saturates the machine.
        burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                   for _ in range(max(0, (os.cpu_count() or 1) - 1))]
        time.sleep(1)  # the loops started (an interpreter's start is not the load measured)
        body = request("none").model_dump_json(by_alias=True)
        started = time.perf_counter()
        second = httpx.post(f"{ks.url}/sessions", headers=operator, content=body, timeout=60)
        took = time.perf_counter() - started
        assert second.status_code == 202, second.text
        assert "selection module" in phase(first)  # answered while the job still runs
        assert took < CREATE_WITHIN_S, f"POST /sessions took {took:.2f} s under load"
        for burner in burners:
            burner.kill()
            burner.wait(10)
        burners = []

        # SIGTERM mid-compile: the server ends within 10 s (its child with it).
        assert "selection module" in phase(first)
        stopped = time.monotonic()
        ks.proc.send_signal(signal.SIGTERM)
        ks.proc.wait(timeout=10)
        assert time.monotonic() - stopped < 10
        ks.stop()
        ks = _start_key_server(tmp_path, peer_token)

        # Both resumed, in the order they came: the first compiling its module again, the
        # second queued behind it. (Each then prepares to ready as a new one does:
        # test_a_restart_resumes_a_session_left_preparing follows a resumed session to ready;
        # waiting here would add a whole compile and keying, tens of seconds, and show
        # nothing more.)
        wait_for(lambda: "selection module" in phase(first), "the first session resumed",
                 timeout=300)
        assert phase(second), "the second session is preparing again, not failed"
    finally:
        for burner in burners:
            burner.kill()
            burner.wait(10)
        ks.stop()


def _children(pid: int) -> set[int]:
    """The live processes whose parent is ``pid`` (Linux's /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(stat.parent.name))
    return found


def _gone(pids: set[int]) -> bool:
    return not any(Path(f"/proc/{pid}").exists()
                   and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                   != "Z" for pid in pids)


def test_a_real_compile_does_not_stall_the_server(tmp_path):
    """A real key server process compiling a noisy-greedy module (tens of seconds, in its
    child process): the peer's calls are answered while the status still says it is
    compiling. Killed (-9) mid-compile, the server leaves no child behind; started again,
    it resumes the preparation, and a graceful stop ends its children too."""
    import os
    import signal

    from feddpsyn.demo import ServerProcess

    peer_token = tmp_path / "peer.token"
    peer_token.write_text(new_token())

    def start() -> ServerProcess:
        port = loopback_port()
        server = ServerProcess(["keyserver", "--host", "127.0.0.1", "--port", str(port),
                                "--state-dir", str(tmp_path / "ks"), "--peer-token-file",
                                str(peer_token)], tmp_path / "ks.log",
                               f"http://127.0.0.1:{port}")
        server.wait_healthy()
        return server

    ks = start()
    try:
        operator = _auth((tmp_path / "ks" / "operator.token").read_text().strip())
        r = httpx.post(f"{ks.url}/sessions", timeout=120,
                       headers={**operator, "Content-Type": "application/json"},
                       content=request("noisy-greedy").model_dump_json(by_alias=True))
        assert r.status_code == 202, r.text
        path = r.json()["status_url"]

        def phase(server: ServerProcess) -> str:
            status = httpx.get(server.url + path, headers=operator, timeout=30).json()
            assert status["state"] == "preparing", status
            return status["preparation"]["phase"]

        wait_for(lambda: "selection module" in phase(ks), "the selection module compiling",
                 timeout=300)
        peer = _auth(peer_token.read_text().strip())
        answered = [httpx.get(f"{ks.url}/peer/sessions", headers=peer, timeout=60)
                    for _ in range(3)]
        assert all(a.status_code == 200 and a.json() == [] for a in answered)
        # Still compiling after those answers: they did not wait for the compile.
        assert "selection module" in phase(ks)
        children = _children(ks.proc.pid)
        assert children  # the compiling child (and the spare)
        os.kill(ks.proc.pid, signal.SIGKILL)
        ks.proc.wait(30)
        ks.stop()
        wait_for(lambda: _gone(children), "the children died with the server", timeout=30)
        ks = start()
        assert phase(ks)  # resumed: preparing again, not failed, not stuck
        wait_for(lambda: _children(ks.proc.pid), "the resumed preparation's child")
        children = _children(ks.proc.pid)
    finally:
        ks.stop()
    wait_for(lambda: _gone(children), "a graceful stop ended the children", timeout=30)


# ------------------------------------------------------ the joint noise's sets, made ahead
AHEAD = wire.SessionCreate(
    schema={"name": "five", "columns": [
        {"name": c, "type": "categorical", "i2s": ["a", "b", "c", "d"]} for c in "vwxyz"]},
    clients=CLIENTS, parameter_set="test-small",
    budget=wire.BudgetSpec(epsilon=1.0, delta=1e-6), max_rows=1000, noise="joint",
    selection=wire.SelectionRequest(mode="noisy-greedy"))


def stored_sets(service: KeyServer, sid: str) -> list[tuple[str, int]]:
    with service.db.connect() as conn:
        return [(r["release"], r["chunk"]) for r in conn.execute(
            "SELECT release, chunk FROM joint_coins WHERE session_id = ? ORDER BY rowid",
            (sid,))]


class HeldCompile:
    """``prepare_files``'s steps with the selection module's compile held until the key
    server stored ``sets`` of the joint noise's sets, then skipped: what the idle core does
    while a long compile runs, without a clock. ``fail``: the compile then fails."""

    def __init__(self, service_of, sets: int, fail: bool = False):
        self.service_of, self.sets, self.fail = service_of, sets, fail

    def __call__(self, plan, n_clients, directory, *, report, stop):
        report("compiling the aggregation circuit and generating its keys")
        _, server_zip, evaluation_keys = SessionKeys.create(plan, n_clients, directory)
        write_private(directory / "server.zip", server_zip)
        write_private(directory / "evaluation_keys.bin", evaluation_keys)
        report("compiling the noisy-greedy selection module and generating its keys")
        service = self.service_of()
        sid = directory.name.split(".")[1]
        wait_for(lambda: len(stored_sets(service, sid)) >= self.sets, "sets made ahead")
        if self.fail:
            raise RuntimeError("the test's compiler gave up")
        # The module itself is not compiled: nothing here runs a selection, and its compile
        # (half a minute) is what the served noisy-greedy tests pay once.
        write_private(directory / "noise_pool.npz", draw_pool(plan.noise_draws()))
        return None


def test_the_joint_noise_sets_are_made_while_the_module_compiles(tmp_path):
    holder: list[KeyServer] = []
    service = KeyServer(tmp_path, prepare=HeldCompile(lambda: holder[0], sets=2))
    holder.append(service)
    sid = service.create_session(AHEAD).session_id
    service.preparation.wait_ready(sid, timeout=300)
    plan = service.plan(sid)
    made = stored_sets(service, sid)
    assert len(made) >= 2 and made == ahead_of_time(plan)[:len(made)]
    assert made[0][0] == "one_way"  # a fixed release's chunk first, then packed guesses
    # Under the session's keys as recorded: the joint circuit run on a set, the clients'
    # inputs 0 and weight 1 on one bit a cell, decrypts to bits.
    folder = service.session_dir(sid)
    keys = SessionKeys.load(folder, len(CLIENTS), joint=True)
    server = fhe.Server.load(folder / "server.zip")
    evaluation = fhe.EvaluationKeys.deserialize((folder / "evaluation_keys.bin").read_bytes())
    cells, columns = plan.parameters.chunk_cells, plan.joint_columns
    zeros = np.zeros(cells, dtype=np.int64)
    clients = [fhe.Value.deserialize(keys.encrypt_chunk(i, zeros)) for i in range(len(CLIENTS))]
    seen = []
    for name, chunk in made:
        weights = np.zeros((cells, columns), dtype=np.int64)
        weights[np.arange(cells), (7 * np.arange(cells) + chunk) % columns] = 1
        out = server.run(*clients, fhe.Value.deserialize(service.coins.coins(sid, name, chunk)),
                         weights, np.ones(cells, dtype=np.int64), zeros,
                         evaluation_keys=evaluation)
        bits = keys.decrypt_value(out) % (1 << plan.parameters.count_bits)
        assert set(bits.tolist()) <= {0, 1}
        seen.extend(bits.tolist())
    assert 0 < sum(seen) < len(seen)  # 64 or more uniform bits: all equal w.p. 2^-63
    assert not list((tmp_path / "sessions").glob(f".{sid}.*"))  # the helper's folder too
    service.close()


def test_a_failed_preparation_drops_the_sets_it_made(tmp_path):
    holder: list[KeyServer] = []
    service = KeyServer(tmp_path, prepare=HeldCompile(lambda: holder[0], sets=1, fail=True))
    holder.append(service)
    sid = service.create_session(AHEAD).session_id
    wait_for(lambda: service.status(sid).state == "failed", "the preparation failed", 300)
    assert stored_sets(service, sid) == []
    assert not list((tmp_path / "sessions").glob(f".{sid}.*"))
    service.close()
