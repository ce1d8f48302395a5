"""DistAIM's in-MPC primitives with three parties on 127.0.0.1: in-MPC Gaussian (ms per
sample), the exponential mechanism over N candidates (s), secure |x| per cell.

    .venv/bin/python experiments/distaim_mpc/bench_distaim_primitives.py --candidates 120 \
        --cells 12090

Starts three processes of itself (host-bound, deadline-bounded runtimes from
``distaim.mpc_runtime``); party 0 prints wall time and its own CPU time.
"""

from __future__ import annotations

import argparse
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.distaim.distaim_common import run_as_three_parties  # noqa: E402
from feddpsyn.distaim.mpc_runtime import EM_SECINT_BITS, SECINT_BITS, PartyAddress, party_runtime  # noqa: E402
from feddpsyn.distaim.secure_noise import GaussianPlan, secure_discrete_gaussian  # noqa: E402
from feddpsyn.distaim.secure_selection import SelectionPlan, secure_exponential_mechanism  # noqa: E402


def _party(pid: int, addresses: list[PartyAddress], args) -> None:
    rt = party_runtime(pid, addresses)
    secint, em = rt.SecInt(SECINT_BITS), rt.SecInt(EM_SECINT_BITS)
    rt.run(rt.start(timeout=60))

    def timed(label, make, per=None):
        wall, cpu = time.time(), time.process_time()
        rt.run(rt.output(make()))
        wall, cpu = time.time() - wall, time.process_time() - cpu
        if pid == 0:
            if per:
                print(f"{label}: {1e3 * wall / per:.2f} ms wall, {1e3 * cpu / per:.2f} ms CPU "
                      f"(party 0) per item", flush=True)
            else:
                print(f"{label}: {wall:.2f} s wall, {cpu:.2f} s CPU (party 0)", flush=True)

    for sigma in args.sigmas:
        plan = GaussianPlan.for_sigma2(Fraction(sigma) ** 2)
        timed(f"in-MPC Gaussian sigma={sigma} ({len(plan.levels)} levels, TV <= "
              f"{float(plan.tv_bound):.1e}), {args.samples} samples",
              lambda plan=plan: secure_discrete_gaussian(rt, secint, plan, args.samples),
              args.samples)
    scores = secint.array(np.random.default_rng(0).integers(0, 10**6, args.candidates))
    plan = SelectionPlan.build(Fraction(1, 50), 60 << 8, args.candidates)
    timed(f"exponential mechanism, N={args.candidates} (TV <= {float(plan.tv_bound):.1e})",
          lambda: secure_exponential_mechanism(rt, scores, plan, em))
    cells = secint.array(np.arange(args.cells) - args.cells // 2)
    timed(f"secure |x| of {args.cells} cells (l=28)",
          lambda: rt.np_sum(rt.np_absolute(cells, l=28)), args.cells)
    rt.run(rt.shutdown(timeout=60))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--candidates", type=int, default=120)
    parser.add_argument("--cells", type=int, default=12090)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--sigmas", type=int, nargs="+", default=[20, 115, 900])
    parser.add_argument("--pid", type=int)
    parser.add_argument("--parties")
    args = parser.parse_args()
    run_as_three_parties(__file__, args, _party)


if __name__ == "__main__":
    main()
