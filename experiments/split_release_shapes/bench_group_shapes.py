"""How far each group of noisy-greedy's split 2-way release is from its Gaussian.

Builds the servers' default plan for a shipped table (``max_rows`` stated as the demo states
it), keeps ``--pairs`` pairs drawn with ``--seed`` (a selection stands in for the scores'),
resolves the split release as both servers do (``params.run_time.resolve``) and prints each
group's shape and its variance over the Gaussian variance its budget stands for, then the
ratio weighted by cells. ``--one-width`` resolves each group's shape among one-width shapes
only (the search before two widths, same caps), for the comparison. ``--envelope-bits B``
builds the plan at a default set whose envelope is B bits a count (its calls cut to hold at
most ``JOINT_MAX_BITS_PER_CALL`` bits), for the width's what-if. Each group's search is timed
(cached once found); the encrypted bits the kept groups carry are summed over their cells.

    .venv/bin/python experiments/split_release_shapes/bench_group_shapes.py --table adult \
        --eps 0.3 --pairs 26
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import feddpsyn.params.noise_rules as rules  # noqa: E402
from bench.accuracy.bench_served_vs_central import _table  # noqa: E402
from feddpsyn.fedbench.methods.feddpsyn_served import served_plan  # noqa: E402
from feddpsyn.params.run_time import resolve  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default="adult")
    parser.add_argument("--eps", type=float, default=0.3)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--pairs", type=int, default=26)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--one-width", action="store_true",
                        help="groups searched among one-width shapes only")
    parser.add_argument("--envelope-bits", type=int, default=0,
                        help="the default set's envelope at this width (a what-if)")
    args = parser.parse_args()
    if args.envelope_bits:
        from feddpsyn.fedbench.methods.feddpsyn_served import at_envelope_bits
        from feddpsyn.params.parameter_sets import PARAMETER_SETS
        PARAMETER_SETS["default"] = at_envelope_bits(PARAMETER_SETS["default"],
                                                     args.envelope_bits)
    path, schema, _ = _table(args.table)
    with open(path, newline="") as fh:
        rows = sum(1 for _ in csv.reader(fh)) - 1
    plan = served_plan(schema, rows, args.eps, args.delta, "noisy-greedy", None)
    release = plan.release("two_way")
    pairs = [slot.attrs for slot in plan.layout.two_way]
    chosen = sorted(random.Random(args.seed).sample(pairs, min(args.pairs, len(pairs))))
    search = rules.dominated_shape
    if args.one_width:
        # The resolution calls the search by its module's name: one-width for this run.
        import feddpsyn.params.run_time as run_time

        def one_width(*a, **k):
            return search(*a, **{**k, "mixed": False})
        run_time.dominated_shape = one_width  # type: ignore[assignment]
    started = time.perf_counter()
    resolved = resolve(plan, release, chosen)
    seconds = time.perf_counter() - started
    print(f"{args.table} eps {args.eps:g}: {rows} rows, envelope {release.joint.label}, "
          f"{len(chosen)} pairs kept (seed {args.seed})")
    weighted = gaussian = 0.0
    encrypted = 0
    for part in resolved.parts:
        cells = sum(slot.size for slot in plan.slots_of(part))
        ratio = float(part.joint.variance / part.sigma2)
        weighted += float(part.joint.variance) * cells
        gaussian += float(part.sigma2) * cells
        encrypted += part.joint.ciphertexts * cells
        print(f"  {part.name:<22} cells {cells:>5}  Gaussian variance "
              f"{float(part.sigma2):>9.0f}  shape {part.joint.label:<12} x{ratio:.3f}")
    print(f"cell-weighted variance / Gaussian's: {weighted / gaussian:.3f}; "
          f"{encrypted} encrypted bits; {len(resolved.parts)} groups resolved in {seconds:.1f} s")


if __name__ == "__main__":
    main()
