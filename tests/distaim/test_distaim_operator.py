"""Operator API of the DistAIM servers over loopback HTTP: one session created at three real
servers (uvicorn on 127.0.0.1), refusals leave them consistent, the CLI, and the MPC
parties' plan-digest check."""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import uvicorn
from typer.testing import CliRunner

from feddpsyn.distaim.app import create_app
from feddpsyn.distaim.client import read_token_file, session_info, upload_vector
from feddpsyn.distaim.operator import (
    OperatorError,
    create_session,
    delete_session,
    run_session,
    session_status,
)
from feddpsyn.distaim.party import EXIT_PLAN_MISMATCH, session_modulus, write_client_upload
from feddpsyn.distaim.plan import SessionRequest, derive_plan, plan_digest
from feddpsyn.distaim.protocol import Layout, client_vector
from tests.ports import loopback_port

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = {"name": "t", "columns": [
    {"name": "a", "type": "categorical", "i2s": ["x", "y", "z"]},
    {"name": "b", "type": "categorical", "i2s": ["u", "v"]},
    {"name": "c", "type": "continuous", "min": 0, "max": 10, "bins": 4}]}




class _Servers:
    def __init__(self, root: Path):
        self.mpc = [f"127.0.0.1:{loopback_port()}" for _ in range(3)]
        self.urls, self.tokens, self._servers, self._threads = [], [], [], []
        for x in (1, 2, 3):
            app = create_app(root / f"s{x}", x, self.mpc[x - 1])
            port = loopback_port()
            server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                                   log_level="warning"))
            thread = threading.Thread(target=server.run, daemon=True)
            thread.start()
            self._servers.append(server)
            self._threads.append(thread)
            self.urls.append(f"http://127.0.0.1:{port}")
            self.tokens.append((root / f"s{x}" / "operator.token").read_text().strip())
        deadline = time.time() + 20
        for server in self._servers:
            while not server.started:
                assert time.time() < deadline, "servers did not start"
                time.sleep(0.05)

    def stop(self):
        for server in self._servers:
            server.should_exit = True
        for thread in self._threads:
            thread.join(10)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    s = _Servers(tmp_path_factory.mktemp("distaim-op"))
    yield s
    s.stop()


def _request(session_id, **changes):
    return {"session_id": session_id, "schema": SCHEMA, "clients": ["h0", "h1"],
            "epsilon": 1.0, "delta": 1e-5, "rounds": 3} | changes


def test_one_session_at_three_servers(servers):
    made = create_session(servers.urls, servers.tokens, _request("ok1"))
    assert made.created and set(made.tokens) == {"h0", "h1"}
    assert all(len(set(t)) == 3 for t in made.tokens.values())  # a token per server
    statuses = session_status(servers.urls, servers.tokens, "ok1")
    assert [s["state"] for s in statuses] == ["intake"] * 3
    assert {s["plan_digest"] for s in statuses} == {made.plan_digest}
    assert made.plan["mpc_parties"] == [[h, int(p)] for h, _, p in
                                        (a.rpartition(":") for a in servers.mpc)]
    # idempotent: the same request again changes nothing and shows no tokens
    again = create_session(servers.urls, servers.tokens, _request("ok1"))
    assert not again.created and again.tokens == {} and again.plan_digest == made.plan_digest
    # a client uploads with its per-server tokens; a token is good at its own server only
    layout = Layout.for_workload(made.plan["domain_sizes"],
                                 [tuple(c) for c in made.plan["workload"]])
    with httpx.Client(timeout=30) as http:
        info = session_info(http, servers.urls, "ok1", made.tokens["h0"])
        assert info["plan_digest"] == made.plan_digest and info["cells"] == layout.length
        records = np.array([[0, 1, 2], [2, 0, 3]])
        upload_vector(http, servers.urls, "ok1", "h0", made.tokens["h0"],
                      client_vector(records, layout), int(info["modulus"]))
        swapped = [made.tokens["h0"][1]] * 3
        with pytest.raises(RuntimeError, match="403"):
            session_info(http, servers.urls, "ok1", swapped)
    statuses = session_status(servers.urls, servers.tokens, "ok1")
    assert all(s["clients_uploaded"] == ["h0"] for s in statuses)
    assert delete_session(servers.urls, servers.tokens, "ok1") == ["server 1: deleted",
                                                                  "server 2: deleted",
                                                                  "server 3: deleted"]
    assert [s["state"] for s in session_status(servers.urls, servers.tokens, "ok1")] == [
        "absent"] * 3


