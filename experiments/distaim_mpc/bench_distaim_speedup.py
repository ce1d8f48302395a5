"""AIM's select step in MPC before/after the cheapest speed-up of the DistAIM note: the score
grid g = 8 -> g = 0 (the secure |x| per cell works on log2(rows_bound) + g + 2 bits; its cost,
random bits and a product tree, is linear in that width; the EM's D also loses 8 bits).

    .venv/bin/python experiments/distaim_mpc/bench_distaim_speedup.py --repeats 2
    .venv/bin/python experiments/distaim_mpc/bench_distaim_speedup.py --utility 3  # g = 8 vs 0

Three processes of itself on 127.0.0.1 (as ``bench_distaim_primitives.py``); each holds the
Adult union's all-2-way workload counts (120 candidates, 12,090 cells; the counts enter as
public constants, which costs the same as shares in every secure operation), scores them
against a 1-way-fitted model and runs the in-MPC exponential mechanism, exactly
``MpcOracle.select`` with rows_bound 2^20 (the sessions' default). Baseline (g = 8) and
speed-up (g = 0) alternate in the same run; party 0 prints wall and CPU seconds per select
and the ratio. Utility: with g = 0 the public model answers are rounded to integers, which
moves a marginal's L1 term by at most n_q / 2 next to AIM's penalty sqrt(2/pi) sigma n_q
(sigma >= 10 on Adult at eps = 1), and the sensitivity stays max w_q exactly; ``--utility N``
checks it: N full AIM runs (Adult, all 2-way, T = 10, eps = 1; one-party in-process runtime,
as ``bench_distaim_utility.py``) with each g, printing the workload errors.
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

from bench.distaim.distaim_common import (  # noqa: E402
    adult,
    all_pairs,
    local_oracle,
    run_as_three_parties,
    summary,
)
from feddpsyn.distaim.mpc_runtime import EM_SECINT_BITS, SECINT_BITS, PartyAddress, party_runtime  # noqa: E402


def _party(pid: int, addresses: list[PartyAddress], args) -> None:
    from feddpsyn.distaim.oracle import MpcOracle
    from feddpsyn.distaim.protocol import Layout, client_vector
    from feddpsyn.synthesis.aim import completion, workload_weights
    from feddpsyn.synthesis.graphical_model import GraphicalModel
    from feddpsyn.synthesis.marginals import NoisyMarginal

    records, sizes = adult()
    d = len(sizes)
    workload = all_pairs(d)
    layout = Layout.for_workload(sizes, workload)
    totals = client_vector(records, layout).astype(object)
    candidates = completion(workload)
    weights = workload_weights(candidates, workload)
    model = GraphicalModel(sizes)
    model.fit([NoisyMarginal((a,), np.bincount(records[:, a], minlength=sizes[a]).astype(
        float), 1.0) for a in range(d)], 50)
    answers = [model.answer(c) for c in candidates]
    sigma2, eps = Fraction(400), Fraction(1, 20)

    rt = party_runtime(pid, addresses)
    secint, em = rt.SecInt(SECINT_BITS), rt.SecInt(EM_SECINT_BITS)
    rt.run(rt.start(timeout=60))
    shared = secint.array(secint.field.array(totals))
    oracles = {g: MpcOracle(rt, secint, em, shared, layout, 1.0, rows_bound=1 << 20,
                            score_grid_bits=g) for g in (8, 0)}
    times: dict[int, list[tuple[float, float]]] = {8: [], 0: []}
    picks: dict[int, list[int]] = {8: [], 0: []}
    for rep in range(args.repeats):
        for g, oracle in oracles.items():
            wall, cpu = time.time(), time.process_time()
            picks[g].append(oracle.select(candidates, answers, weights, sigma2, eps))
            times[g].append((time.time() - wall, time.process_time() - cpu))
            if pid == 0:
                print(f"repeat {rep} g={g}: {times[g][-1][0]:.2f} s wall, "
                      f"{times[g][-1][1]:.2f} s CPU (party 0), picked "
                      f"{candidates[picks[g][-1]]}", flush=True)
    rt.run(rt.shutdown(timeout=60))
    if pid == 0:
        base, fast = (np.mean(times[g], axis=0) for g in (8, 0))
        print(f"select over {len(candidates)} candidates, {layout.length} cells, 3 parties: "
              f"g=8 {base[0]:.2f} s wall / {base[1]:.2f} s CPU, g=0 {fast[0]:.2f} s wall / "
              f"{fast[1]:.2f} s CPU; ratio (g=0 / g=8) wall {fast[0] / base[0]:.2f}, CPU "
              f"{fast[1] / base[1]:.2f} ({args.repeats} repeats each)")


def _utility(repeats: int) -> None:
    from feddpsyn.distaim.protocol import Layout, client_vector
    from feddpsyn.dp.accounting import eps_delta_to_rho
    from feddpsyn.synthesis.aim import aim
    from feddpsyn.synthesis.evaluate import workload_error

    records, sizes = adult()
    d = len(sizes)
    workload = all_pairs(d)
    layout = Layout.for_workload(sizes, workload)
    vector = client_vector(records, layout).astype(object)
    rho = eps_delta_to_rho(1.0, 1e-5)
    errors: dict[int, list[dict]] = {8: [], 0: []}
    for rep in range(repeats):
        for g in (8, 0):
            t = time.time()
            oracle = local_oracle(vector, layout, 1.0, rows_bound=1 << 20,
                                  score_grid_bits=g)
            run = aim(oracle, sizes, workload, rho, rounds=10, max_rounds=10,
                      round_iters=100, final_iters=300, rng=np.random.default_rng(rep))
            errors[g].append(workload_error(records, run.synthesize(len(records)), sizes))
            print(f"repeat {rep} g={g}: {time.time() - t:.1f} s, {errors[g][-1]}", flush=True)
    for g, runs in errors.items():
        print(summary(f"g={g}", runs))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--utility", type=int, default=0,
                        help="instead: this many full AIM runs per g, workload errors")
    parser.add_argument("--pid", type=int)
    parser.add_argument("--parties")
    args = parser.parse_args()
    if args.utility:
        _utility(args.utility)
        return
    run_as_three_parties(__file__, args, _party)


if __name__ == "__main__":
    main()
