"""The DistAIM demo: data owners, three real servers on loopback, AIM in MPC, one synthetic
table (``run_distaim_demo``; the lead wires it into ``feddpsyn demo --path distaim``).

Starts the three DistAIM servers as processes on 127.0.0.1 (HTTP intake and MPyC on free
ports), creates the session at the three through their operator API
(``distaim.operator.create_session``: one plan, digests checked), splits a bundled data set
over clients, has every client count the workload (all 2-way marginals) and upload its
seed-compressed Shamir shares over HTTP with the tokens the servers issued, starts the MPC
run at the three servers, waits (bounded), checks that the three servers opened the same values,
fits the graphical model on the released measurements (post-processing), writes
``synthetic.csv`` in the original values and ``report.json`` with the TFHE demo's fields,
against central AIM (plaintext, exact samplers) at the same budget.

Budget: rho from (eps, delta - reserve) by the CKS20 conversion, where the reserve
(delta / 1000) covers the in-MPC samplers' extra delta, which is checked to fit in it.
AIM runs with a planned number of rounds (``rounds``, default 10 as in FLAIM's experiments)
so that the demo's length is bounded. Every client takes part from the first round
(``participation="1"``, central AIM's data) unless asked otherwise; with a rate below 1,
``schedule`` says which clients AIM's rounds read (``deferred``, this project's default, or
``interleaved``, FLAIM's Algorithm 3 as written: ``distaim.protocol.Schedule``).
"""

from __future__ import annotations

import csv
import json
import logging
import os
import time
from fractions import Fraction
from pathlib import Path

import httpx
import numpy as np

from feddpsyn.common.version import VERSION
from feddpsyn.demo import ServerProcess, dataset, free_port, split_csv
from feddpsyn.distaim.client import session_info, upload_vector
from feddpsyn.distaim.operator import create_session, run_session, session_results, session_status
from feddpsyn.distaim.plan import delta_reserve
from feddpsyn.distaim.protocol import Layout, client_vector
from feddpsyn.dp.accounting import rho_to_eps
from feddpsyn.params.schema import Schema
from feddpsyn.params.table_codec import decode_records, encode_csv
from feddpsyn.progress import ProgressDisplay, Step, wait_for
from feddpsyn.synthesis.evaluate import workload_error
from feddpsyn.synthesis.marginals import NoisyMarginal

__all__ = ["run_distaim_demo", "release_measurements", "privacy_record"]

ROOT = Path(__file__).resolve().parents[1]


def release_measurements(release: dict, sizes) -> list[NoisyMarginal]:
    """The noisy marginals of a server's release (its ``measurements``), shaped."""
    return [NoisyMarginal(tuple(m["clique"]), np.asarray(m["values"], dtype=float)
                          .reshape([sizes[a] for a in m["clique"]]), m["sigma2"])
            for m in release["measurements"]]


def privacy_record(release: dict, epsilon: float, delta: float) -> dict:
    """What the demo's report states of a release's privacy: the budget, the epsilon its
    rho_spent gives at delta less the reserve (CKS20), the samplers' and the validation's
    extra delta against the reserve (delta / 1000), and the rounds run."""
    reserve = delta_reserve(delta)
    rho_spent = Fraction(release["rho_spent"])
    return {"epsilon_budget": epsilon,
            "epsilon_spent": rho_to_eps(rho_spent, Fraction(delta) - reserve),
            "delta": delta, "rho_spent": str(rho_spent),
            "extra_delta": (release["selection_extra_delta"]
                            + release["measurement_extra_delta"]
                            + release["validation_extra_delta"]),
            "delta_reserved": float(reserve), "rounds": len(release["selected"])}


def _synthesize(measurements: list[NoisyMarginal], sizes, rows, seed: int):
    from feddpsyn.synthesis.graphical_model import GraphicalModel
    model = GraphicalModel(sizes)
    model.fit(measurements)
    return model.sample(rows, np.random.default_rng(seed))


