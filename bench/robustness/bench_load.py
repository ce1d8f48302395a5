"""Load and admission on loopback: how fast do the servers take what arrives at once?

Load (the default): N clients upload at once to both servers. Starts both servers as
processes, creates a session for N clients (small schema), runs every client's full upload
(seed to the compute server, masked counts to the key server) concurrently from a thread
pool, and reports p50/p99 upload latency, then waits for the release and checks that it
equals the union's counts within the noise.

Admission (``--admission``): a fresh key server process answers one ``POST /sessions`` after
another: the default demo's session first (the first request of a fresh server), then again,
Adult's, 64 columns (the default limit) and one column of 10^5 and of 10^6 categories (10.9
MB, refused by the server's limits). Each request's seconds to its 202 or 409, the key
server's resident and peak memory after it and /health's latency right after
(``feddpsyn.loadtest.run_admission``); ``--json`` keeps the run with the machine's load.

Run: .venv/bin/python bench/robustness/bench_load.py [--clients 100] [--workers 32]
     .venv/bin/python bench/robustness/bench_load.py --admission [--json FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from feddpsyn.fedbench.provenance import commit  # noqa: E402
from feddpsyn.loadtest import run_admission, run_load  # noqa: E402


def load(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        result = run_load(Path(tmp), args.clients, args.workers)
    lat = np.array(result["latencies"])
    print(f"{args.clients} clients, {args.workers} concurrent: uploads stored "
          f"{result['stored']} / {args.clients} (seed and masked each exactly once: "
          f"{result['exactly_once']})")
    print(f"upload latency p50 {np.percentile(lat, 50):.3f} s, p99 {np.percentile(lat, 99):.3f} s, "
          f"max {lat.max():.3f} s; wall {result['wall']:.1f} s; release after "
          f"{result['release_seconds']:.1f} s, max |released - true| = {result['max_error']}")


def admission(args: argparse.Namespace) -> None:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        result = run_admission(Path(tmp))
    print(f"{'request':<34} {'status':>6} {'seconds':>8} {'health s':>8} {'peak MB':>8}")
    for row in result["requests"]:
        print(f"{row['request']:<34} {row['status']:>6} {row['seconds']:>8.3f} "
              f"{row['health_seconds']:>8.3f} {row['peak_mb_after']:>8.0f}")
        if row["status"] >= 400:
            print(f"    {row['detail']}")
    if args.json:
        record = {"what": "admission: a fresh key server's answer to each POST /sessions",
                  "command": "python bench/robustness/bench_load.py --admission --json "
                             + args.json.name,
                  "commit": commit(), "machine": platform.node(), "cores": os.cpu_count(),
                  "date": datetime.date.today().isoformat(),
                  "load_before": [round(x, 2) for x in load_before],
                  "load_after": [round(x, 2) for x in os.getloadavg()], **result}
        args.json.write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {args.json}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--admission", action="store_true",
                        help="time a fresh key server's answers to POST /sessions instead")
    parser.add_argument("--json", type=Path, help="with --admission: write the run here")
    args = parser.parse_args()
    (admission if args.admission else load)(args)


if __name__ == "__main__":
    main()
