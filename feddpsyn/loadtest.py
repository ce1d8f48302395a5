"""A load run on loopback: N clients upload at once to both server processes.

Used by ``bench/robustness/bench_load.py`` (N=100, latency percentiles) and by a bounded test. Every
request goes to 127.0.0.1; every loop and wait is bounded.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

from feddpsyn.clients.agent import ClientAgent
from feddpsyn.common import wire
from feddpsyn.demo import start_servers
from feddpsyn.operator_api import create_session
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.schema import Schema

LOAD_SCHEMA = {"name": "load", "columns": [
    {"name": "a", "type": "categorical", "i2s": ["x", "y", "z"]},
    {"name": "b", "type": "continuous", "min": 0, "max": 10, "bins": 4},
    {"name": "c", "type": "categorical", "i2s": ["p", "q"]},
]}


def _write_csv(path: Path, rng: np.random.Generator, rows: int) -> np.ndarray:
    a = rng.integers(0, 3, rows)
    b = rng.integers(0, 11, rows)
    c = rng.integers(0, 2, rows)
    lines = ["a,b,c"] + [f"{'xyz'[i]},{j},{'pq'[k]}" for i, j, k in zip(a, b, c)]
    path.write_text("\n".join(lines) + "\n")
    schema = Schema.from_dict(LOAD_SCHEMA)
    return np.stack([a, [schema.columns[1].bin_of(int(v)) for v in b], c], axis=1)


def run_load(directory: Path, n_clients: int, workers: int, timeout: float = 600) -> dict:
    ks, cs = start_servers(directory / "state")
    try:
        operator = (directory / "state" / "keyserver" / "operator.token").read_text().strip()
        ids = [f"c{i:04d}" for i in range(n_clients)]
        created = create_session(
            ks.url, operator, timeout=timeout, poll=0.5,
            request=wire.SessionCreate(schema=LOAD_SCHEMA, clients=ids,
                                       parameter_set="test-small",
                                       budget=wire.BudgetSpec(epsilon=50, delta=1e-6),
                                       max_rows=10_000,
                                       # The load is the intake; selection is measured apart.
                                       selection=wire.SelectionRequest(mode="none")))
        sid = created.session.session_id
        rng = np.random.default_rng(0)
        records = [_write_csv(directory / f"{cid}.csv", rng, int(rng.integers(5, 40)))
                   for cid in ids]

        def upload(cid: str) -> tuple[float, bool]:
            started = time.perf_counter()
            with ClientAgent(ks.url, cs.url, sid, cid, created.client_tokens[cid],
                             directory / "agents") as agent:
                result = agent.upload(directory / f"{cid}.csv")
            return (time.perf_counter() - started,
                    result.seed_receipt.stored and result.masked_receipt.stored)

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            outcomes = list(pool.map(upload, ids))
        wall = time.perf_counter() - started
        with ClientAgent(ks.url, cs.url, sid, ids[0], created.client_tokens[ids[0]],
                         directory / "agents") as agent:
            deadline = time.time() + timeout
            while agent.status().state != "released":
                if time.time() > deadline:
                    raise RuntimeError("release did not arrive in time")
                time.sleep(0.5)
            release_seconds = time.perf_counter() - started - wall
            document = agent.release()
            # A second, identical upload of every client changes nothing.
            again = [agent_upload_again(ks, cs, sid, cid, created, directory) for cid in ids[:5]]
        layout = MarginalLayout.build(Schema.from_dict(LOAD_SCHEMA).domain_sizes)
        truth = layout.counts(np.concatenate(records))
        released = np.concatenate([np.array(m.counts) for r in document.releases
                                   for m in r.marginals.values()])
        status = httpx.get(f"{ks.url}/sessions/{sid}/status",
                           headers={"Authorization": f"Bearer {operator}"}).json()
        return {"latencies": [t for t, _ in outcomes], "wall": wall,
                "stored": sum(ok for _, ok in outcomes),
                "exactly_once": len(status["clients_uploaded"]) == n_clients
                and not any(again),
                "release_seconds": release_seconds,
                "max_error": int(np.abs(released - truth).max())}
    finally:
        ks.stop()
        cs.stop()


def agent_upload_again(ks, cs, sid, cid, created, directory) -> bool:
    with ClientAgent(ks.url, cs.url, sid, cid, created.client_tokens[cid],
                     directory / "agents") as agent:
        result = agent.upload(directory / f"{cid}.csv")
    return result.seed_receipt.stored or result.masked_receipt.stored


# ---------------------------------------------------------------- admission
# The requests of docs/deployment.md's promise "a bad request is refused at once": the
# default demo's session (Fed-Heart-Disease, noisy-greedy), Adult's, a 64-column one (the
# default limit), and one categorical column of 10^5 and of 10^6 categories (10.9 MB of
# JSON, under the 64 MiB body limit).
def _categories(n: int) -> dict:
    return {"name": f"categories-{n}", "columns": [
        {"name": "a", "type": "categorical", "i2s": [f"c{i}" for i in range(n)]},
        {"name": "b", "type": "categorical", "i2s": ["x", "y"]}]}


def _wide(columns: int) -> dict:
    return {"name": f"wide-{columns}", "columns": [
        {"name": f"c{i}", "type": "categorical", "i2s": ["p", "q", "r"]}
        for i in range(columns)]}


def _kib(pid: int, field: str) -> int:
    """A process's VmRSS or VmHWM (peak) in KiB, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}")


