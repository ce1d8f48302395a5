"""Sessions that finish without an absent owner (``keyserver.uploads``: ``leave_out``,
``close_due``; ``crypto.masking.absent_commitment``): four owners, one never uploads.

Both servers run as processes on 127.0.0.1 with the small test parameters. The session
completes by the operator's close (``feddpsyn session close``) and by its deadline; the
release decrypts to the union of the three present owners' tables plus the release's noise
(a mask left in, or the absent owner's zeros summed with a mask, would be off by ~2^k); the
release document and the ledger name who contributed; the absent owner's late upload is
refused by both servers; a kill -9 of either server right after the close changes nothing
of that.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import httpx
import numpy as np
import pytest

from feddpsyn.clients.agent import AgentError, ClientAgent
from feddpsyn.common import wire
from feddpsyn.demo import start_servers
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.schema import Schema
from feddpsyn.params.table_codec import encode_csv
from tests.served import post_session, wait_released

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = {"name": "tiny", "columns": [
    {"name": "age", "type": "continuous", "min": 0, "max": 100, "bins": 4},
    {"name": "sex", "type": "categorical", "i2s": ["F", "M"]},
    {"name": "smoker", "type": "categorical", "i2s": ["no", "yes", "unknown"]},
]}
OWNERS = ["alice", "bob", "carol", "dave"]
PRESENT, ABSENT = OWNERS[:3], "dave"


def write_csvs(directory: Path) -> dict[str, Path]:
    rng = np.random.default_rng(7)
    paths = {}
    for i, owner in enumerate(OWNERS):
        path = directory / f"{owner}.csv"
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["age", "sex", "smoker"])
            for _ in range(30 + 20 * i):
                w.writerow([int(rng.integers(0, 101)), rng.choice(["F", "M"]),
                            rng.choice(["no", "yes", "unknown"])])
        paths[owner] = path
    return paths


def request(selection: str = "none", **policy) -> wire.SessionCreate:
    return wire.SessionCreate(schema=SCHEMA, clients=OWNERS, parameter_set="test-small",
                              budget=wire.BudgetSpec(epsilon=50.0, delta=1e-6),
                              max_rows=1000, selection=wire.SelectionRequest(mode=selection),
                              **policy)


def true_counts(csvs: dict[str, Path], owners: list[str]) -> np.ndarray:
    schema = Schema.from_dict(SCHEMA)
    records = np.concatenate([encode_csv(csvs[o], schema).records for o in owners])
    return MarginalLayout.build(schema.domain_sizes).counts(records)


def upload(ks, cs, created, owner, csvs, agents) -> None:
    with ClientAgent(ks.url, cs.url, created.session.session_id, owner,
                     created.client_tokens[owner], agents) as agent:
        agent.upload(csvs[owner])


def released(ks, cs, created, agents, timeout=180) -> wire.ReleaseDocument:
    with ClientAgent(ks.url, cs.url, created.session.session_id, PRESENT[0],
                     created.client_tokens[PRESENT[0]], agents) as agent:
        return wait_released(agent, timeout=timeout)


def check_release(document: wire.ReleaseDocument, csvs, operator: str, ks) -> None:
    """The release is the present owners' union plus small noise; who contributed is said."""
    counts = np.concatenate([np.array(m.counts) for r in document.releases
                             for m in r.marginals.values()])
    # Var(published - true) per count: the joint noise's, or the two servers' Gaussians.
    variance = max(max(float(Fraction(r.per_count_variance or "0")),
                       2 * float(Fraction(r.sigma2_per_server))) for r in document.releases)
    bound = 10 * np.sqrt(variance) + 1
    assert np.abs(counts - true_counts(csvs, PRESENT)).max() <= bound
    # With dave's table counted the error would be his rows, far above the noise.
    assert np.abs(counts - true_counts(csvs, OWNERS)).max() > bound
    assert document.contributors == PRESENT and document.absent == [ABSENT]
    ledger = httpx.get(f"{ks.url}/sessions/{document.session_id}/ledger", timeout=30,
                       headers={"Authorization": f"Bearer {operator}"}).json()
    assert ledger["clients_absent"] == [ABSENT]


