"""Central AIM on Adult, one run, with every estimator fit recorded: how far each round's fit
goes decides when AIM anneals, and so its error and time (``fedbench.methods.central_aim``).

    .venv/bin/python experiments/central_aim_fit/bench_central_aim_fit.py --eps 0.5 --seed 1 \
        --attrs 8
    .venv/bin/python experiments/central_aim_fit/bench_central_aim_fit.py --eps 0.5 --seed 1 \
        --attrs 8 \
        --round-iters 10000 --final-iters 0      # every fit to convergence

The data is ``feddpsyn bench utility``'s training split of repeat 0 (80% of Adult, seed 0);
``--attrs k`` keeps the first k attributes (a smaller run). Noise comes from a seeded
``random.Random`` through the exact samplers, so a run is reproducible: this is a
measurement of the algorithm, not a private release. Printed per fit: wall seconds, accepted
steps, belief propagations (a step whose doubled trial is rejected costs one more), whether
the stopping rule fired, the junction tree's cells (AIM's model-size cap bounds them), the
loss, the clique measured and sigma, and whether the round annealed; then rounds, annealings,
time and ``synthesis.evaluate.workload_error`` of the sampled table against the split.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from feddpsyn.demo import dataset  # noqa: E402
from feddpsyn.dp.discrete_gaussian import ExactSampler  # noqa: E402
from feddpsyn.fedbench.methods.base import budget_rho  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402
from feddpsyn.params.table_codec import encode_csv  # noqa: E402
from feddpsyn.synthesis import mirror_descent  # noqa: E402
from feddpsyn.synthesis.aim import PlainOracle, aim  # noqa: E402
from feddpsyn.synthesis.evaluate import workload_error  # noqa: E402

# The module, not the method of the same name ``fedbench.methods`` exports.
method = importlib.import_module("feddpsyn.fedbench.methods.central_aim")


def adult_split(attrs: int) -> tuple[np.ndarray, list[int]]:
    ds = dataset("adult")
    schema = Schema.load(ds.schema)
    records = encode_csv(ds.csv, schema).records
    test = np.random.default_rng([0, 0]).random(len(records)) < 0.2
    train, sizes = records[~test], list(schema.domain_sizes)
    if attrs:
        train, sizes = train[:, :attrs], sizes[:attrs]
    return train, sizes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--eps", type=float, default=0.5)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--attrs", type=int, default=0, help="first k attributes (0: all)")
    parser.add_argument("--round-iters", type=int, default=None,
                        help="cap per round (default: the engine's, "
                             "synthesis.aim.ANNEALING_ROUND_ITERS in AIM's mode)")
    parser.add_argument("--final-iters", type=int, default=method.FINAL_ITERS,
                        help="cap after the last round (0: to convergence)")
    parser.add_argument("--max-model-mb", type=float, default=method.MAX_MODEL_MB)
    parser.add_argument("--max-rounds", type=int, default=None,
                        help="cap on AIM's rounds (default: the bench method's, 16 per "
                             "attribute: the budget runs out before it)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    train, sizes = adult_split(args.attrs)
    workload = list(itertools.combinations(range(len(sizes)), 2))
    rho = budget_rho(args.eps, args.delta)
    max_rounds = args.max_rounds or 16 * len(sizes)

    fits = []
    fit = mirror_descent.MirrorDescentPGM.fit

    def recorded_fit(self, measurements, iters=mirror_descent.MAX_ITERS, **kwargs):
        start = time.perf_counter()
        report = fit(self, measurements, iters, **kwargs)
        fits.append({"seconds": time.perf_counter() - start, "steps": report.iterations,
                     "evaluations": report.evaluations, "converged": report.converged,
                     "loss": report.loss, "measurements": len(measurements),
                     "tree_cells": sum(int(np.prod([self.sizes[a] for a in c]))
                                       for c in self.tree.nodes)})
        return report

    mirror_descent.MirrorDescentPGM.fit = recorded_fit
    sampler = ExactSampler(random.Random(args.seed).randrange)
    start = time.perf_counter()
    result = aim(PlainOracle(train, sizes, sampler), sizes, workload, rho,
                 max_model_size_mb=args.max_model_mb, max_rounds=max_rounds,
                 round_iters=args.round_iters, final_iters=args.final_iters or None)
    seconds = time.perf_counter() - start
    synth = result.model.sample(None, np.random.default_rng(args.seed))
    errors = workload_error(train, synth, sizes)
    rounds = [None] + result.rounds[len(sizes):]
    for i, (f, r) in enumerate(zip(fits, rounds)):
        what = "1-ways" if r is None else (f"{r.clique} sigma {float(r.sigma2) ** 0.5:.1f}"
                                           + (" annealed" if r.annealed else ""))
        print(f"fit {i:2d} {f['seconds']:7.2f} s, {f['steps']:5d} steps, "
              f"{f['evaluations']:5d} BPs, converged {f['converged']!s:5s}, "
              f"{f['tree_cells']:6d} cells, loss {f['loss']:.1f}: {what}")
    annealed = [i for i, r in enumerate(rounds) if r is not None and r.annealed]
    summary = {"rounds": len(result.selected), "annealed_at": annealed,
               "seconds": seconds, "fit_seconds": sum(f["seconds"] for f in fits),
               "errors": errors}
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         **summary, "fits": fits,
                                         "selected": result.selected}, indent=1))


if __name__ == "__main__":
    main()
