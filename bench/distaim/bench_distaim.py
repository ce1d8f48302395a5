"""DistAIM on Adult in real three-party MPC: wall time, bytes between the parties and peak
memory per party, and the machine it ran on.

    .venv/bin/python bench/distaim/bench_distaim.py --json bench/results/distaim_adult_mpc.json

What runs, by default FLAIM's setting as ``bench_distaim_flaim.py`` defines it (Adult's 14
attributes with continuous columns in 32 bins, ``adult_flaim``; 100 clients; T = 10 rounds;
eps = 1, delta = 1e-5; participation p = 0.1 under the project's default schedule,
deferred) with Adult's every-pair workload (91 pairs; with the 1-ways 105 candidates and
35,314 counts a client) and the plan the servers derive (``distaim.plan``: fixed rounds,
``--rounds 0`` for AIM's own plan with annealing). Clients are split by k-means on the
one-hot records (``fedbench.partitions.feature_skew``; ``--partition umap`` is FLAIM's UMAP
split, which needs the bench extra). The split decides which rows a client holds, not the
servers' work: every client uploads the whole layout and every check is per cell.

As an operator runs it: three ``feddpsyn distaim serve`` processes on 127.0.0.1 (HTTP intake
and MPyC party on free ports); the session created at the three through the operator API
(``distaim.operator.create_session``); every client counts its marginals and uploads its
seed-compressed Shamir shares over HTTP (``distaim.client.upload_vector``, one client after
another); the operator starts the run and polls until the three servers are done (bounded
by ``--timeout``); the three releases must be identical.

What it records (``--json``): the wall time of each step as the operator sees it (servers'
start, session, uploads, MPC run); per party, from the server's own run record in its state
directory, the wall seconds, CPU seconds and bytes sent of each phase (connect;
load_shares: reading and expanding the uploads; admission: the degree check; validation:
every client's counts checked inside MPC; aim) and inside AIM the 1-way initialisation,
each round's select (secure scores and exponential mechanism) and measure (in-MPC
Gaussian) and the plaintext estimation between them, the final fit last; the bytes each
party sent to and received from each other party (counted on its MPyC connections:
messages with their headers sent, every byte the connection delivered; before TLS if the
channels used it); the peak resident memory of each MPC party process (the kernel's
high-water mark, read by the process at its end) and of each server process
(``feddpsyn.peak_memory``); the upload bytes per client and server; the privacy record as
``feddpsyn demo --path distaim`` states it (``privacy_record``) and, unless
``--no-utility``, the workload error of the release's model and of central AIM at the same
budget; the machine (CPU model, cores, memory, load average before and after), the commit
and the command. The project has no lookup-free rate for MPC, so a time is read beside the
machine and its load. An existing ``--json`` file is never overwritten.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.distaim.distaim_common import adult_flaim  # noqa: E402
from feddpsyn.demo import ServerProcess, dataset, free_port  # noqa: E402
from feddpsyn.distaim.client import session_info, upload_vector  # noqa: E402
from feddpsyn.distaim.operator import (  # noqa: E402
    create_session,
    run_session,
    session_results,
    session_status,
)
from feddpsyn.distaim.protocol import Layout, client_vector  # noqa: E402
from feddpsyn.distaim_demo import privacy_record, release_measurements  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402
from feddpsyn.peak_memory import PeakMemory  # noqa: E402

FU_ET_AL_MINUTES = 24  # Fu et al. 2026: MPC AIM on Adult over a WAN
POLL_SECONDS = 2.0


def flaim_schema(names: list[str], sizes: tuple[int, ...]) -> dict:
    """The schema the servers get for ``adult_flaim``'s columns: Adult's bundled schema with
    only those columns, each continuous one cut into as many bins as its domain size there
    (so the servers' layout is the one the records were counted in: checked)."""
    full = Schema.load(dataset("adult").schema).to_dict()
    by_name = {c["name"]: c for c in full["columns"]}
    columns = []
    for name, size in zip(names, sizes, strict=True):
        column = dict(by_name[name])
        if column["type"] == "continuous":
            column["bins"] = int(size)
        columns.append(column)
    raw = dict(full, columns=columns)
    if tuple(Schema.from_dict(raw).domain_sizes) != tuple(sizes):
        raise RuntimeError("the servers' schema would not give adult_flaim's domain sizes")
    return raw


def split(records: np.ndarray, sizes: tuple[int, ...], clients: int, partition: str,
          cache: Path) -> np.ndarray:
    """The client of each record."""
    from feddpsyn.fedbench.partitions import feature_skew, umap_clusters, uniform
    rng = np.random.default_rng(0)
    if partition == "uniform":
        return uniform(len(records), clients, rng)
    if partition == "kmeans":
        return feature_skew(records, sizes, clients, rng)
    # FLAIM's split: UMAP on private-pgm's codes, seed 0, kept (as bench_distaim_flaim.py)
    if cache.exists():
        owner = np.load(cache)
        if owner.max() + 1 == clients and len(owner) == len(records):
            return owner
    owner = umap_clusters(adult_flaim(None)[0], clients, seed=0)
    np.save(cache, owner)
    return owner


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    memory = next((int(line.split()[1]) for line in
                   Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:")), 0)
    # versions from the installed metadata: importing mpyc would parse this command line
    from importlib.metadata import version
    return {"host": platform.node(), "platform": platform.platform(),
            "python": platform.python_version(), "cpu_model": cpu, "cores": os.cpu_count(),
            "memory_gb": round(memory / 2 ** 20, 1), "mpyc": version("mpyc"),
            "gmpy2": version("gmpy2")}


def commit() -> dict:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=30).stdout.strip()
    return {"commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def aim_breakdown(report: dict) -> dict:
    """AIM's time at one party from its step timings and clock: the 1-way initialisation
    (aggregation, the 1-ways' measurements, the first fit), each round's select, measure and
    the plaintext estimation after it (model fit and the next round's answers; the last is
    the final fit)."""
    stats, steps = report["run_stats"], report["timings"]
    start, end = stats["aim_started_at"], stats["aim_ended_at"]
    selects = [i for i, s in enumerate(steps) if s["step"] == "select"]
    first = steps[selects[0]]["started_at"] if selects else end
    init_steps = steps[:selects[0]] if selects else steps
    rounds = []
    for k, i in enumerate(selects):
        after = steps[i + 1:selects[k + 1]] if k + 1 < len(selects) else steps[i + 1:]
        last = after[-1] if after else steps[i]
        following = steps[selects[k + 1]]["started_at"] if k + 1 < len(selects) else end
        rounds.append({
            "round": k + 1, "candidates": steps[i]["candidates"], "cells": steps[i]["cells"],
            "select_s": round(steps[i]["seconds"], 3),
            "select_cpu_s": round(steps[i]["cpu_seconds"], 3),
            "measure_s": round(sum(s["seconds"] for s in after), 3),
            "measure_cpu_s": round(sum(s["cpu_seconds"] for s in after), 3),
            "measured_cells": sum(s.get("cells", 1) for s in after),
            "estimate_s": round(following - last["started_at"] - last["seconds"], 3)})
    return {"init_one_ways_s": round(first - start, 3),
            "init_measure_s": round(sum(s["seconds"] for s in init_steps), 3),
            "init_measured_cells": sum(s.get("cells", 1) for s in init_steps),
            "select_s": round(sum(r["select_s"] for r in rounds), 3),
            "measure_s": round(sum(r["measure_s"] for r in rounds), 3),
            "estimate_s": round(sum(r["estimate_s"] for r in rounds[:-1]), 3),
            "final_fit_s": rounds[-1]["estimate_s"] if rounds else 0.0,
            "rounds": rounds}


def wait_done(urls, tokens, session_id, timeout: float, state: Path) -> None:
    """Poll the three servers until done (every POLL_SECONDS, at most ``timeout``)."""
    for _ in range(int(timeout / POLL_SECONDS) + 1):
        states = [s["state"] for s in session_status(urls, tokens, session_id)]
        if all(s == "done" for s in states):
            return
        if any(s not in ("running", "done") for s in states):
            logs = [p.read_text()[-1500:] for p in state.glob("server*/sessions/*/party.log")]
            raise SystemExit(f"the MPC run failed: {states}\n" + "\n".join(logs))
        time.sleep(POLL_SECONDS)
    raise SystemExit(f"the MPC run was not done after {timeout} s")


def utility(records, sizes, workload, release: dict, rho: Fraction, rounds, max_rounds,
            seed: int) -> dict:
    """Workload error (``synthesis.evaluate.workload_error``) of a sample of the model fitted
    on the release (as the demo synthesizes) and of central AIM on the union at the same
    rho and rounds (as the demo's baseline)."""
    from feddpsyn.synthesis.aim import PlainOracle, aim
    from feddpsyn.synthesis.evaluate import workload_error
    from feddpsyn.synthesis.graphical_model import GraphicalModel
    t = time.time()
    model = GraphicalModel(sizes)
    model.fit(release_measurements(release, sizes))
    synthetic = model.sample(len(records), np.random.default_rng(seed))
    error = workload_error(records, synthetic, sizes)
    fit_seconds = time.time() - t
    t = time.time()
    central = aim(PlainOracle(records, sizes), sizes, workload, rho, rounds=rounds,
                  max_rounds=max_rounds, rng=np.random.default_rng(seed))
    central_error = workload_error(records, central.synthesize(len(records)), sizes)
    return {"workload_error": error, "central_workload_error": central_error,
            "release_fit_seconds": round(fit_seconds, 1),
            "central_seconds": round(time.time() - t, 1)}


def read_by_window(release: dict) -> int:
    """How many admitted clients had joined by the last participation round (what every
    round reads under the deferred schedule; all of them at participation 1)."""
    joined = release["participation"]
    return sum(1 for c in release["admitted"] if joined["arrival_round"][c] is not None
               and joined["arrival_round"][c] <= joined["window"])


def bins_arg(text: str) -> int | None:
    return None if text == "pgm" else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10,
                        help="FLAIM's T (0: AIM's own plan, T = 16 d with annealing)")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--bins", type=bins_arg, default=32,
                        help="bins per continuous column (FLAIM's 32), or 'pgm'")
    parser.add_argument("--columns", type=int, default=0,
                        help="only the first N of the 14 attributes (0: all; for tests)")
    parser.add_argument("--participation", default="1/10", help="FLAIM's p = 0.1")
    parser.add_argument("--schedule", choices=["deferred", "interleaved"], default="deferred")
    parser.add_argument("--partition", choices=["kmeans", "umap", "uniform"], default="kmeans")
    parser.add_argument("--split-cache", type=Path, default=Path(
        "/tmp/feddpsyn-adult-umap-k100-seed0.npy"), help="where the UMAP split is kept")
    parser.add_argument("--max-client-rows", type=int, default=1 << 20,
                        help="the public bound on a client's rows (the CLI's default)")
    parser.add_argument("--timeout", type=float, default=6 * 3600,
                        help="bound on the MPC run (s): the servers' deadline and the wait")
    parser.add_argument("--out", type=Path, help="the servers' state (default: a temporary "
                                                 "directory, removed)")
    parser.add_argument("--no-utility", action="store_true",
                        help="skip the workload errors (model fit and central AIM)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.json and args.json.exists():
        raise SystemExit(f"{args.json} exists: results are never overwritten")
    if args.out is None:
        with tempfile.TemporaryDirectory(prefix="distaim-bench-") as tmp:
            run(args, Path(tmp))
    else:
        run(args, args.out)


def run(args, out: Path) -> None:
    import logging
    logging.getLogger("httpx").setLevel(logging.WARNING)
    load_before = os.getloadavg()
    started = time.time()
    records, sizes, names = adult_flaim(args.bins)
    if args.columns:
        records, sizes, names = records[:, :args.columns], sizes[:args.columns], \
            names[:args.columns]
    schema = flaim_schema(names, sizes)
    d = len(sizes)
    workload = [(i, j) for i in range(d) for j in range(i + 1, d)]
    layout = Layout.for_workload(sizes, workload)
    owner = split(records, sizes, args.clients, args.partition, args.split_cache)
    client_ids = [f"c{k:03d}" for k in range(args.clients)]
    rows = np.bincount(owner, minlength=args.clients)
    prepare_seconds = time.time() - started
    print(f"Adult: {len(records)} rows, {d} attributes {list(sizes)}; {len(workload)} pairs, "
          f"{len(layout.cliques)} candidates, {layout.length} counts a client; "
          f"{args.clients} clients ({args.partition}, {rows.min()}-{rows.max()} rows)",
          flush=True)

    wall: dict[str, float] = {"prepare_data": round(prepare_seconds, 1)}
    servers: list[ServerProcess] = []
    state = out / "state"
    try:
        t = time.time()
        for x in (1, 2, 3):
            folder = state / f"server{x}"
            folder.mkdir(parents=True, exist_ok=True)
            port = free_port()
            servers.append(ServerProcess(
                ["distaim", "serve", "--state-dir", str(folder), "--party", str(x),
                 "--host", "127.0.0.1", "--port", str(port),
                 "--mpc-address", f"127.0.0.1:{free_port()}"], folder / "server.log",
                f"http://127.0.0.1:{port}"))
        for server in servers:
            server.wait_healthy(timeout=120)
        wall["start_servers"] = round(time.time() - t, 1)
        memory = PeakMemory({str(x): s.proc.pid for x, s in enumerate(servers, start=1)},
                            interval=1.0).start()
        urls = [s.url for s in servers]
        operator = [(state / f"server{x}" / "operator.token").read_text().strip()
                    for x in (1, 2, 3)]

        t = time.time()
        made = create_session(urls, operator, {
            "session_id": "bench-" + time.strftime("%Y%m%d-%H%M%S"), "schema": schema,
            "clients": client_ids, "epsilon": args.epsilon, "delta": args.delta,
            "workload": None, "rounds": args.rounds or None,
            "participation": args.participation, "schedule": args.schedule,
            "rows_bound": args.max_client_rows, "mpc_deadline": args.timeout})
        if made.plan["cells"] != layout.length:
            raise SystemExit("the servers' layout differs from the bench's")
        wall["create_session"] = round(time.time() - t, 1)

        import httpx
        t = time.time()
        sent = []
        with httpx.Client(timeout=300) as http:
            for k, cid in enumerate(client_ids):
                info = session_info(http, urls, made.session_id, made.tokens[cid])
                sent.append(upload_vector(http, urls, made.session_id, cid, made.tokens[cid],
                                          client_vector(records[owner == k], layout),
                                          int(info["modulus"])))
        wall["uploads"] = round(time.time() - t, 1)
        print(f"uploads: {args.clients} clients in {wall['uploads']} s, {sent[0]} bytes a "
              "client over HTTP", flush=True)

        t = time.time()
        run_session(urls, operator, made.session_id)
        wait_done(urls, operator, made.session_id, args.timeout, state)
        wall["mpc_run"] = round(time.time() - t, 1)
        releases = session_results(urls, operator, made.session_id)
        memory.stop()
        servers_memory = memory.report() or {}
    finally:
        for server in servers:
            server.stop()
    wall["total"] = round(time.time() - started, 1)
    load_after = os.getloadavg()

    first = releases[0]
    identical = all(r["measurements"] == first["measurements"]
                    and r["selected"] == first["selected"] for r in releases[1:])
    if not identical:
        raise SystemExit("the three servers opened different values")
    parties = {}
    for x in (1, 2, 3):
        report = json.loads((state / f"server{x}" / "sessions" / made.session_id
                             / "result.json").read_text())
        stats = report["run_stats"]
        parties[str(x)] = {
            "phases_s": {k: round(v, 2) for k, v in report["phases"].items()},
            "phases_cpu_s": {k: round(v, 2) for k, v in stats["phase_cpu_seconds"].items()},
            "phases_bytes_sent": stats["phase_bytes_sent"],
            "cpu_s": round(stats["cpu_seconds"], 1),
            "aim": aim_breakdown(report),
            "bytes_sent": stats["bytes"]["sent"],
            "bytes_received": stats["bytes"]["received"],
            "bytes_sent_total": sum(stats["bytes"]["sent"].values()),
            "bytes_received_total": sum(stats["bytes"]["received"].values()),
            "peak_rss_mb": {"mpc_party": stats["peak_rss_mb"],
                            "server": servers_memory.get(str(x), {}).get("process_mb")}}
    seed_body = len(json.dumps({"seed_hex": "00" * 32}))
    record = privacy_record(first, args.epsilon, args.delta)
    result = {
        "what": "DistAIM on Adult in real three-party MPC: three `feddpsyn distaim serve` "
                "processes on 127.0.0.1, wall time, bytes between parties, peak memory",
        "command": " ".join(["python", "bench/distaim/bench_distaim.py", *sys.argv[1:]]),
        **commit(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": machine() | {"load_before": [round(v, 2) for v in load_before],
                                "load_after": [round(v, 2) for v in load_after]},
        "setting": {"dataset": "adult (FLAIM's 14 attributes)", "rows": len(records),
                    "attributes": names, "domain_sizes": list(sizes),
                    "bins": "pgm" if args.bins is None else args.bins,
                    "clients": args.clients, "partition": args.partition,
                    "client_rows": {"min": int(rows.min()), "median": float(np.median(rows)),
                                    "max": int(rows.max())},
                    "workload": f"every pair ({len(workload)})",
                    "candidates": len(layout.cliques), "cells_per_client": layout.length,
                    "plan": "fixed rounds" if args.rounds else "AIM's own (annealing)",
                    "rounds": args.rounds or None, "epsilon": args.epsilon,
                    "delta": args.delta, "rho": made.plan["rho"],
                    "participation": made.plan["participation"],
                    "schedule": args.schedule, "max_client_rows": args.max_client_rows,
                    "score_grid_bits": made.plan["score_grid_bits"],
                    "plan_digest": made.plan_digest},
        "wall_s": wall,
        "upload": {"http_bytes_per_client": sent[0],
                   "http_bytes_per_server": {"1": seed_body,
                                             "2": (sent[0] - seed_body) // 2,
                                             "3": (sent[0] - seed_body) // 2},
                   "seconds_per_client": round(wall["uploads"] / args.clients, 3)},
        "parties": parties,
        "bytes_between_parties": sum(p["bytes_sent_total"] for p in parties.values()),
        "release": {"admitted": len(first["admitted"]), "excluded": first["excluded"],
                    "clients_read_by_round_T": read_by_window(first),
                    "selected": first["selected"], "noisy_sizes": first["noisy_sizes"],
                    "identical_at_the_three_servers": identical},
        "privacy": record,
        "fu_et_al_2026_minutes": FU_ET_AL_MINUTES,
    }
    if not args.no_utility:
        result["utility"] = utility(records, sizes, workload, first,
                                    Fraction(made.plan["rho"]), args.rounds or None,
                                    made.plan["max_rounds"], seed=0)
    summary(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")


def summary(result: dict) -> None:
    wall = result["wall_s"]
    print(f"wall {wall['total']:.0f} s: servers {wall['start_servers']} s, uploads "
          f"{wall['uploads']} s, MPC run {wall['mpc_run']} s ({wall['mpc_run'] / 60:.1f} min; "
          f"Fu et al. 2026: {FU_ET_AL_MINUTES} min over a WAN)")
    for x, p in result["parties"].items():
        aim = p["aim"]
        phases = ", ".join(f"{k} {v:.1f}" for k, v in p["phases_s"].items())
        print(f"party {x}: {phases} s; in aim: 1-ways {aim['init_one_ways_s']:.1f}, select "
              f"{aim['select_s']:.1f}, measure {aim['measure_s']:.1f}, estimate "
              f"{aim['estimate_s']:.1f}, final fit {aim['final_fit_s']:.1f} s; sent "
              f"{p['bytes_sent_total'] / 1e6:.1f} MB, received "
              f"{p['bytes_received_total'] / 1e6:.1f} MB; peak "
              f"{p['peak_rss_mb']['mpc_party']:.0f} MB (server {p['peak_rss_mb']['server']} MB)")
    privacy = result["privacy"]
    print(f"release: {privacy['rounds']} rounds, epsilon {privacy['epsilon_spent']:.4f} of "
          f"{privacy['epsilon_budget']}, extra delta {privacy['extra_delta']:.2e} of "
          f"{privacy['delta_reserved']:.0e} reserved")
    if "utility" in result:
        u = result["utility"]
        print(f"two-way error: DistAIM {u['workload_error']['two_way']:.4f}, central AIM "
              f"{u['central_workload_error']['two_way']:.4f}")


if __name__ == "__main__":
    main()
