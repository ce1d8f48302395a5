"""DistAIM vs central AIM utility at the same budget, repeated (Adult, all 2-way workload).

    .venv/bin/python experiments/distaim_mpc/bench_distaim_utility.py --repeats 5 --rounds 10

Runs DistAIM's MPC program (``MpcOracle``: secure scores, in-MPC exponential mechanism and
Gaussian) in a one-party in-process MPyC runtime -- the same code the three servers run,
without the communication, so the repeats are cheap -- and central AIM (``PlainOracle``:
exact samplers on the union in the clear) ``--repeats`` times each, and prints the mean and
standard deviation of the workload errors. p = 1 (every client from round 0), so the two
should be indistinguishable.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.distaim.distaim_common import adult, all_pairs, local_oracle, summary  # noqa: E402
from feddpsyn.distaim.protocol import Layout, client_vector  # noqa: E402
from feddpsyn.dp.accounting import eps_delta_to_rho  # noqa: E402
from feddpsyn.synthesis.aim import PlainOracle, aim  # noqa: E402
from feddpsyn.synthesis.evaluate import workload_error  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    args = parser.parse_args()
    records, sizes = adult()
    workload = all_pairs(len(sizes))
    layout = Layout.for_workload(sizes, workload)
    vector = client_vector(records, layout).astype(object)
    rho = eps_delta_to_rho(args.epsilon, args.delta)
    results: dict[str, list[dict]] = {"distaim": [], "central": []}
    for rep in range(args.repeats):
        t = time.time()
        oracle = local_oracle(vector, layout, args.epsilon, rows_bound=1 << 17)
        for name, orc in (("distaim", oracle), ("central", PlainOracle(records, sizes))):
            run = aim(orc, sizes, workload, rho, rounds=args.rounds, max_rounds=args.rounds,
                      round_iters=100, final_iters=300, rng=np.random.default_rng(rep))
            results[name].append(workload_error(records, run.synthesize(len(records)), sizes))
        print(f"repeat {rep}: {time.time() - t:.1f} s", flush=True)
    for name, errors in results.items():
        print(summary(f"{name:8s}", errors))


if __name__ == "__main__":
    main()
