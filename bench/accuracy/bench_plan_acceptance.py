"""Every selection's plan at every budget: accepted, and how much of the eps asked it spends.

For each table, selection and eps, the servers' plan is built exactly as ``session create``
builds it (``fedbench.methods.feddpsyn_served.served_plan``: the selection's default split,
noise "auto", the demo's ``max_rows`` rule) and accounted by the composed PLD of every noise
it adds (``params.privacy_record.accounted_epsilon``). A refused plan is recorded with its
message. One JSON file (``--json``) with the command that made it.

    .venv/bin/python bench/accuracy/bench_plan_acceptance.py \
        --json bench/results/plan_acceptance.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from feddpsyn.demo import dataset  # noqa: E402
from feddpsyn.fedbench.methods.feddpsyn_served import served_plan  # noqa: E402
from feddpsyn.params.privacy_record import accounted_epsilon  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402


def _rows(csv: Path) -> int:
    with open(csv, encoding="utf-8") as f:
        return sum(1 for _ in f) - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default="fed_heart_disease,adult")
    parser.add_argument("--selections", default="none,em,noisy-greedy")
    parser.add_argument("--eps", default="0.3,1,2,4,8")
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    points = []
    for table in args.tables.split(","):
        ds = dataset(table)
        schema, rows = Schema.load(ds.schema), _rows(ds.csv)
        for selection in args.selections.split(","):
            for eps in (float(e) for e in args.eps.split(",")):
                start = time.perf_counter()
                point = {"table": table, "selection": selection, "eps": eps,
                         "delta": args.delta}
                try:
                    plan = served_plan(schema, rows, eps, args.delta, selection, None)
                    accounted = accounted_epsilon(plan)
                    point.update(accepted=True, accounting=plan.accounting,
                                 epsilon_accounted=accounted,
                                 spent=None if accounted is None else accounted / eps,
                                 encrypted_bits_per_count=plan.joint_columns)
                except ValueError as exc:
                    point.update(accepted=False, refusal=str(exc))
                point["build_seconds"] = round(time.perf_counter() - start, 2)
                print(json.dumps(point), flush=True)
                points.append(point)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "what": "plans accepted at each budget, and the share of eps their noises spend "
                "(composed PLD at the conversion delta)",
        "command": "python bench/accuracy/bench_plan_acceptance.py " + " ".join(sys.argv[1:]),
        "commit": head, "machine": platform.node(),
        "date": datetime.date.today().isoformat(), "points": points}, indent=1) + "\n")


if __name__ == "__main__":
    main()
