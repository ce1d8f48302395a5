"""Versions everywhere (``common.version``): every answer of either server carries its
version; a request naming a version that does not meet the server's is refused with 409
and one line saying which versions meet; an agent or a compute server refuses a server of
another version on its first answer; the session record, its privacy record and the
release document carry the version.

A server "of another version" is this code with its module's VERSION replaced: what the
check reads, and all that differs between two releases as far as the check can tell.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from starlette.testclient import TestClient

import feddpsyn.common.serving as serving
import feddpsyn.computeserver.service as compute_service
from feddpsyn.clients.agent import AgentError, ClientAgent
from feddpsyn.common import wire
from feddpsyn.common.version import VERSION, VERSION_HEADER, VersionMismatch, compatible
from feddpsyn.computeserver.service import ComputeServer
from feddpsyn.keyserver.app import create_app
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.schema import Schema
from feddpsyn.params.session_plan import SessionPlan
from tests.ports import loopback_port

PEER = "peer-token-of-the-version-tests"
SCHEMA = {"name": "tiny", "columns": [
    {"name": "sex", "type": "categorical", "i2s": ["F", "M"]},
    {"name": "smoker", "type": "categorical", "i2s": ["no", "yes"]}]}
OTHER = "9.1.0"


def no_files(plan, n_clients, directory, *, report, stop):
    directory.mkdir(parents=True)
    return None


def test_the_gate_serves_versions_that_meet_and_refuses_others_in_one_line(tmp_path):
    major, minor, _ = VERSION.split(".")
    with TestClient(create_app(tmp_path, PEER, prepare=no_files)) as client:
        for header in ({}, {VERSION_HEADER: VERSION}, {VERSION_HEADER: f"{major}.{minor}.99"}):
            answer = client.get("/health", headers=header)
            assert answer.status_code == 200 and answer.headers[VERSION_HEADER] == VERSION
        for theirs in (OTHER, f"{major}.{int(minor) + 1}.0", "not-a-version"):
            answer = client.get("/peer/sessions", headers={VERSION_HEADER: theirs,
                                                           "Authorization": f"Bearer {PEER}"})
            assert answer.status_code == 409
            detail = answer.json()["detail"]
            assert detail == (f"this is feddpsyn {VERSION} and the caller is {theirs}: versions "
                              f"meet when major and minor are equal ({major}.{minor}.x); run "
                              "the same release on both sides")
            assert "\n" not in detail and answer.headers[VERSION_HEADER] == VERSION
    assert compatible(VERSION) and not compatible(OTHER)


class _Served:
    """The key server app under uvicorn on 127.0.0.1 in this process."""

    def __init__(self, state, monkeypatch=None, version: str | None = None):
        import uvicorn

        if version is not None:
            monkeypatch.setattr(serving, "VERSION", version)
        self.app = create_app(state, PEER, prepare=no_files)
        port = loopback_port()
        self.url = f"http://127.0.0.1:{port}"
        self._server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=port,
                                                     log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self._server.started

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(30)


def test_an_agent_refuses_a_key_server_of_another_version(tmp_path, monkeypatch):
    server = _Served(tmp_path / "ks", monkeypatch, OTHER)
    try:
        with ClientAgent(server.url, server.url, "s-1", "alice", "token", tmp_path / "agent",
                         attempts=1) as agent, pytest.raises(AgentError) as info:
            agent.session()
        assert str(info.value) == (f"this is feddpsyn {VERSION} and the key server is "
                                   f"{OTHER}: versions meet when major and minor are equal "
                                   f"({'.'.join(VERSION.split('.')[:2])}.x); run the same "
                                   "release on both sides")
    finally:
        server.stop()


def test_a_compute_server_of_another_version_is_refused_at_its_first_peer_call(tmp_path,
                                                                              monkeypatch):
    server = _Served(tmp_path / "ks")
    monkeypatch.setattr(compute_service, "VERSION", OTHER)
    compute = ComputeServer(tmp_path / "cs", server.url, PEER)
    try:
        with pytest.raises(VersionMismatch, match=f"this is feddpsyn {OTHER} and the key "
                                                  f"server is {VERSION}"):
            compute.step()
        # The key server refused the call too, naming both versions.
        answer = httpx.get(f"{server.url}/peer/sessions", timeout=10, headers={
            "Authorization": f"Bearer {PEER}", VERSION_HEADER: OTHER})
        assert answer.status_code == 409 and OTHER in answer.json()["detail"]
    finally:
        compute.close()
        server.stop()


def test_the_records_carry_the_version():
    plan = SessionPlan.build(PlanRequest(Schema.from_dict(SCHEMA), 1.0, 1e-6, 1000,
                                         parameter_set="test-small", selection="none",
                                         noise="two-server"))
    public = plan.to_public("s-1", ["alice", "bob"])
    assert public.version == VERSION and public.privacy.version == VERSION
    # A record written before versions existed still reads.
    old = public.model_dump(by_alias=True)
    del old["version"], old["privacy"]["version"]
    again = wire.SessionPublic.model_validate(old)
    assert again.version is None and again.privacy.version is None
