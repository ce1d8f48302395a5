"""Concurrent clients and kill -9 faults on loopback (bounded versions of bench runs)."""

import os
import signal
import time

import httpx
import numpy as np
import pytest

from clients.agent import ClientAgent
from feddpsyn.demo import start_servers
from feddpsyn.loadtest import run_load
from tests.test_servers import CLIENTS, create_session, true_counts, write_client_csvs


def test_concurrent_clients_are_each_stored_exactly_once(tmp_path):
    result = run_load(tmp_path, n_clients=20, workers=10)
    assert result["stored"] == 20 and result["exactly_once"]
    assert result["max_error"] < 2 ** 10  # eps=50: tiny noise; a lost or double upload is not


def kill(server) -> None:
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(10)
    server.stop()


@pytest.mark.parametrize("victim, delay", [("keyserver", 0.0), ("computeserver", 0.0),
                                           ("keyserver", 0.4), ("computeserver", 0.8)])
def test_kill_9_during_encryption_aggregation_or_release(tmp_path, victim, delay):
    """Kill one server shortly after the last upload (inside the encryption job, P1 or the
    release), restart it on the same state, and the session completes with the ledger
    charged exactly once per release."""
    state = tmp_path / "state"
    ks, cs = start_servers(state)
    operator = (state / "keyserver" / "operator.token").read_text().strip()
    created = create_session(ks.url, operator)
    sid = created.session.session_id
    csvs = write_client_csvs(tmp_path)
    for client in CLIENTS:
        with ClientAgent(ks.url, cs.url, sid, client, created.client_tokens[client],
                         tmp_path / "agents") as agent:
            agent.upload(csvs[client])
    time.sleep(delay)
    kill(ks if victim == "keyserver" else cs)
    ks.stop()
    cs.stop()
    ks, cs = start_servers(state)
    try:
        with ClientAgent(ks.url, cs.url, sid, "alice", created.client_tokens["alice"],
                         tmp_path / "agents") as agent:
            deadline = time.time() + 120
            while agent.status().state != "released":
                assert time.time() < deadline, "session did not complete after the restart"
                time.sleep(0.3)
            document = agent.release()
            assert agent.release() == document  # published once, stable
        released = np.concatenate([np.array(m.counts) for r in document.releases
                                   for m in r.marginals.values()])
        assert np.abs(released - true_counts(csvs)).max() < 2 ** 10
        ledger = httpx.get(f"{ks.url}/sessions/{sid}/ledger",
                           headers={"Authorization": f"Bearer {operator}"}).json()
        assert [e["release"] for e in ledger["entries"]] == ["one_way", "two_way"]
        assert ledger["rho_spent"] == ledger["rho_total"]
    finally:
        ks.stop()
        cs.stop()
