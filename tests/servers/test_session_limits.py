"""Bounded work per request (``keyserver.limits``, ``keyserver.preparation``): a session
past one of the key server's limits is refused at once with 409, naming the limit, the
request's value and the option that raises it, and nothing is built or stored; a plan that
takes longer than the request waits for is accepted and built by the job, which fails the
session with the plan's reason if it is refused.

In process, with a preparation that makes no files (no circuit); one test runs a real key
server process for its memory.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

import feddpsyn.keyserver.preparation as preparation
from feddpsyn.common import wire
from feddpsyn.common.serving import ServiceError
from feddpsyn.keyserver.limits import SessionLimits, request_size
from feddpsyn.keyserver.service import KeyServer
from tests.ports import loopback_port

SCHEMA = {"name": "tiny", "columns": [
    {"name": "age", "type": "continuous", "min": 0, "max": 100, "bins": 4},
    {"name": "sex", "type": "categorical", "i2s": ["F", "M"]},
    {"name": "smoker", "type": "categorical", "i2s": ["no", "yes", "unknown"]},
]}


def request(schema=SCHEMA, clients=("alice", "bob"), epsilon=50.0, **kw) -> wire.SessionCreate:
    return wire.SessionCreate(schema=schema, clients=list(clients), parameter_set="test-small",
                              budget=wire.BudgetSpec(epsilon=epsilon, delta=1e-6),
                              max_rows=1000, selection=wire.SelectionRequest(mode="none"),
                              **kw)


def no_files(plan, n_clients, directory, *, report, stop):
    directory.mkdir(parents=True)
    return None


def _wide(columns: int, categories: int = 2) -> dict:
    return {"columns": [{"name": f"c{i}", "type": "categorical",
                         "i2s": [f"v{j}" for j in range(categories)]} for i in range(columns)]}


def _nothing_stored(service: KeyServer) -> None:
    with service.db.connect() as conn:
        for table in ("session_preparation", "client_tokens", "sessions"):
            assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0, table
    assert service.preparation.jobs.pending() == 0


@pytest.mark.parametrize(("bad", "needle"), [
    (request(schema=_wide(65)), "columns number 65, over this key server's limit of 64 "
                                "(its operator can raise it: feddpsyn keyserver "
                                "--max-columns)"),
    (request(schema=_wide(2, 5000)), "categories (bins) of column 'c0' number 5,000"),
    (request(schema={"columns": [{"name": "x", "type": "continuous", "min": 0, "max": 1,
                                  "bins": 4096}] + _wide(1, 100)["columns"]}),
     "cells (1-way and 2-way counts) number 413,796, over this key server's limit of 200,000"),
    (request(schema=_wide(60, 60)), "cells (1-way and 2-way counts) number 6,375,600"),
    (request(clients=[f"o{i}" for i in range(11)]), "clients number 11, over this key "
                                                    "server's limit of 10"),
])
def test_a_session_past_a_limit_is_refused_with_409_and_nothing_stored(tmp_path, bad, needle):
    service = KeyServer(tmp_path, prepare=no_files, limits=SessionLimits(max_clients=10))
    with pytest.raises(ServiceError) as info:
        service.create_session(bad)
    assert info.value.status == 409 and needle in info.value.message
    _nothing_stored(service)
    service.close()


def test_the_cell_count_is_the_layouts():
    from feddpsyn.params.layout import MarginalLayout

    for sizes, pairs in (([4, 2, 3], None), ([7, 1, 5, 2], [(0, 3), (1, 2)])):
        layout = MarginalLayout.build(tuple(sizes), pairs)
        assert request_size(sizes, pairs) == layout.total_cells


def test_a_slow_plan_is_accepted_and_built_by_the_job(tmp_path, monkeypatch):
    """The request waits for no plan at all here (ACCEPT_WAIT_S = 0): a good plan makes a
    ready session, a refused one a failed session with the plan's reason."""
    monkeypatch.setattr(preparation, "ACCEPT_WAIT_S", 0.0)
    real = preparation.build_plan

    def slow(req):
        time.sleep(1.5)
        return real(req)

    monkeypatch.setattr(preparation, "build_plan", slow)
    service = KeyServer(tmp_path, prepare=no_files)
    started = time.monotonic()
    good = service.create_session(request())
    assert time.monotonic() - started < 1.0  # did not wait for the 1.5 s plan
    public = service.preparation.wait_ready(good.session_id, timeout=60)
    assert public.total_cells == request_size([4, 2, 3], None)
    with service.db.connect() as conn:  # the draft the job recorded is the record's
        draft = conn.execute("SELECT draft_json FROM session_preparation WHERE id = ?",
                             (good.session_id,)).fetchone()["draft_json"]
    assert wire.SessionPublic.model_validate_json(draft).total_cells == public.total_cells
    # Too small a budget for the plan: accepted, then failed with the reason.
    refused = service.create_session(request(epsilon=0.01).model_copy(
        update={"max_rows": 30000}))
    with pytest.raises(RuntimeError, match="the plan is refused: .*does not fit"):
        service.preparation.wait_ready(refused.session_id, timeout=60)
    status = service.status(refused.session_id)
    assert status.state == "failed" and "the plan is refused" in status.detail
    service.close()


def test_a_plan_refused_within_the_wait_is_a_409_and_nothing_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(preparation, "ACCEPT_WAIT_S", 300.0)  # within the wait, however loaded
    service = KeyServer(tmp_path, prepare=no_files)
    with pytest.raises(ServiceError) as info:
        service.create_session(request(epsilon=0.01).model_copy(update={"max_rows": 30000}))
    assert info.value.status == 409 and "does not fit" in info.value.message
    _nothing_stored(service)
    service.close()


def _rss_mb(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(field)


def test_a_million_categories_are_refused_at_once_by_a_real_server(tmp_path):
    """The request of the finding: one column of 10^6 categories (10.9 MB of JSON). Refused
    with 409 naming the limit; the server's peak memory grows by the body's parse only (it
    grew by gigabytes when the plan was built from it), and it goes on answering."""
    from feddpsyn.demo import ServerProcess

    port = loopback_port()
    server = ServerProcess(["keyserver", "--host", "127.0.0.1", "--port", str(port),
                            "--state-dir", str(tmp_path / "ks")], tmp_path / "ks.log",
                           f"http://127.0.0.1:{port}")
    try:
        server.wait_healthy()
        token = (tmp_path / "ks" / "operator.token").read_text().strip()
        body = request().model_dump(by_alias=True)
        body["schema"] = {"columns": [
            {"name": "a", "type": "categorical", "i2s": [f"c{i}" for i in range(10 ** 6)]},
            {"name": "b", "type": "categorical", "i2s": ["x", "y"]}]}
        content = json.dumps(body)
        assert len(content) > 10 ** 7
        peak_before = _rss_mb(server.proc.pid, "VmHWM")
        response = httpx.post(f"{server.url}/sessions", content=content, timeout=60,
                              headers={"Authorization": f"Bearer {token}",
                                       "Content-Type": "application/json"})
        assert response.status_code == 409, response.text
        detail = wire.error_detail(response, 500)
        assert "categories (bins) of column 'a' number 1,000,000" in detail
        assert "--max-categories" in detail
        growth = _rss_mb(server.proc.pid, "VmHWM") - peak_before
        assert growth < 1024, f"the key server's peak grew by {growth:.0f} MB"
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    finally:
        server.stop()
