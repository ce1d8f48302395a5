"""Benchmark Primitive 3 (encrypted permute-and-flip): cost per candidate, against one 3-bit
table lookup per candidate measured in the same run (P3's lookups are all at most 3 bits wide,
so "how many lookups per candidate" is the honest unit), and the extrapolated selection phase
of a data set.

Run: .venv/bin/python experiments/p3_lookup_cost/bench_selection.py [--candidates 16] [--rows 48842]
     [--pairs 105] [--rounds 15] [--rho-select 0.00125]

Widths follow the service's plan: score digits for InDif <= 2 * rows, the PF epsilon of one
round from rho_select / rounds with the numerical loss included
(crypto.tfhe_permute_and_flip.plan_step), n_b and kappa'_j from choose_shape. The selection
phase of a session is sum over rounds of (remaining candidates) x (seconds per candidate); P2
per chunk is experiments/replaced_constructions/bench_p2_digits.py.
"""

from __future__ import annotations

import argparse
import math
import secrets
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from concrete import fhe  # noqa: E402

from feddpsyn.crypto.selection_cost import pbs_estimate  # noqa: E402
from feddpsyn.crypto.selection_randomness import random_priorities, random_share  # noqa: E402
from feddpsyn.crypto.tfhe_permute_and_flip import (  # noqa: E402
    choose_shape,
    clear_arguments,
    compile_selection,
    plan_step,
    select_plaintext,
    thresholds,
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--candidates", type=int, default=16, help="candidates in the measured run")
    parser.add_argument("--rows", type=int, default=48842, help="max rows (Adult: 48,842)")
    parser.add_argument("--pairs", type=int, default=105, help="candidates of the full phase")
    parser.add_argument("--rounds", type=int, default=15, help="pairs selected")
    parser.add_argument("--rho-select", type=float, default=0.00125,
                        help="zCDP budget of the whole selection (PrivSyn's 10%% of eps=1)")
    parser.add_argument("--p-error", type=float, default=2.0 ** -40)
    args = parser.parse_args()

    score_bits = (2 * args.rows).bit_length()
    rho_step = Fraction(args.rho_select).limit_denominator(10 ** 12) / args.rounds
    shape = choose_shape(args.candidates, score_bits, math.sqrt(2 * float(rho_step)))
    step = plan_step(rho_step, shape)
    c = thresholds(shape, step.epsilon)
    print(f"shape: {args.candidates} candidates, {score_bits} score digits, n_b={shape.nb}, "
          f"kappa'={list(shape.kappa_prime)}; step eps={float(step.epsilon):.5f}, "
          f"eta={step.eta:.2e} (4 eta / eps = {4 * step.eta / float(step.epsilon):.2%})")

    started = time.perf_counter()
    circuit = compile_selection(shape, c, args.p_error)
    circuit.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    setup = time.perf_counter() - started
    pbs = circuit.statistics.get("programmable_bootstrap_count", 0)

    rng = np.random.default_rng(0)
    scores = rng.integers(0, 2 * args.rows, args.candidates)
    digits = np.array([[[(int(v) >> j) & 1 for j in range(score_bits)] for v in scores]])
    active = np.ones(args.candidates, dtype=np.int64)
    r_ks, r_cs, priority = random_share(shape), random_share(shape), random_priorities(shape)
    encrypted = circuit.encrypt(*clear_arguments(digits, active, r_ks, r_cs, priority))
    started = time.perf_counter()
    outputs = circuit.run(*encrypted)
    seconds = time.perf_counter() - started
    one_hot = [int(np.asarray(o).ravel()[0]) for o in circuit.decrypt(*outputs)]
    exact = one_hot == select_plaintext(digits[0], active, r_ks[0], r_cs[0], shape, c,
                                        priority[0]).tolist()

    # Baseline: one 3-bit lookup per candidate, same run, same p_error.
    table = fhe.LookupTable([(7 * i + 3) % 8 for i in range(8)])
    baseline = fhe.Compiler(lambda x: table[x], {"x": "encrypted"}).compile(
        [np.zeros(args.candidates, dtype=np.int64), np.full(args.candidates, 7)],
        fhe.Configuration(p_error=args.p_error, show_progress=False))
    baseline.keygen(seed=secrets.randbits(64))
    x = baseline.encrypt(rng.integers(0, 8, args.candidates))
    started = time.perf_counter()
    baseline.run(x)
    lookup_seconds = time.perf_counter() - started

    per_candidate = seconds / args.candidates
    per_lookup = lookup_seconds / args.candidates
    print(f"P3: {pbs} bootstraps ({pbs / args.candidates:.0f}/candidate; model "
          f"{pbs_estimate(shape) / args.candidates:.0f}), setup {setup:.1f} s, run {seconds:.1f} s"
          f" = {per_candidate * 1e3:.0f} ms/candidate, one-hot equals the model: {exact}")
    print(f"one 3-bit lookup per candidate: {per_lookup * 1e3:.2f} ms/candidate; "
          f"P3 / lookup = {per_candidate / per_lookup:.0f}x (bootstraps/candidate "
          f"{pbs / args.candidates:.0f})")
    evaluations = sum(args.pairs - t for t in range(args.rounds))
    print(f"selection phase, {args.rounds} rounds over {args.pairs} candidates "
          f"({evaluations} candidate evaluations): {evaluations * per_candidate / 60:.1f} min "
          "extrapolated linearly from the measured run; FedDPSyn anchor: 560 s on an RTX A6000")


if __name__ == "__main__":
    main()