def test_refusal_at_server_two_rolls_back(servers):
    wrong = [servers.mpc[0], "127.0.0.1:1", servers.mpc[2]]
    with pytest.raises(OperatorError) as err:
        create_session(servers.urls, servers.tokens, _request("bad2", mpc_parties=wrong))
    message = str(err.value)
    assert "server 2" in message and "refused" in message and "Rolled back at server(s) [1]" \
        in message
    assert [s["state"] for s in session_status(servers.urls, servers.tokens, "bad2")] == [
        "absent"] * 3
    # the same id is free again afterwards
    made = create_session(servers.urls, servers.tokens, _request("bad2"))
    assert made.created
    # the id is taken with another plan now: refused at server 1, nothing else changes
    with pytest.raises(OperatorError, match="server 1.*another plan.*Nothing was created"):
        create_session(servers.urls, servers.tokens, _request("bad2", epsilon=2.0))
    assert {s["plan_digest"] for s in session_status(servers.urls, servers.tokens,
                                                     "bad2")} == {made.plan_digest}
    # exists at server 1 only (e.g. a half-done earlier attempt): refused, servers 2 and 3
    # rolled back, server 1 untouched
    httpx.delete(f"{servers.urls[1]}/sessions/bad2",
                 headers={"Authorization": f"Bearer {servers.tokens[1]}"})
    httpx.delete(f"{servers.urls[2]}/sessions/bad2",
                 headers={"Authorization": f"Bearer {servers.tokens[2]}"})
    with pytest.raises(OperatorError, match=r"already existed at server\(s\) \[1\].*"
                                            r"Rolled back at server\(s\) \[2, 3\]"):
        create_session(servers.urls, servers.tokens, _request("bad2"))
    assert [s["state"] for s in session_status(servers.urls, servers.tokens, "bad2")] == [
        "intake", "absent", "absent"]
    with pytest.raises(OperatorError, match="cannot run: server 2: absent"):
        run_session(servers.urls, servers.tokens, "bad2")
    delete_session(servers.urls, servers.tokens, "bad2")


def test_bad_input_is_refused_before_any_server(servers):
    for change, why in (({"workload": [[0, 7]]}, "attribute"), ({"epsilon": -1}, "epsilon"),
                        ({"participation": "0"}, "participation"),
                        ({"clients": []}, "clients")):
        with pytest.raises(OperatorError, match=f"invalid session request.*{why}.*"
                                                "Nothing was created|invalid session request"):
            create_session(servers.urls, servers.tokens, _request("bad3", **change))
    with pytest.raises(OperatorError, match="listed as server 1"):
        create_session(servers.urls[::-1], servers.tokens, _request("bad3"))
    with pytest.raises(OperatorError, match="exactly three"):
        create_session(servers.urls[:2], servers.tokens, _request("bad3"))
    assert [s["state"] for s in session_status(servers.urls, servers.tokens, "bad3")] == [
        "absent"] * 3


