"""An owner replaces a mistaken upload through both servers as processes, before the
aggregation: the release is exactly the corrected tables' counts plus the two servers' noise
(read back from the pools each server drew at creation), so nothing of the replaced upload
is in it; the replacement is in the ledger's record, and once the session has computed a
replacement is refused with 409.
"""

import csv
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from feddpsyn.clients.agent import AgentError, ClientAgent
from feddpsyn.common import wire
from feddpsyn.demo import start_servers
from feddpsyn.dp.noise_pool import pool_noise
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.schema import Schema
from feddpsyn.params.session_plan import SessionPlan
from feddpsyn.params.table_codec import encode_csv
from tests.served import post_session, wait_released

SCHEMA = {"name": "tiny", "columns": [
    {"name": "age", "type": "continuous", "min": 0, "max": 100, "bins": 4},
    {"name": "sex", "type": "categorical", "i2s": ["F", "M"]},
    {"name": "smoker", "type": "categorical", "i2s": ["no", "yes", "unknown"]},
]}
CLIENTS = ["alice", "bob", "carol"]


def write_table(path: Path, rows: int, seed: int, smoker=(0.6, 0.3, 0.1)) -> Path:
    rng = np.random.default_rng(seed)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["age", "sex", "smoker"])
        for _ in range(rows):
            w.writerow([int(rng.integers(0, 101)), rng.choice(["F", "M"]),
                        rng.choice(["no", "yes", "unknown"], p=list(smoker))])
    return path


def test_a_replaced_upload_is_never_summed(tmp_path):
    tables = {c: write_table(tmp_path / f"{c}.csv", 40 + 30 * i, i)
              for i, c in enumerate(CLIENTS)}
    # Alice's mistake: another table (every row a smoker of unknown status, three times as
    # many rows); the release shows none of it.
    wrong = write_table(tmp_path / "wrong.csv", 150, 99, smoker=(0, 0, 1))
    empty = tmp_path / "empty.csv"
    empty.write_text("age,sex,smoker\n")
    state = tmp_path / "state"
    ks, cs = start_servers(state)
    try:
        operator = (state / "keyserver" / "operator.token").read_text().strip()
        request = wire.SessionCreate(schema=SCHEMA, clients=CLIENTS, parameter_set="test-small",
                                     budget=wire.BudgetSpec(epsilon=50.0, delta=1e-6),
                                     max_rows=1000, noise="two-server",
                                     selection=wire.SelectionRequest(mode="none"))
        created = post_session(ks.url, operator, request)
        sid = created.session.session_id

        def agent(client: str) -> ClientAgent:
            return ClientAgent(ks.url, cs.url, sid, client, created.client_tokens[client],
                               tmp_path / "agents")

        with agent("alice") as a:
            with pytest.raises(AgentError, match="no data rows: nothing to upload"):
                a.upload(empty)
            a.upload(wrong)
        with agent("bob") as b:
            b.upload(tables["bob"])
        # Both servers hold alice's wrong upload: encrypted, fetched by the compute server.
        with agent("alice") as a:
            deadline = time.time() + 120
            while "alice" not in a.compute_status().clients_uploaded:
                assert time.time() < deadline, "alice's upload never reached the compute server"
                time.sleep(0.3)
            result = a.upload(tables["alice"], replace=True)
        assert result.replaced
        with agent("carol") as c:
            c.upload(tables["carol"])
            document = wait_released(c, timeout=240)
            with pytest.raises(AgentError, match="409"):
                c.upload(wrong, replace=True)  # the session computed: too late
        ledger = httpx.get(f"{ks.url}/sessions/{sid}/ledger",
                           headers={"Authorization": f"Bearer {operator}"}).json()
        assert [r["client_id"] for r in ledger["uploads_replaced"]] == ["alice"]
        assert "client alice replaced its masked vector" in (state / "keyserver.log").read_text()
        assert "client alice replaced its seed" in (state / "computeserver.log").read_text()

        schema = Schema.from_dict(SCHEMA)
        layout = MarginalLayout.build(schema.domain_sizes)
        truth = layout.counts(np.concatenate([encode_csv(p, schema).records
                                              for p in tables.values()]))
        plan = SessionPlan.from_public(created.session)
        pools = [(state / server / "sessions" / sid / "noise_pool.npz").read_bytes()
                 for server in ("keyserver", "computeserver")]
        assert document.noise["kind"] == "two-server"
        for release in document.releases:
            spec = plan.release(release.release)
            cells = layout.cells_of(plan.slots_of(spec))
            noise = sum(pool_noise(blob, plan.noise_label(spec), cells) for blob in pools)
            published = np.concatenate([np.array(m.counts) for m in release.marginals.values()])
            assert np.array_equal(published, truth[cells] + noise), release.release
    finally:
        ks.stop()
        cs.stop()
