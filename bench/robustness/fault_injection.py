"""Fault injection: kill -9 a random server at a random moment of a session, restart it on the
same state, and check the session completes, each release is published once and the ledger
charges each release exactly once. Repeats for --trials trials on loopback.

Run: .venv/bin/python bench/robustness/fault_injection.py [--trials 10] [--max-delay 3]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from feddpsyn.clients.agent import ClientAgent  # noqa: E402
from feddpsyn.common import wire  # noqa: E402
from feddpsyn.demo import start_servers  # noqa: E402
from feddpsyn.operator_api import create_session  # noqa: E402

CLIENTS = ["alice", "bob", "carol", "dave"]


def wide_session(ks_url: str, operator: str, columns: int, bins: int) -> wire.SessionCreated:
    """A session large enough (default parameter set, many pairs) that encryption, P1 and
    the releases take seconds, so random kill times land inside them."""
    schema = {"columns": [{"name": f"x{j}", "type": "continuous", "min": 0, "max": 100,
                           "bins": bins} for j in range(columns)]}
    request = wire.SessionCreate(schema=schema, clients=CLIENTS,
                                 budget=wire.BudgetSpec(epsilon=1, delta=1e-6),
                                 selection=wire.SelectionRequest(mode="none"))
    return create_session(ks_url, operator, request, timeout=1800)


def write_csvs(directory: Path, columns: int) -> dict[str, Path]:
    rng = random.Random(0)
    out = {}
    for client in CLIENTS:
        path = directory / f"{client}.csv"
        rows = [",".join(f"x{j}" for j in range(columns))]
        rows += [",".join(str(rng.randint(0, 100)) for _ in range(columns)) for _ in range(300)]
        path.write_text("\n".join(rows) + "\n")
        out[client] = path
    return out


def trial(directory: Path, victim: str, delay: float, during_uploads: bool,
          columns: int, bins: int) -> dict:
    state = directory / "state"
    ks, cs = start_servers(state)
    operator = (state / "keyserver" / "operator.token").read_text().strip()
    created = wide_session(ks.url, operator, columns, bins)
    sid = created.session.session_id
    csvs = write_csvs(directory, columns)
    uploaded = CLIENTS[:1] if during_uploads else CLIENTS
    for client in uploaded:
        with ClientAgent(ks.url, cs.url, sid, client, created.client_tokens[client],
                         directory / "agents") as agent:
            agent.upload(csvs[client])
    time.sleep(delay)
    target = ks if victim == "keyserver" else cs
    os.kill(target.proc.pid, signal.SIGKILL)
    target.proc.wait(10)
    ks.stop()
    cs.stop()
    ks, cs = start_servers(state)
    try:
        started = time.time()
        for client in CLIENTS:  # re-running every upload is safe: idempotent
            with ClientAgent(ks.url, cs.url, sid, client, created.client_tokens[client],
                             directory / "agents") as agent:
                agent.upload(csvs[client])
        with ClientAgent(ks.url, cs.url, sid, CLIENTS[0], created.client_tokens[CLIENTS[0]],
                         directory / "agents") as agent:
            while agent.status().state != "released":
                if time.time() - started > 120:
                    return {"completed": False}
                time.sleep(0.3)
            first, second = agent.release(), agent.release()
        ledger = httpx.get(f"{ks.url}/sessions/{sid}/ledger",
                           headers={"Authorization": f"Bearer {operator}"}).json()
        return {"completed": True, "stable": first == second,
                "charged_once": [e["release"] for e in ledger["entries"]] == ["one_way",
                                                                             "two_way"],
                "recovery_s": time.time() - started}
    finally:
        ks.stop()
        cs.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--max-delay", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--columns", type=int, default=12)
    parser.add_argument("--bins", type=int, default=10)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    results = []
    for i in range(args.trials):
        victim = rng.choice(["keyserver", "computeserver"])
        delay = rng.uniform(0, args.max_delay)
        during_uploads = rng.random() < 0.3
        with tempfile.TemporaryDirectory() as tmp:
            r = trial(Path(tmp), victim, delay, during_uploads, args.columns, args.bins)
        results.append(r)
        print(f"trial {i}: kill -9 {victim} {delay:.2f} s after "
              f"{'the first upload' if during_uploads else 'the last upload'}: {r}", flush=True)
    ok = all(r.get("completed") and r.get("stable") and r.get("charged_once") for r in results)
    print(f"{sum(r.get('completed', False) for r in results)}/{len(results)} completed; "
          f"all stable and charged exactly once: {ok}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
