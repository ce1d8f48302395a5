"""Choose the default selection parameter set by measurement: cost and selection quality of
every named set (``params.parameter_sets.SELECTION_SETS``) on the bundled data.

Cost: Primitive 3 compiled for each set's derived widths (same candidates, same run): bootstraps
and the optimiser's complexity per candidate, and the measured seconds of one encrypted
selection, as a ratio to the first set's (these machines are noisy: only same-run ratios
count). Quality: with the data's true InDif scores (expected counts from the exact 1-ways), the
exact output distribution of the first round under each set's fixed-point weights
(permute-and-flip, P(r) = p_r * integral_0^1 prod_{s != r} (1 - p_s x) dx, by 64-point
Gauss-Legendre in float: every factor is in [0, 1]), against the ideal weights exp(-eps A / 2):
the total-variation distance and the expected score gap max - q_chosen.

Run: .venv/bin/python experiments/selection_sets/bench_selection_sets.py
     [--dataset fed_heart_disease|adult] [--candidates 8] [--rounds N]
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from feddpsyn.crypto.selection_randomness import random_priorities, random_share  # noqa: E402
from feddpsyn.crypto.tfhe_permute_and_flip import (  # noqa: E402
    SelectionShape,
    acceptance_weights,
    clear_arguments,
    compile_selection,
    thresholds,
)
from feddpsyn.demo import DEMO_ROUNDS, dataset  # noqa: E402
from feddpsyn.dp.accounting import eps_delta_to_rho  # noqa: E402
from feddpsyn.dp.pair_selection import expected_counts_for_pairs, indif_scores  # noqa: E402
from feddpsyn.params.layout import MarginalLayout  # noqa: E402
from feddpsyn.params.parameter_sets import DEFAULT_SELECTION_SET, SELECTION_SETS  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402
from feddpsyn.params.selection_plan import SelectionPlan  # noqa: E402
from feddpsyn.params.table_codec import encode_csv  # noqa: E402


def true_scores(name: str) -> tuple[list[int], int]:
    ds = dataset(name)
    schema = Schema.load(ds.schema)
    records = encode_csv(ds.csv, schema).records
    layout = MarginalLayout.build(schema.domain_sizes)
    counts = layout.counts(records)
    one_way = [counts[s.offset:s.offset + s.size].astype(float) for s in layout.one_way]
    pairs = [s.attrs for s in layout.two_way]
    expected = expected_counts_for_pairs(one_way, pairs, len(records))
    scores = indif_scores({s.attrs: counts[s.offset:s.offset + s.size]
                           for s in layout.two_way}, expected)
    return [scores[p] for p in pairs], len(records)


def pf_distribution(accept: np.ndarray) -> np.ndarray:
    nodes, weights = np.polynomial.legendre.leggauss(64)
    x, w = (nodes + 1) / 2, weights / 2
    factors = 1 - np.outer(accept, x)                  # (S, nodes)
    logs = np.log(np.maximum(factors, 1e-300))
    total = logs.sum(axis=0)
    out = np.empty(len(accept))
    for r, p in enumerate(accept):
        rest = np.exp(total - logs[r])  # every factor but r's own
        out[r] = p * float((rest * w).sum())
    return out / out.sum()


def quality(scores: list[int], plan: SelectionPlan) -> tuple[float, float, float]:
    shape, eps = plan.shape, float(plan.step.epsilon)
    a = max(scores) - np.asarray(scores)
    table = acceptance_weights(shape, thresholds(shape, plan.step.epsilon))
    fixed = np.array([float(table[min(v, 2 ** shape.nb - 1)]) for v in a])
    ideal = np.exp(-eps * a / 2)
    p_fixed, p_ideal = pf_distribution(fixed), pf_distribution(ideal)
    return (0.5 * float(np.abs(p_fixed - p_ideal).sum()), float(p_fixed @ a),
            float(p_ideal @ a))


def encrypted_cost(plan: SelectionPlan, candidates: int) -> tuple[float, float, float]:
    base = plan.shape
    shape = SelectionShape(candidates=candidates, score_bits=base.score_bits, drop_bits=0,
                           nb=base.nb, kappa_prime=base.kappa_prime)
    c = thresholds(shape, plan.step.epsilon)
    circuit = compile_selection(shape, c, plan.p_error)
    stats = circuit.statistics
    circuit.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    rng = np.random.default_rng(0)
    digits = rng.integers(0, 2, (1, candidates, shape.score_bits))
    args = clear_arguments(digits, np.ones(candidates, dtype=np.int64), random_share(shape),
                           random_share(shape), random_priorities(shape))
    encrypted = circuit.encrypt(*args)
    started = time.perf_counter()
    circuit.run(encrypted)
    seconds = time.perf_counter() - started
    return (stats["programmable_bootstrap_count"] / candidates,
            stats["complexity"] / candidates, seconds / candidates)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", default="fed_heart_disease")
    parser.add_argument("--candidates", type=int, default=8,
                        help="candidates in the compiled circuit (cost is per candidate)")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--no-run", action="store_true", help="compile only (no keygen/run)")
    args = parser.parse_args()

    scores, rows = true_scores(args.dataset)
    rounds = args.rounds or DEMO_ROUNDS.get(args.dataset, max(1, len(scores) // 2))
    rho = eps_delta_to_rho(args.epsilon, 1e-5) / 10  # PrivSyn's 10% for the selection
    print(f"{args.dataset}: {len(scores)} candidate pairs, {rows} rows, {rounds} rounds, "
          f"eps={args.epsilon:g} (selection: 10% of rho)")
    base = None
    for name in SELECTION_SETS:
        plan = SelectionPlan.build("em", len(scores), rows, rho, rounds, parameters=name)
        tv, gap, ideal_gap = quality(scores, plan)
        line = (f"{name:8s}{' (default)' if name == DEFAULT_SELECTION_SET else '':10s} "
                f"n_b {plan.shape.nb}, random bits/candidate {plan.shape.random_bits}, "
                f"eps/round {float(plan.step.epsilon):.5f}; first round: TV to ideal "
                f"{tv:.2e}, E[gap] {gap:.1f} (ideal {ideal_gap:.1f})")
        if not args.no_run:
            pbs, complexity, seconds = encrypted_cost(plan, args.candidates)
            base = base or (pbs, complexity, seconds)
            line += (f"; {pbs:.0f} PBS/candidate, complexity x{complexity / base[1]:.3f}, "
                     f"time x{seconds / base[2]:.3f} ({seconds:.2f} s/candidate)")
        print(line, flush=True)


if __name__ == "__main__":
    main()
