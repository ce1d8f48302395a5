"""Load: N clients upload at once to both servers on loopback; every upload stored exactly once.

Starts both servers as processes, creates a session for N clients (small schema), runs every
client's full upload (seed to the compute server, masked counts to the key server)
concurrently from a thread pool, and reports p50/p99 upload latency, then waits for the
release and checks that it equals the union's counts within the noise.

Run: .venv/bin/python bench/robustness/bench_load.py [--clients 100] [--workers 32]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from feddpsyn.loadtest import run_load  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--workers", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = run_load(Path(tmp), args.clients, args.workers)
    lat = np.array(result["latencies"])
    print(f"{args.clients} clients, {args.workers} concurrent: uploads stored "
          f"{result['stored']} / {args.clients} (seed and masked each exactly once: "
          f"{result['exactly_once']})")
    print(f"upload latency p50 {np.percentile(lat, 50):.3f} s, p99 {np.percentile(lat, 99):.3f} s, "
          f"max {lat.max():.3f} s; wall {result['wall']:.1f} s; release after "
          f"{result['release_seconds']:.1f} s, max |released - true| = {result['max_error']}")


if __name__ == "__main__":
    main()