def run_distaim_demo(out: Path, dataset_name: str = "fed_heart_disease", clients: int = 4,
                     epsilon: float = 1.0, delta: float = 1e-5, say=print, *,
                     rounds: int = 10, rows: int | None = None, seed: int = 0,
                     timeout: float = 900, participation: str = "1",
                     schedule: str = "deferred") -> dict:
    if schedule not in ("deferred", "interleaved"):
        raise ValueError(f"schedule must be 'deferred' or 'interleaved', not {schedule!r}")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    phases: dict[str, float] = {}
    ds = dataset(dataset_name)
    schema = Schema.load(ds.schema)
    sizes = tuple(schema.domain_sizes)
    out.mkdir(parents=True, exist_ok=True)
    t = time.time()
    csvs = split_csv(ds, clients, out / "clients", seed)
    client_records = [encode_csv(p, schema).records for p in csvs]
    phases["split"] = time.time() - t
    d = len(sizes)
    workload = [(i, j) for i in range(d) for j in range(i + 1, d)]
    layout = Layout.for_workload(sizes, workload)
    client_ids = [f"owner{i}" for i in range(len(csvs))]
    http_ports = [free_port() for _ in range(3)]
    mpc_ports = [free_port() for _ in range(3)]
    servers: list[ServerProcess] = []
    token_files: list[Path] = []
    t = time.time()
    try:
        for x in (1, 2, 3):
            state = out / "state" / f"server{x}"
            state.mkdir(parents=True, exist_ok=True)
            token_files.append(state / "operator.token")
            servers.append(ServerProcess(
                ["distaim", "serve", "--state-dir", str(state), "--party", str(x),
                 "--host", "127.0.0.1", "--port", str(http_ports[x - 1]),
                 "--mpc-address", f"127.0.0.1:{mpc_ports[x - 1]}"], state / "server.log",
                f"http://127.0.0.1:{http_ports[x - 1]}"))
        for server in servers:
            server.wait_healthy()
        phases["start_servers"] = time.time() - t
        urls = [s.url for s in servers]
        operator = [f.read_text().strip() for f in token_files]
        # the operator's step: one session, one plan, created at the three servers
        made = create_session(urls, operator, {
            "session_id": "distaim-" + time.strftime("%Y%m%d-%H%M%S"),
            "schema": schema.to_dict(), "clients": client_ids, "epsilon": epsilon,
            "delta": delta, "workload": [list(c) for c in workload], "rounds": rounds,
            "participation": participation, "schedule": schedule, "rows_bound": 1 << 20,
            "mpc_deadline": timeout})
        session_id, tokens = made.session_id, made.tokens
        if made.plan["cells"] != layout.length:
            raise RuntimeError("the servers' layout differs from the demo's")
        say(f"[distaim] {ds.name}: {len(csvs)} data owners; servers "
            f"{', '.join(urls)}; session {session_id}, plan {made.plan_digest[:16]}; "
            f"{layout.length} counts per owner")

        t = time.time()
        upload_bytes = []
        with httpx.Client(timeout=120) as http:
            for cid, records in zip(client_ids, client_records):
                info = session_info(http, urls, session_id, tokens[cid])
                if info["plan_digest"] != made.plan_digest:
                    raise RuntimeError("servers describe a different session")
                sent = upload_vector(http, urls, session_id, cid, tokens[cid],
                                     client_vector(records, layout), int(info["modulus"]))
                upload_bytes.append(sent)
                say(f"[distaim]   {cid}: {len(records)} rows, shares uploaded ({sent} bytes)")
        phases["client_uploads"] = time.time() - t

        t = time.time()
        run_session(urls, operator, session_id)
        last = [""]

        def poll() -> list[Step] | None:
            states = [s["state"] for s in session_status(urls, operator, session_id)]
            if all(s == "done" for s in states):
                return None
            last[0] = ", ".join(f"server {x} {s}" for x, s in enumerate(states, start=1))
            if "failed" in states:
                raise RuntimeError(f"MPC run failed ({last[0]}); see {out / 'state'}")
            return [Step("MPC run: servers done", states.count("done"), len(states), last[0])]

        with ProgressDisplay(prefix="[distaim] ", say=say,
                             live=None if say is print else False) as display:
            try:
                wait_for(poll, timeout=timeout, every=1.0, display=display)
            except TimeoutError:
                raise RuntimeError(f"MPC run not done after {timeout} s ({last[0]})") from None
        results = session_results(urls, operator, session_id)
        phases["mpc_aim"] = time.time() - t
    finally:
        for server in servers:
            server.stop()
    first = results[0]
    for other in results[1:]:
        if (other["measurements"] != first["measurements"]
                or other["selected"] != first["selected"]):
            raise RuntimeError("the three servers opened different values")
    record = privacy_record(first, epsilon, delta)
    if record["extra_delta"] > record["delta_reserved"]:
        raise RuntimeError("sampler deviation exceeds the reserved delta")
    say(f"[distaim] AIM in MPC: {len(first['selected'])} rounds, admitted "
        f"{first['admitted']}, excluded {first['excluded'] or 'none'}")
    (out / "release.json").write_text(json.dumps({k: first[k] for k in (
        "admitted", "excluded", "selected", "measurements", "rho_spent",
        "selection_extra_delta", "measurement_extra_delta", "validation_extra_delta")},
        indent=1))

    t = time.time()
    records = _synthesize(release_measurements(first, sizes), sizes, rows, seed)
    rows_out = decode_records(records, schema, np.random.default_rng(seed))
    with (out / "synthetic.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(schema.names)
        writer.writerows(rows_out)
    phases["synthesis"] = time.time() - t
    union = np.concatenate(client_records)
    error = workload_error(union, records, sizes)

    t = time.time()
    from feddpsyn.synthesis.aim import PlainOracle, aim
    rho = Fraction(made.plan["rho"])
    central = aim(PlainOracle(union, sizes), sizes, workload, rho, rounds=rounds,
                  max_rounds=rounds,
                  rng=np.random.default_rng(seed))
    central_records = central.synthesize(rows)
    central_error = workload_error(union, central_records, sizes)
    phases["central_baseline"] = time.time() - t
    report = {
        "version": VERSION,
        "dataset": ds.name,
        "clients": len(csvs),
        "rows_union": int(len(union)),
        "rows_synthetic": int(len(records)),
        "method": "distaim",
        "epsilon_budget": epsilon,
        "epsilon_spent": record["epsilon_spent"],
        "delta": delta,
        "rho_spent": record["rho_spent"],
        "participation": {"rate": participation, "schedule": schedule},
        "noise": {"mechanism": "discrete Gaussian in MPC (alias tables over secret bits)",
                  "selection": "exponential mechanism in MPC (fixed-point weights)",
                  "extra_delta": record["extra_delta"],
                  "delta_reserved": record["delta_reserved"], "rounds": record["rounds"]},
        "phases": {k: round(v, 3) for k, v in phases.items()},
        "upload_bytes_per_client": upload_bytes,
        "workload_error": error,
        "central_workload_error": central_error,
        "session_id": session_id,
        "excluded_clients": first["excluded"],
        "mpc_timings_s": {"per_party_phases": first["phases"]},
    }
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    target = Path(os.environ.get("DISTAIM_OUT", "demo-out")) / (
        "distaim-" + time.strftime("%Y%m%d-%H%M%S"))
    print(json.dumps(run_distaim_demo(target), indent=1))
    print(f"written to {target}")
