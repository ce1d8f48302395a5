"""One served session for the tests that run both servers as processes on 127.0.0.1: fresh
servers on a new state directory, the operator's session, every client's upload through its
agent, and the release document; the servers are stopped on exit."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import httpx

from clients.agent import ClientAgent
from common import wire
from feddpsyn.demo import start_servers

__all__ = ["post_session", "run_session", "serve", "wait_released"]


def post_session(url: str, operator: str, request: wire.SessionCreate,
                 timeout: float = 300) -> wire.SessionCreated:
    r = httpx.post(f"{url}/sessions", content=request.model_dump_json(by_alias=True),
                   headers={"Authorization": f"Bearer {operator}",
                            "Content-Type": "application/json"}, timeout=timeout)
    assert r.status_code == 201, r.text
    return wire.SessionCreated.model_validate_json(r.content)


def wait_released(agent: ClientAgent, timeout: float = 120) -> wire.ReleaseDocument:
    deadline = time.time() + timeout
    while time.time() < deadline:  # bounded by the deadline
        if agent.status().state == "released":
            return agent.release()
        time.sleep(0.3)
    raise AssertionError("session not released in time")


def run_session(ks, cs, operator: str, request: wire.SessionCreate, csvs: dict[str, Path],
                agents: Path, timeout: float) -> tuple[wire.SessionCreated, wire.ReleaseDocument]:
    """On running servers: the operator's session, every client's upload (``csvs`` maps each
    of the request's clients to its table), and the release document."""
    created = post_session(ks.url, operator, request)
    sid = created.session.session_id
    for client in request.clients:
        with ClientAgent(ks.url, cs.url, sid, client, created.client_tokens[client],
                         agents) as agent:
            agent.upload(csvs[client])
    first = request.clients[0]
    with ClientAgent(ks.url, cs.url, sid, first, created.client_tokens[first],
                     agents) as agent:
        return created, wait_released(agent, timeout=timeout)


@contextlib.contextmanager
def serve(tmp_path_factory, request: wire.SessionCreate, csvs: dict[str, Path],
          timeout: float):
    """Fresh servers and :func:`run_session`: yields (ks, state, created, document); the
    servers are stopped on exit."""
    state = tmp_path_factory.mktemp("state")
    ks, cs = start_servers(state)
    try:
        operator = (state / "keyserver" / "operator.token").read_text().strip()
        created, document = run_session(ks, cs, operator, request, csvs,
                                        tmp_path_factory.mktemp("agents"), timeout)
        yield ks, state, created, document
    finally:
        ks.stop()
        cs.stop()