def test_cli_session_create_status_and_errors(servers, tmp_path):
    from feddpsyn.cli import app
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    token_files = []
    for x, token in enumerate(servers.tokens, start=1):
        token_files.append(tmp_path / f"op{x}.token")
        token_files[-1].write_text(token)
    common = ["--servers", ",".join(servers.urls), "--operator-token-file",
              ",".join(map(str, token_files))]
    runner = CliRunner()
    ok = runner.invoke(app, ["distaim", "session", "create", *common, "--schema", str(schema),
                             "--clients", "h0,h1", "--epsilon", "1", "--delta", "1e-5",
                             "--workload", "a,b,c", "--participation", "0.1", "--session",
                             "cli1", "--tokens-dir", str(tmp_path / "tok")])
    assert ok.exit_code == 0, ok.output
    assert "plan digest" in ok.output
    tokens = read_token_file(tmp_path / "tok" / "h0.token")
    assert len(set(tokens)) == 3
    assert (tmp_path / "tok" / "h1.token").stat().st_mode & 0o777 == 0o600
    status = runner.invoke(app, ["distaim", "session", "status", *common, "--session", "cli1"])
    assert status.exit_code == 0 and status.output.count("intake") == 3, status.output
    bad = runner.invoke(app, ["distaim", "session", "create", *common, "--schema", str(schema),
                              "--clients", "h0", "--epsilon", "1", "--delta", "1e-5",
                              "--workload", "a,nope", "--session", "cli2"])
    assert bad.exit_code == 1 and "no attribute 'nope'" in bad.output
    missing = runner.invoke(app, ["distaim", "session", "status", *common, "--session",
                                  "cli2"])
    assert missing.exit_code == 0 and missing.output.count("absent") == 3
    gone = runner.invoke(app, ["distaim", "session", "delete", *common, "--session", "cli1"])
    assert gone.exit_code == 0 and gone.output.count("deleted") == 3


def test_cli_session_create_takes_the_schedule(servers, tmp_path):
    from feddpsyn.cli import app
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    token = tmp_path / "op.token"
    token.write_text(servers.tokens[0])
    common = ["--servers", ",".join(servers.urls), "--operator-token-file",
              ",".join([str(token)] + [str(tmp_path / f"op{x}.token") for x in (2, 3)])]
    for x in (2, 3):
        (tmp_path / f"op{x}.token").write_text(servers.tokens[x - 1])
    create = ["distaim", "session", "create", *common, "--schema", str(schema), "--clients",
              "h0,h1", "--epsilon", "1", "--delta", "1e-5", "--participation", "1/2",
              "--tokens-dir", str(tmp_path / "tok")]
    runner = CliRunner()
    for schedule in ("deferred", "interleaved"):
        ok = runner.invoke(app, [*create, "--schedule", schedule, "--session", f"sch-{schedule}"])
        assert ok.exit_code == 0, ok.output
        assert f"schedule {schedule}" in ok.output  # as the servers' plan holds it
    bad = runner.invoke(app, [*create, "--schedule", "eager", "--session", "sch-bad"])
    assert bad.exit_code == 1 and "--schedule must be deferred or interleaved" in bad.output
    missing = runner.invoke(app, ["distaim", "session", "status", *common, "--session",
                                  "sch-bad"])
    assert missing.output.count("absent") == 3
    help_text = runner.invoke(app, ["distaim", "session", "create", "--help"]).output
    assert "FLAIM" in help_text and "Algorithm" in help_text


def test_parties_refuse_to_run_different_plans(tmp_path):
    """Three MPC parties whose plans differ (server 3 holds another epsilon) stop after
    exchanging digests, before reading any share."""
    modulus = session_modulus()
    ports = [loopback_port() for _ in range(3)]
    request = SessionRequest.model_validate(
        _request("mm", mpc_parties=[f"127.0.0.1:{p}" for p in ports]))
    procs = []
    for pid in range(3):
        plan = derive_plan(request if pid < 2 else request.model_copy(
            update={"epsilon": 2.0}), modulus)
        folder = tmp_path / f"p{pid}"
        folder.mkdir()
        (folder / "session.json").write_text(json.dumps(plan | {"pid": pid}))
        layout = Layout.for_workload(plan["domain_sizes"], [tuple(c) for c in plan["workload"]])
        write_client_upload(folder, "mm", "h0", np.zeros(layout.length, dtype=np.int64),
                            modulus)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "feddpsyn.distaim.party", "--pid", str(pid), "--parties",
             ",".join(f"127.0.0.1:{p}" for p in ports), "--session-dir", str(folder),
             "--out", str(folder / "out.json"), "--timeout", "60"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    try:
        outputs = [p.communicate(timeout=120)[0].decode() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [EXIT_PLAN_MISMATCH] * 3, outputs
    assert all("plan digests differ" in o for o in outputs)
    assert not any((tmp_path / f"p{pid}" / "out.json").exists() for pid in range(3))
    assert plan_digest(plan | {"pid": 2}) == plan_digest(plan)  # a server's own keys are out
