"""One served session for the tests that run both servers as processes on 127.0.0.1: fresh
servers on a new state directory, the operator's session, every client's upload through its
agent, and the release document; the servers are stopped on exit."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from feddpsyn.clients.agent import ClientAgent
from feddpsyn.common import wire
from feddpsyn.demo import start_servers
from feddpsyn.operator_api import create_session

__all__ = ["post_session", "run_session", "running_servers", "serve", "wait_released"]


def running_servers(tmp_path_factory):
    """Fresh servers on a new state directory, for a module-scoped fixture to ``yield
    from``: yields (ks, cs, state directory); stops both afterwards."""
    state = tmp_path_factory.mktemp("state")
    ks, cs = start_servers(state)
    yield ks, cs, state
    ks.stop()
    cs.stop()


def post_session(url: str, operator: str, request: wire.SessionCreate,
                 timeout: float = 600) -> wire.SessionCreated:
    """``POST /sessions`` (202), then the wait until the session is ready (bounded by
    ``timeout``): the ready session and its clients' tokens."""
    return create_session(url, operator, request, timeout=timeout, poll=0.25)


def wait_released(agent: ClientAgent, timeout: float = 120) -> wire.ReleaseDocument:
    deadline = time.time() + timeout
    while time.time() < deadline:  # bounded by the deadline
        if agent.status().state == "released":
            return agent.release()
        time.sleep(0.3)
    raise AssertionError("session not released in time")


def run_session(ks, cs, operator: str, request: wire.SessionCreate, csvs: dict[str, Path],
                agents: Path, timeout: float) -> tuple[wire.SessionCreated, wire.ReleaseDocument]:
    """On running servers: the operator's session, the uploads of the clients ``csvs`` maps
    to a table (every client of the request, or the session's quorum with the others absent
    until its deadline), and the release document."""
    created = post_session(ks.url, operator, request)
    sid = created.session.session_id
    for client in [c for c in request.clients if c in csvs]:
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
