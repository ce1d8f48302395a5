"""Benchmark: the default demo's federated error against its central reference, over many
draws instead of the demo's one.

``feddpsyn demo`` reports one draw of each: the servers' release synthesized, and the same
pairs released centrally on the union with one discrete Gaussian per count
(``report.central_workload_error``). With 740 rows one draw's ratio moves by 10-20% from
draw to draw, so this repeats both, each draw a fresh session:

* **federated**: ``fedbench.methods.feddpsyn_served.served_session``, the session exactly as
  the servers plan and run it (the demo's owners, plan, ``max_rows``, em's rounds as its
  exact integer model, every release's noise as the plan gives it);
* **central**: the demo's reference for the pairs that draw selected
  (``feddpsyn.demo.central_reference``);
* both synthesized with the same method (``--method``, default ``auto``, the demo's).

Prints the mean 1/2/3-way errors of each and the ratio of the means, with a bootstrap-free
standard error of the 2-way ratio (delta method over the draws).

Usage: ``.venv/bin/python experiments/demo_central_ratio/bench_demo_central_ratio.py --draws 30
[--dataset
fed_heart_disease] [--selection noisy-greedy|em] [--method auto] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.accuracy.bench_served_vs_central import _commit  # noqa: E402
from feddpsyn.demo import DEMO_ROUNDS, central_reference, dataset  # noqa: E402
from feddpsyn.fedbench.methods.feddpsyn_served import served_session  # noqa: E402
from feddpsyn.params.modes import SelectionMode  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402
from feddpsyn.params.table_codec import encode_csv  # noqa: E402
from feddpsyn.synthesis.evaluate import workload_error  # noqa: E402
from feddpsyn.synthesis.synthesize import synthesize_records  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=30)
    ap.add_argument("--dataset", default="fed_heart_disease")
    ap.add_argument("--selection", default="noisy-greedy",
                    help="the demo's default on Fed-Heart-Disease; em runs the demo's 4 rounds")
    ap.add_argument("--method", default="auto")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not 1 <= args.draws <= 1000:
        raise SystemExit("--draws is between 1 and 1000")
    ds = dataset(args.dataset)
    schema = Schema.load(ds.schema)
    records = encode_csv(ds.csv, schema).records
    owner = records[:, schema.names.index(ds.natural_column)]
    rounds = DEMO_ROUNDS.get(args.dataset) if args.selection == SelectionMode.EM else None
    started = time.perf_counter()
    fed, cen = [], []
    for draw in range(args.draws):
        result = served_session(records, owner, schema, args.epsilon, args.delta, draw,
                                args.selection, rounds, args.method)
        fed.append(workload_error(records, result.records, schema.domain_sizes))
        chosen = [tuple(p) for p in result.notes["selected_pairs"]]
        reference = central_reference(schema, records, chosen, args.epsilon, args.delta,
                                      args.selection, result.notes["max_rows"])
        central = synthesize_records(schema, reference, args.method, None,
                                     np.random.default_rng([draw, 1]))
        cen.append(workload_error(records, central, schema.domain_sizes))
    out = {"dataset": args.dataset, "selection": args.selection, "rounds": rounds,
           "method": args.method, "draws": args.draws, "epsilon": args.epsilon,
           "seconds": time.perf_counter() - started,
           "command": ("python experiments/demo_central_ratio/bench_demo_central_ratio.py "
                       + " ".join(sys.argv[1:])),
           "commit": _commit(), "machine": platform.node(),
           "date": datetime.date.today().isoformat()}
    for k in ("one_way", "two_way", "three_way"):
        f = np.array([e[k] for e in fed])
        c = np.array([e[k] for e in cen])
        ratio = f.mean() / c.mean()
        # delta method: var(F/C) ~ (var F / C^2 + F^2 var C / C^4) / n, draws independent
        se = ratio * np.sqrt((f.var(ddof=1) / f.mean() ** 2 + c.var(ddof=1) / c.mean() ** 2)
                             / len(f))
        out[k] = {"federated": float(f.mean()), "central": float(c.mean()),
                  "ratio": float(ratio), "ratio_se": float(se)}
        print(f"{k}: federated {f.mean():.4f}, central {c.mean():.4f}, "
              f"ratio {ratio:.3f} +- {se:.3f}")
    print(f"{args.draws} draws in {out['seconds']:.0f} s")
    if args.json:
        if args.json.exists():
            raise SystemExit(f"{args.json} exists: results are never overwritten")
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
