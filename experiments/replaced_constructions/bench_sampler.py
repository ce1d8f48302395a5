"""The exact discrete Gaussian sampler on integer pairs against its Fraction form, same run.

The baseline is ``dp/discrete_gaussian.py`` as it was at ``--baseline`` (default 3ac898b: CKS20's
Algorithms 1-3 on ``Fraction`` objects), loaded from git; the candidate is the current module
(the same algorithms on numerators and denominators in lowest terms). Per variance, both draw
``--draws`` values from the operating system's CSPRNG, old and new alternating (the order
swapped every repetition, so machine noise hits both); printed: microseconds a draw and the
ratio new / old. Before timing, both are run on one seeded source and must give the same
samples (``tests/dp/test_discrete_gaussian_integer_form.py`` checks the bounds asked as well).

Why it matters: the noise pools (``dp.noise_pool``) draw every noise a session may add before
any data, e.g. one draw over Adult's 11,926 pair cells for each possible number of kept
pairs in a noisy-greedy session (1.25 million values).

``--pool``: then one server's whole noise pool for Adult's noisy-greedy session at eps 1
(``dp.noise_pool.draw_pool`` over the plan's draws), once with each sampler.

Run: .venv/bin/python experiments/replaced_constructions/bench_sampler.py [--draws 20000]
     [--repeats 3] [--pool]

Measured (2 cores shared with a test run, so only the ratios count): x0.317-0.340
a draw at the four variances (20,000 draws x 3); ``--pool``: 1,252,230 values in 105 draws,
30 s against 90 s, and 35 s against 90 s in a second run.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.replaced_constructions.baseline import module_at  # noqa: E402
from feddpsyn.dp import discrete_gaussian  # noqa: E402

# The variances of the demo's releases and scores, and Adult's noisy-greedy 2-ways.
VARIANCES = (Fraction(92), Fraction(2046), Fraction(164, 3), Fraction(1000, 7))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", default="3ac898b")
    parser.add_argument("--pool", action="store_true",
                        help="also time Adult's noisy-greedy noise pool with each sampler")
    args = parser.parse_args()
    if not 1 <= args.repeats <= 50 or not 1 <= args.draws <= 10_000_000:
        parser.error("--repeats: 1 to 50, --draws: 1 to 10^7")
    old = module_at(args.baseline, "dp/discrete_gaussian.py", "discrete_gaussian_baseline")
    samplers = {"old": old.CSPRNG, "new": discrete_gaussian.CSPRNG}
    print(f"baseline {args.baseline}; {args.draws} draws x {args.repeats} repeats per variance")
    for sigma2 in VARIANCES:
        same = [s.discrete_gaussian_vector(sigma2, 2_000).tolist()
                for s in (old.ExactSampler(random.Random(5).randrange),
                          discrete_gaussian.ExactSampler(random.Random(5).randrange))]
        if same[0] != same[1]:
            raise SystemExit(f"sigma2 {sigma2}: the two forms gave different samples")
        seconds = {"old": 0.0, "new": 0.0}
        for repeat in range(args.repeats):
            for name in (("old", "new") if repeat % 2 == 0 else ("new", "old")):
                started = time.perf_counter()
                samplers[name].discrete_gaussian_vector(sigma2, args.draws)
                seconds[name] += time.perf_counter() - started
        per = {k: v / (args.repeats * args.draws) * 1e6 for k, v in seconds.items()}
        print(f"sigma2 {str(sigma2):>8}: old {per['old']:6.1f} us, new {per['new']:6.1f} us a "
              f"draw, x{seconds['new'] / seconds['old']:.3f} (same samples on a seeded source)")
    if args.pool:
        time_pool(samplers)


def time_pool(samplers: dict) -> None:
    """One server's noise pool for Adult's noisy-greedy session, with each sampler."""
    from feddpsyn.demo import dataset
    from feddpsyn.dp.noise_pool import draw_pool
    from feddpsyn.params.modes import NoiseMode, SelectionMode
    from feddpsyn.params.plan_request import PlanRequest
    from feddpsyn.params.schema import Schema
    from feddpsyn.params.session_plan import SessionPlan

    plan = SessionPlan.build(PlanRequest(Schema.load(dataset("adult").schema), 1.0, 1e-5,
                                         50_000, selection=SelectionMode.NOISY_GREEDY,
                                         noise=NoiseMode.AUTO))
    draws = plan.noise_draws()
    values = sum(len(d.positions) for d in draws)
    seconds = {}
    for name in ("new", "old"):
        started = time.perf_counter()
        draw_pool(draws, samplers[name])
        seconds[name] = time.perf_counter() - started
    print(f"Adult noisy-greedy pool: {values:,} values in {len(draws)} draws: old "
          f"{seconds['old']:.1f} s, new {seconds['new']:.1f} s, "
          f"x{seconds['new'] / seconds['old']:.3f}")


if __name__ == "__main__":
    main()
