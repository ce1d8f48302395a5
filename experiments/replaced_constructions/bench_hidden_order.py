"""Benchmark the hidden order of Primitive 3 against the construction it replaced, in one run.

The baseline is the previous circuit (first acceptance in the compute server's clear order,
whose view was not private), loaded from the project's git history at ``--baseline-rev``; the
new circuit is the accepted candidate of least key-server priority
(``crypto.tfhe_permute_and_flip``).
Both are compiled at the same widths (a session plan's: Fed-Heart-Disease's demo by
default) and run on the same encrypted inputs, alternating, so the machine's noise hits both.

Prints bootstraps per candidate and concrete's complexity (deterministic), the seconds per
run of each, and the ratio new / baseline.

Run: .venv/bin/python experiments/replaced_constructions/bench_hidden_order.py [--candidates 16] [--repeats 3]
     [--schema params/schemas/fed_heart_disease.schema.json --max-rows 740 --rounds 4]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.replaced_constructions.baseline import module_at  # noqa: E402
from feddpsyn.crypto import tfhe_permute_and_flip as current  # noqa: E402
from feddpsyn.crypto.selection_randomness import random_priorities, random_share  # noqa: E402
from feddpsyn.params.modes import SelectionMode  # noqa: E402
from feddpsyn.params.plan_request import PlanRequest  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402
from feddpsyn.params.session_plan import SessionPlan  # noqa: E402


def baseline_module(rev: str):
    """crypto/selection.py as it was at ``rev`` (the known-order construction), with the
    helpers it imported then (``fhe_tag`` lived in ``crypto/aggregation.py``)."""
    return module_at(rev, "crypto/selection.py", "selection_baseline",
                     dependencies=("crypto/aggregation.py",))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--candidates", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--schema", default=str(ROOT / "params/schemas/fed_heart_disease.schema.json"))
    parser.add_argument("--max-rows", type=int, default=740)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--baseline-rev", default="0777b64")
    args = parser.parse_args()

    schema = Schema.from_dict(json.loads(Path(args.schema).read_text()))
    plan = SessionPlan.build(PlanRequest(schema, args.epsilon, 1e-5, args.max_rows,
                                         selection=SelectionMode.EM, rounds=args.rounds, noise="two-server"))
    base = plan.selection.shape
    old = baseline_module(args.baseline_rev)
    s = args.candidates
    widths = dict(candidates=s, score_bits=base.score_bits, drop_bits=0, nb=base.nb,
                  kappa_prime=base.kappa_prime)
    new_shape, old_shape = current.SelectionShape(**widths), old.SelectionShape(**widths)
    c = current.thresholds(new_shape, plan.selection.step.epsilon)
    print(f"widths: {s} candidates, {base.score_bits} score digits, n_b={base.nb}, "
          f"kappa'={list(base.kappa_prime)}, priority bits {new_shape.priority_bits}")

    circuits = {}
    for name, module, shape in (("baseline", old, old_shape), ("hidden", current, new_shape)):
        started = time.perf_counter()
        circuit = module.compile_selection(shape, c, plan.selection.p_error)
        circuit.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
        stats = circuit.statistics
        circuits[name] = circuit
        print(f"{name}: {stats['programmable_bootstrap_count'] / s:.1f} bootstraps/candidate, "
              f"complexity {stats['complexity']:.3e}, compile+keygen "
              f"{time.perf_counter() - started:.1f} s")

    rng = np.random.default_rng(0)
    digits = rng.integers(0, 2, (1, s, base.score_bits))
    active = np.ones(s, dtype=np.int64)
    r_ks, r_cs = random_share(new_shape), random_share(new_shape)
    priority = random_priorities(new_shape)
    inputs = {
        "baseline": circuits["baseline"].encrypt(*old.clear_arguments(digits, active, r_ks, r_cs)),
        "hidden": circuits["hidden"].encrypt(*current.clear_arguments(digits, active, r_ks, r_cs,
                                                                      priority)),
    }
    seconds: dict[str, list[float]] = {"baseline": [], "hidden": []}
    for _ in range(args.repeats):
        for name in ("baseline", "hidden"):
            started = time.perf_counter()
            out = circuits[name].run(*inputs[name])
            seconds[name].append(time.perf_counter() - started)
            assert sum(int(np.asarray(v).ravel()[0]) for v in circuits[name].decrypt(*out)) == 1
    for name in seconds:
        print(f"{name}: median {statistics.median(seconds[name]):.2f} s per selection "
              f"({', '.join(f'{x:.2f}' for x in seconds[name])})")
    ratio_pbs = (circuits["hidden"].statistics["programmable_bootstrap_count"]
                 / circuits["baseline"].statistics["programmable_bootstrap_count"])
    ratio = statistics.median(seconds["hidden"]) / statistics.median(seconds["baseline"])
    print(f"hidden / baseline: bootstraps x{ratio_pbs:.3f}, time x{ratio:.3f}")


if __name__ == "__main__":
    main()