def run_admission(directory: Path) -> dict:
    """A fresh key server process on loopback, then one request after another: each
    request's seconds to its answer (202, or the 409 naming a limit), the server's resident
    and peak memory after it, and /health's latency right after. Nothing runs beside it but
    the sessions it accepted, whose preparation starts in the key server's job."""
    from feddpsyn.demo import ServerProcess, dataset, free_port

    state = directory / "keyserver"
    port = free_port()
    server = ServerProcess(["keyserver", "--host", "127.0.0.1", "--port", str(port),
                            "--state-dir", str(state)], directory / "keyserver.log",
                           f"http://127.0.0.1:{port}")
    try:
        server.wait_healthy()
        token = (state / "operator.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

        def body(schema: dict, max_rows: int, owners: int = 4) -> str:
            return wire.SessionCreate(
                schema=schema, clients=[f"owner{i}" for i in range(owners)],
                budget=wire.BudgetSpec(epsilon=1.0, delta=1e-5),
                max_rows=max_rows).model_dump_json(by_alias=True)

        fhd = Schema.load(dataset("fed_heart_disease").schema).to_dict()
        adult = Schema.load(dataset("adult").schema).to_dict()
        requests = [("fed_heart_disease (first POST)", body(fhd, 1000)),
                    ("fed_heart_disease (second POST)", body(fhd, 1000)),
                    ("adult", body(adult, 60_000)),
                    ("64 columns of 3 categories", body(_wide(64), 10_000)),
                    ("10^5 categories", body(_categories(10 ** 5), 1000)),
                    ("10^6 categories", body(_categories(10 ** 6), 1000))]
        rows = []
        for name, content in requests:  # bounded: the list above
            rss_before = _kib(server.proc.pid, "VmRSS")
            started = time.perf_counter()
            response = httpx.post(f"{server.url}/sessions", content=content,
                                  headers=headers, timeout=120)
            seconds = time.perf_counter() - started
            health_started = time.perf_counter()
            healthy = httpx.get(f"{server.url}/health", timeout=30).status_code == 200
            detail = (wire.error_detail(response, 200) if response.status_code >= 400
                      else response.json().get("session_id", ""))
            rows.append({"request": name, "bytes": len(content),
                         "status": response.status_code, "seconds": round(seconds, 3),
                         "detail": detail, "health_seconds":
                         round(time.perf_counter() - health_started, 3),
                         "healthy": healthy, "rss_mb_before": round(rss_before / 1024, 1),
                         "rss_mb_after": round(_kib(server.proc.pid, "VmRSS") / 1024, 1),
                         "peak_mb_after": round(_kib(server.proc.pid, "VmHWM") / 1024, 1)})
        return {"requests": rows}
    finally:
        server.stop()