def refuses_the_late_upload(ks, cs, created, csvs, tmp_path) -> None:
    with (ClientAgent(ks.url, cs.url, created.session.session_id, ABSENT,
                      created.client_tokens[ABSENT], tmp_path / "late") as agent,
          pytest.raises(AgentError, match="was left out of session")):
        agent.upload(csvs[ABSENT])
    # The compute server refuses its seed too, once it holds the session's closed uploads.
    r = httpx.put(f"{cs.url}/sessions/{created.session.session_id}/clients/{ABSENT}/seed",
                  json={"seed_hex": "11" * 32}, timeout=30,
                  headers={"Authorization": f"Bearer {created.client_tokens[ABSENT]}"})
    assert r.status_code == 409 and "left out" in r.json()["detail"]


def kill(server) -> None:
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(10)
    server.stop()


def feddpsyn(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "feddpsyn.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_the_operator_closes_without_the_absent_owner(tmp_path):
    """After the close, a kill -9 of the key server, a restart of both, then a kill -9 of
    the compute server and a restart again: the release is the one a run without the kills
    gives (the checks below hold on it), so neither server loses the close."""
    state = tmp_path / "state"
    ks, cs = start_servers(state)
    try:
        operator_file = state / "keyserver" / "operator.token"
        operator = operator_file.read_text().strip()
        created = post_session(ks.url, operator, request(quorum=3))
        sid = created.session.session_id
        csvs, agents = write_csvs(tmp_path), tmp_path / "agents"
        close = ["session", "close", "--keyserver", ks.url, "--session", sid,
                 "--operator-token-file", str(operator_file)]
        # Below the quorum, and with an owner who uploaded: refused, nothing changes.
        upload(ks, cs, created, "alice", csvs, agents)
        refused = feddpsyn(*close, "--without", "carol,dave")
        assert refused.returncode == 2 and "fewer than its quorum of 3" in refused.stderr
        refused = feddpsyn(*close, "--without", "alice")
        assert refused.returncode == 2 and "have uploaded" in refused.stderr
        for owner in PRESENT[1:]:
            upload(ks, cs, created, owner, csvs, agents)
        done = feddpsyn(*close, "--without", ABSENT)
        assert done.returncode == 0, done.stderr
        assert f"uploads closed without {ABSENT}; 3 owners uploaded" in done.stdout
        kill(ks)
        ks, cs = _restart(state, cs)
        kill(cs)
        ks, cs = _restart(state, ks)
        document = released(ks, cs, created, agents)
        check_release(document, csvs, operator, ks)
        refuses_the_late_upload(ks, cs, created, csvs, tmp_path)
        status = feddpsyn("session", "status", "--keyserver", ks.url, "--session", sid,
                          "--operator-token-file", str(operator_file))
        assert "owners uploaded 3 of 4; left out: dave" in status.stdout, status.stdout
    finally:
        ks.stop()
        cs.stop()


def _restart(state: Path, survivor):
    """Both servers on the same state (the survivor is stopped too: new ports for both)."""
    survivor.stop()
    return start_servers(state)


def test_the_deadline_closes_once_the_quorum_has_uploaded(tmp_path):
    """Past its deadline with no upload the session waits (below its quorum), and the
    quorum's last upload closes it. (``tests/servers/test_servers_noisy_greedy.py`` runs
    the same close under the encrypted selection: P2's mask sums over the absent owner's
    zeros.)"""
    selection = "none"
    state = tmp_path / "state"
    ks, cs = start_servers(state)
    try:
        operator = (state / "keyserver" / "operator.token").read_text().strip()
        created = post_session(ks.url, operator, request(
            selection, quorum=3, upload_deadline=time.time() + 2))
        sid = created.session.session_id
        csvs, agents = write_csvs(tmp_path), tmp_path / "agents"
        time.sleep(2.5)  # the deadline has passed, with no upload: the session waits
        auth = {"Authorization": f"Bearer {operator}"}
        status = httpx.get(f"{ks.url}/sessions/{sid}/status", headers=auth, timeout=30).json()
        assert status["state"] == "collecting" and status["clients_absent"] == []
        assert "fewer than the quorum of 3" in status["detail"] and status["quorum"] == 3
        for owner in PRESENT:
            upload(ks, cs, created, owner, csvs, agents)
        document = released(ks, cs, created, agents)
        check_release(document, csvs, operator, ks)
        refuses_the_late_upload(ks, cs, created, csvs, tmp_path)
    finally:
        ks.stop()
        cs.stop()
