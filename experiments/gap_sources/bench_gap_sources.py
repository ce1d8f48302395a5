"""Where the served default loses to a trusted curator: a what-if ladder, one factor at a time.

``feddpsyn-default`` (noisy-greedy, joint noises, Private-PGM) trails ``central-privsyn-pgm``
(PrivSyn's selection and allocation, discrete Gaussians, the same estimator) on small tables.
The two differ in a handful of choices; this script runs a plaintext session with a switch
for each (:class:`WhatIf`) and measures the 2-way L1 as the switches move from the served
default toward the curator, cumulatively and each alone, on the runner's splits and seeds.
The what-ifs start from the served noisy-greedy plan *without* the 1-way top-up (its plans
are built with ``one_way_topup=False``): the top-up is itself a what-if here
(``split="privsyn"``), now the servers' default (``feddpsyn-default``'s anchor has it).

The factors, each read from the code that makes the choice:

* ``max_rows`` (``params.operator_bound.stated_max_rows``): the row bound the plan's widths,
  bootstrap count and failure terms are sized for: "stated" (rows + 10% + 10, with room for
  the row-bound check's margin), or "rows" (the exact count; the check is then skipped).
* ``reserves``: the delta the plan keeps out of the conversion (bootstraps, the row bound,
  the joint noises' conditioning mass) and the Gaussian bound's eta
  (``params.noise_rules.GAUSSIAN_BOUND_SHARE``): "served", or "none" (the plan built at a
  delta raised so that its conversion delta less eta is the requested delta).
* ``budget``: rho_total: "served" (the plan's, calibrated on the composed PLD of its
  noises), "central" (``fedbench.methods.central_accounting.privsyn_budget``: the curator's
  own, its scores and publication calibrated on their composed PLD; before this it was the
  zCDP conversion ``budget_rho``, 15% below it at eps 0.3: the committed
  ``gap_sources*.json`` files used that), or "gaussian-pld" (the rho at which one Gaussian
  mechanism is exactly (eps, delta)-DP).
* ``noise``: "served" (each release's joint shape, the 2-way groups' dominated shapes of
  ``params.run_time``, or two servers' Gaussians where the plan falls back), "gaussian" (one
  exact discrete Gaussian per count at each part's own rho), or only part of it:
  "gaussian-2way" (the 2-way groups), "gaussian-1way" (the 1-ways and the scores); or
  "served-wide": the 2-way groups' dominated shapes searched up to the rule's 256 encrypted
  bits per count (``params.noise_rules.JOINT_MAX_BITS_PER_CALL``) instead of within the
  envelope the plan sizes its circuit for (a plan change: a wider envelope).
* ``split``: "served" (1-ways a fixed 10% as one release of even noise, scores 10%, the kept
  pairs 80% by c^(2/3): ``params.selection_plan.DEFAULT_SPLITS``), "privsyn" (scores 10%;
  the 1-ways and the kept pairs share the other 90% by c^(2/3) per marginal,
  ``dp.privsyn_allocation``; where the scores read the released 1-ways, those are released
  first at the served 10% and topped up after the selection to their c^(2/3) share, the two
  releases combined by inverse variance), or "one_way=<share>" (the served release with the
  1-ways' share set to <share> and the 2-ways' to 0.9 - <share>).
* ``greedy``: "served" (``dp.privsyn_allocation.greedy_select_allocated``: the kept pairs
  priced at the 2-way share, Gaussian noise, the 1-ways not in it), "privsyn"
  (``fedbench.methods.central_privsyn.privsyn_greedy``: the 1-ways in the allocation, priced
  at the publication budget), "shape" (the served rule, each group priced with the
  variance of the joint shape it would get instead of its Gaussian's), "privsyn-shape"
  (both: the top-up's rule, ``greedy_select_with_one_ways``) or "floors" (the 2-way rho
  shared with the 1-ways' top-ups by the water-fill above their floors, shapes' variances:
  ``greedy_select_with_floors``).
* ``score``: "served" (InDif against expected counts from the released noisy 1-ways,
  sensitivity 1, ``fedbench.methods.feddpsyn_sim.pair_scores``), "exact-k" (the same score,
  same noise, against the data's own 1-ways: not private, a diagnostic of what the noisy
  1-ways cost the scores), or "central" (PrivSyn's score from the data's own 1-ways,
  sensitivity 4 on a 2^-10 grid, its discrete Gaussian: ``central_privsyn``).
* ``synthesis``: "auto" (the servers' default: Private-PGM, GUM when every pair is kept),
  "pgm" or "gum" (``synthesis.synthesize``).
* ``selection``: "noisy-greedy" or "none" (every pair: the served all-pairs plan).

Every noise has exactly the distribution its release would carry (a joint shape's exact
integer pmf, a discrete Gaussian's), added in plaintext: the servers' released value is the
count plus that noise exactly (the count width has room, ``SessionPlan.check_capacity``).
The noises are drawn as common random numbers (:class:`Draws`), so that a rung is compared
with the next on coupled draws: the paired differences (``diff_*`` in the summary) measure
the factor with far less spread than the means. A what-if session is not accounted:
each changes one choice and keeps the others, so only the rungs that equal a real method
(the served default, central PrivSyn) carry a privacy claim; the anchors are those methods
themselves, run on the same splits.

    OMP_NUM_THREADS=1 nice -n 19 .venv/bin/python experiments/gap_sources/bench_gap_sources.py \\
        --cases fed_heart_disease:0.3,mroz:0.3,wages:4 --repeats 5 \\
        --json experiments/gap_sources/results/gap_sources.json --out /tmp/gap_sources
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import platform
import shlex
import statistics
import sys
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from pathlib import Path

import numpy as np
from scipy.special import ndtri

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.accuracy.bench_served_vs_central import _commit, _earlier_rows, _table  # noqa: E402
from feddpsyn.dp.gaussian_domination import gaussian_delta  # noqa: E402
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape  # noqa: E402
from feddpsyn.dp.pair_selection import expected_counts_for_pairs, greedy_by_error, indif_scores  # noqa: E402
from feddpsyn.dp.privsyn_allocation import (  # noqa: E402
    allocation_groups,
    allocation_weight,
    greedy_select_allocated,
    greedy_select_with_one_ways,
)
from feddpsyn.fedbench.methods import METHODS  # noqa: E402
from feddpsyn.fedbench.methods.base import MethodResult  # noqa: E402
from feddpsyn.fedbench.methods.central_accounting import privsyn_budget  # noqa: E402
from feddpsyn.fedbench.methods.central_privsyn import (  # noqa: E402
    INDIF_SENSITIVITY,
    SCORE_GRID_BITS,
    indif_grid_scores,
    privsyn_greedy,
)
from feddpsyn.fedbench.methods.feddpsyn_served import served_plan  # noqa: E402
from feddpsyn.fedbench.methods.feddpsyn_sim import pair_scores  # noqa: E402
from feddpsyn.fedbench.runner import Setting, run_utility  # noqa: E402
from feddpsyn.params.layout import MarginalLayout  # noqa: E402
from feddpsyn.params.modes import NoiseMode, SelectionMode  # noqa: E402
from feddpsyn.params.noise_rules import (  # noqa: E402
    GAUSSIAN_BOUND_SHARE,
    JOINT_MAX_BITS_PER_CALL,
    MAX_SHAPE_BITS,
    bound_eta,
    dominated_shape,
)
from feddpsyn.params.operator_bound import stated_max_rows  # noqa: E402
from feddpsyn.params.plan_request import PlanRequest  # noqa: E402
from feddpsyn.params.run_time import _dominated_group_shape  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402
from feddpsyn.params.session_plan import SessionPlan  # noqa: E402
from feddpsyn.synthesis.marginals import NoisyMarginal  # noqa: E402
from feddpsyn.synthesis.synthesize import synthesize_records  # noqa: E402

SCORE_SHARE = Fraction(1, 10)  # both plans give the selection a tenth of rho


@dataclass(frozen=True)
class WhatIf:
    """One choice per factor (module docstring); the defaults are the served default's."""

    selection: str = "noisy-greedy"
    max_rows: str = "stated"
    reserves: str = "served"
    budget: str = "served"
    noise: str = "served"
    split: str = "served"
    greedy: str = "served"
    score: str = "served"
    synthesis: str = "auto"

    def changed(self) -> dict:
        base = WhatIf()
        return {k: v for k, v in asdict(self).items() if v != getattr(base, k)}


SERVED = WhatIf()
CENTRAL = WhatIf(max_rows="rows", reserves="none", budget="central", noise="gaussian",
                 split="privsyn", greedy="privsyn", score="central", synthesis="pgm")

# The cumulative ladder from the served default to central PrivSyn: each rung changes one
# more factor; the last is central PrivSyn's release (``central-privsyn-pgm``).
LADDER = [
    ("served", SERVED),
    ("+max_rows=rows", replace(SERVED, max_rows="rows")),
    ("+reserves=none", replace(SERVED, max_rows="rows", reserves="none")),
    ("+noise=gaussian", replace(SERVED, max_rows="rows", reserves="none", noise="gaussian")),
    ("+split=privsyn", replace(SERVED, max_rows="rows", reserves="none", noise="gaussian",
                               split="privsyn")),
    ("+greedy=privsyn", replace(SERVED, max_rows="rows", reserves="none", noise="gaussian",
                                split="privsyn", greedy="privsyn")),
    ("+score=central", replace(SERVED, max_rows="rows", reserves="none", noise="gaussian",
                               split="privsyn", greedy="privsyn", score="central")),
    ("+synthesis=pgm", replace(SERVED, max_rows="rows", reserves="none", noise="gaussian",
                               split="privsyn", greedy="privsyn", score="central",
                               synthesis="pgm")),
    ("+budget=central", CENTRAL),
]
# Each factor alone, from the served default.
ALONE = [
    ("max_rows=rows", replace(SERVED, max_rows="rows")),
    ("reserves=none", replace(SERVED, reserves="none")),
    ("noise=gaussian", replace(SERVED, noise="gaussian")),
    ("noise=gaussian-1way", replace(SERVED, noise="gaussian-1way")),
    ("noise=gaussian-2way", replace(SERVED, noise="gaussian-2way")),
    ("split=privsyn", replace(SERVED, split="privsyn")),
    ("greedy=privsyn", replace(SERVED, greedy="privsyn")),
    ("greedy=shape", replace(SERVED, greedy="shape")),
    ("split=privsyn,greedy=privsyn", replace(SERVED, split="privsyn", greedy="privsyn")),
    ("score=exact-k", replace(SERVED, score="exact-k")),
    ("score=central", replace(SERVED, score="central")),
    ("synthesis=pgm", replace(SERVED, synthesis="pgm")),
    ("budget=central", replace(SERVED, budget="central")),
]
# Plan changes the servers could make, and the curator at exact accounting.
CANDIDATES = [
    ("plan:one_way=0.2", replace(SERVED, split="one_way=0.2")),
    ("plan:one_way=0.3", replace(SERVED, split="one_way=0.3")),
    ("plan:one_way=0.4", replace(SERVED, split="one_way=0.4")),
    ("plan:one_way=0.5", replace(SERVED, split="one_way=0.5")),
    ("plan:split=privsyn,greedy=privsyn,greedy=shape", replace(
        SERVED, split="privsyn", greedy="privsyn-shape")),
    ("central:budget=gaussian-pld", replace(CENTRAL, budget="gaussian-pld")),
]
# Toward the curator's every-pair release with GUM (``central-privsyn-all``).
EVERY_PAIR = [
    ("served+synthesis=gum", replace(SERVED, synthesis="gum")),
    ("all:served", WhatIf(selection="none", synthesis="gum")),
    ("all:+noise=gaussian", WhatIf(selection="none", synthesis="gum", noise="gaussian")),
    ("all:+split=0.2/0.8", WhatIf(selection="none", synthesis="gum", noise="gaussian",
                                  split="one_way=0.2")),
    ("all:+budget=gaussian-pld", WhatIf(selection="none", synthesis="gum", noise="gaussian",
                                        split="one_way=0.2", budget="gaussian-pld")),
]
# The 2-way groups' shapes from a wider envelope, alone and with the candidate splits.
WIDE = [
    ("noise=served-wide", replace(SERVED, noise="served-wide")),
    ("plan:one_way=0.2,noise=served-wide", replace(SERVED, split="one_way=0.2",
                                                    noise="served-wide")),
    ("plan:one_way=0.3,noise=served-wide", replace(SERVED, split="one_way=0.3",
                                                    noise="served-wide")),
    ("plan:split=privsyn,greedy=privsyn,noise=served-wide", replace(
        SERVED, split="privsyn", greedy="privsyn", noise="served-wide")),
]
# The 1-way top-up and the wider envelope, each alone and together: the plan changes still
# open after the candidates at eps 0.3.
TOPUP = [
    ("plan:topup", replace(SERVED, split="privsyn", greedy="privsyn-shape")),
    ("noise=served-wide", replace(SERVED, noise="served-wide")),
    ("plan:topup,noise=served-wide", replace(SERVED, split="privsyn", greedy="privsyn-shape",
                                              noise="served-wide")),
]
# The top-up's greedy rule priced with the 1-ways' floors (the allocation the release makes)
# against the rule that prices every 1-way at its whole c^(2/3) share.
TOPUP_PRICING = [
    ("plan:topup", replace(SERVED, split="privsyn", greedy="privsyn-shape")),
    ("plan:topup,greedy=floors", replace(SERVED, split="privsyn", greedy="floors")),
    ("plan:topup,greedy=served", replace(SERVED, split="privsyn")),
]
# The servers' default (the top-up with its greedy rule) and each factor alone from it: what
# is left of the gap once the plan changes above were adopted.
DEFAULT = replace(SERVED, split="privsyn", greedy="privsyn-shape")
FROM_DEFAULT = [
    ("default", DEFAULT),
    ("default,max_rows=rows", replace(DEFAULT, max_rows="rows")),
    ("default,reserves=none", replace(DEFAULT, reserves="none")),
    ("default,noise=gaussian-1way", replace(DEFAULT, noise="gaussian-1way")),
    ("default,noise=gaussian-2way", replace(DEFAULT, noise="gaussian-2way")),
    ("default,noise=gaussian", replace(DEFAULT, noise="gaussian")),
    ("default,greedy=privsyn", replace(DEFAULT, greedy="privsyn")),
    ("default,score=central", replace(DEFAULT, score="central")),
]
# What the factors above leave: the budget, then everything but the split, then the curator.
FROM_DEFAULT_REST = [
    ("default", DEFAULT),
    ("default,budget=central", replace(DEFAULT, budget="central")),
    ("default,noise=gaussian,budget=central", replace(DEFAULT, noise="gaussian",
                                                      budget="central")),
    ("default,all but split", replace(CENTRAL, split="privsyn")),
    ("central", CENTRAL),
]
GROUPS = {"ladder": LADDER, "from_default": FROM_DEFAULT,
          "from_default_rest": FROM_DEFAULT_REST, "alone": ALONE,
          "candidates": CANDIDATES, "every_pair": EVERY_PAIR, "wide": WIDE, "topup": TOPUP,
          "topup_pricing": TOPUP_PRICING}
ANCHORS = ["feddpsyn-default", "central-privsyn-pgm"]


# --- the budget --------------------------------------------------------------------------

def gaussian_pld_rho(epsilon: float, delta: float) -> Fraction:
    """The rho = mu^2 / 2 of the one Gaussian mechanism G_mu that is exactly (eps, delta)-DP
    (``dp.gaussian_domination.gaussian_delta``, bisection): the budget of a plan whose
    noises are all Gaussians (they compose to one), accounted exactly."""
    lo, hi = 1e-6, 100.0
    for _ in range(200):  # bounded bisection
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(gaussian_delta(mid, epsilon)) <= delta else (lo, mid)
    return Fraction(lo * lo / 2).limit_denominator(10 ** 15)


def curator_rho(schema: Schema, epsilon: float, delta: float) -> Fraction:
    """The curator's own budget (``central_privsyn``): its scores and publication calibrated
    on their composed PLD (``privsyn_budget``)."""
    layout = MarginalLayout.build(schema.domain_sizes)
    return privsyn_budget(epsilon, delta, len(layout.two_way), len(layout.one_way),
                          INDIF_SENSITIVITY).rho


def _split_arg(cfg: WhatIf) -> dict | None:
    if not cfg.split.startswith("one_way="):
        return None
    one = float(cfg.split.split("=")[1])
    if cfg.selection == SelectionMode.NONE:
        return {"one_way": one, "two_way": round(1 - one, 12)}
    return {"one_way": one, "selection": float(SCORE_SHARE), "two_way": round(0.9 - one, 12)}


_PLANS: dict = {}


def _plan(schema: Schema, rows: int, epsilon: float, delta: float, cfg: WhatIf) -> SessionPlan:
    """The plan whose noises the what-if session uses: the servers' (``served_plan``), with
    the plan-level switches (max_rows, reserves, split, budget) applied (kept per table,
    rows, budget and switches)."""
    key = (tuple(schema.names), tuple(schema.domain_sizes), rows, epsilon, delta,
           cfg.selection, cfg.max_rows, cfg.reserves, cfg.budget, cfg.split)
    if key not in _PLANS:
        _PLANS[key] = _build_plan(schema, rows, epsilon, delta, cfg)
    return _PLANS[key]


def _build_plan(schema: Schema, rows: int, epsilon: float, delta: float,
                cfg: WhatIf) -> SessionPlan:
    selection = cfg.selection
    if cfg.max_rows == "stated":
        max_rows = stated_max_rows(schema, rows, epsilon, delta, selection, None, NoiseMode.AUTO)
    else:
        max_rows = rows
    split = _split_arg(cfg)
    if cfg.split == "privsyn":
        split = None  # the served plan; the publication is re-shared at run time

    def build(at_delta: float) -> SessionPlan:
        return SessionPlan.build(PlanRequest(schema, epsilon, at_delta, max_rows, split=split,
                                             selection=selection, noise=NoiseMode.AUTO,
                                             one_way_topup=False))

    if cfg.budget == "served" and split is None and cfg.max_rows == "stated" \
            and cfg.reserves == "served":
        plan = served_plan(schema, rows, epsilon, delta, selection, None, one_way_topup=False)
    else:
        plan = build(delta)
    if cfg.reserves == "none" and cfg.budget == "served":
        for _ in range(2):  # two fixed-point steps: the reserves scale with delta
            eta = GAUSSIAN_BOUND_SHARE if selection == SelectionMode.NOISY_GREEDY else 0.0
            usable = plan.delta_conversion * (1 - eta)
            plan = build(plan.delta * delta / usable)
    if cfg.budget in ("central", "gaussian-pld"):
        if cfg.budget == "central":
            rho = curator_rho(schema, epsilon, delta)
        elif selection == SelectionMode.NONE:
            # The curator's every-pair plan: two-server Gaussians accounted by their PLD,
            # one of them added (``central_privsyn_all``).
            rho = SessionPlan.build(PlanRequest(schema, epsilon, delta, max(rows, 1),
                                                split=split,
                                                noise=NoiseMode.TWO_SERVER,
                                                selection="none")).rho_total
        else:
            rho = gaussian_pld_rho(epsilon, delta)
        plan = SessionPlan._settled(PlanRequest(schema, epsilon, delta, max_rows,
                                                split=split or None, selection=selection,
                                                noise=NoiseMode.AUTO, one_way_topup=False),
                                    split_two_way=True, rho_total=rho, exact=True)
    return plan


# --- the noises ---------------------------------------------------------------------------

class Draws:
    """Common random numbers: every noise of a session is the inverse CDF of its exact pmf
    at uniforms drawn per (session seed, stream), a stream per release part and marginal
    (one per pair's 2-way counts, one for the scores, ...). Two rungs that give a count
    the same noise distribution give it the same noise, and rungs that change its
    distribution change it monotonically, so a rung's paired difference from the next
    measures its factor, not the draws. Each count's noise still has exactly its
    release's distribution: a joint shape's exact integer pmf
    (``JointNoiseShape.counts``), a discrete Gaussian's pmf on +-14 sigma (tails below
    1e-44), or, above sigma 2,000, the rounded normal (the score grid's Gaussian, total
    variation distance from the discrete one below 1e-300). What changes from the servers
    is the source of the randomness (a seeded generator instead of the CSPRNG), which
    moves no error."""

    def __init__(self, seed: int):
        self.seed = seed

    def uniforms(self, stream: str, size: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, zlib.crc32(stream.encode())])
        return np.clip(rng.random(size), 1e-300, None)


@functools.lru_cache(maxsize=1024)
def _shape_cdf(shape: JointNoiseShape) -> np.ndarray:
    counts = shape.counts()
    total = sum(counts)
    return np.cumsum([c / total for c in counts])


@functools.lru_cache(maxsize=1024)
def _gaussian_cdf(sigma2: Fraction) -> tuple[np.ndarray, int]:
    sigma = math.sqrt(float(sigma2))
    half = int(math.ceil(14 * sigma)) + 2
    k = np.arange(-half, half + 1, dtype=float)
    pmf = np.exp(-k * k / (2 * float(sigma2)))
    return np.cumsum(pmf / pmf.sum()), half


def _inverse(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, u, side="right"), len(cdf) - 1)


def _joint(shape, size: int, draws: Draws, stream: str) -> tuple[np.ndarray, float]:
    cdf = _shape_cdf(shape)  # the whole shape: a second width's uniforms too
    noise = _inverse(cdf, draws.uniforms(stream, size)) - shape.span // 2
    return noise.astype(np.int64), float(shape.variance)


def _gaussian(sigma2: Fraction, size: int, draws: Draws,
              stream: str) -> tuple[np.ndarray, float]:
    sigma2 = Fraction(sigma2)
    u = draws.uniforms(stream, size)
    if sigma2 > 2000 ** 2:
        noise = np.rint(math.sqrt(float(sigma2)) * ndtri(u))
    else:
        cdf, half = _gaussian_cdf(sigma2)
        noise = _inverse(cdf, u) - half
    return noise.astype(np.int64), float(sigma2)


def _spec_noise(spec, size: int, gaussian: bool, draws: Draws,
                stream: str) -> tuple[np.ndarray, float]:
    """A planned release's noise: its joint shape, else the two servers' Gaussians; or one
    Gaussian of the release's sigma2 (M / (2 rho))."""
    if gaussian:
        return _gaussian(spec.sigma2, size, draws, stream)
    if spec.joint is not None:
        return _joint(spec.joint, size, draws, stream)
    a, _ = _gaussian(spec.sigma2, size, draws, stream)
    b, _ = _gaussian(spec.sigma2, size, draws, stream + "#second-server")
    return a + b, 2 * float(spec.sigma2)


def _rational(x: float | Fraction) -> Fraction:
    return Fraction(x).limit_denominator(10 ** 15) if isinstance(x, float) else Fraction(x)


def _group_noise(plan: SessionPlan, rho_per_marginal: Fraction, size: int, gaussian: bool,
                 notes: dict, draws: Draws, stream: str,
                 wide: bool = False) -> tuple[np.ndarray, float]:
    """A run-time group's noise at ``rho_per_marginal``: the dominated shape the servers give a
    split release's group (``params.run_time``) within the plan's envelope, or one Gaussian
    of 1 / (2 rho). A group with no dominated shape (the servers would fail closed) gets the
    Gaussian, and is counted in ``notes``."""
    rho_per_marginal = _rational(rho_per_marginal)
    if not gaussian:
        shape = _group_shape(plan, rho_per_marginal, wide)
        if shape is not None:
            return _joint(shape, size, draws, stream)
        notes["no_shape"] = notes.get("no_shape", 0) + 1
        print(f"[gap] no dominated shape at rho {float(rho_per_marginal):.3g} per marginal: "
              "a Gaussian instead", file=sys.stderr)
    return _gaussian(1 / (2 * rho_per_marginal), size, draws, stream)


def _group_shape(plan: SessionPlan, rho_per_marginal: Fraction, wide: bool = False):
    """The servers' shape for a run-time group (``params.run_time``: the least-variance
    dominated shape within the 2-way envelope). Below the envelope's budget (a 1-way
    top-up can be smaller than any pair's share) the same search without the envelope's
    caps: the shape a release sized for it would carry."""
    envelope = plan.release("two_way")
    if envelope.joint is None or not plan.joint_shapes():
        return None
    top = max(max(s.weights()) for s in plan.joint_shapes())
    shape = None if wide else _dominated_group_shape(plan, envelope, rho_per_marginal, top)[0]
    if shape is None:
        eta = bound_eta(plan.delta_conversion, len(plan.layout.two_way))
        room = 2 * ((1 << (plan.parameters.count_bits - 1)) - 1 - plan.max_rows)
        shape = dominated_shape(rho_per_marginal, eta,
                                JOINT_MAX_BITS_PER_CALL // plan.parameters.chunk_cells, room,
                                1 << (MAX_SHAPE_BITS - 1))
    return shape


# --- the session ----------------------------------------------------------------------------

def _marginal(slot, counts: np.ndarray, noise: np.ndarray, variance: float) -> NoisyMarginal:
    values = counts[slot.offset:slot.offset + slot.size] + noise
    return NoisyMarginal(slot.attrs, values.reshape(slot.shape).astype(float), variance)


def _stream(kind: str, attrs) -> str:
    return f"{kind}/{'-'.join(str(a) for a in attrs)}"


def _scores(cfg: WhatIf, plan: SessionPlan, union: np.ndarray, one_way: list | None,
            rows: int, draws: Draws) -> dict:
    """The noisy scores the greedy rule reads (``score``, ``noise``)."""
    layout, selection = plan.layout, plan.selection
    pairs = [slot.attrs for slot in layout.two_way]
    if cfg.score == "central":
        grid = 1 << SCORE_GRID_BITS
        sigma2 = Fraction((INDIF_SENSITIVITY * grid) ** 2 * len(pairs)) / (2 * selection.rho)
        exact = indif_grid_scores(union, layout, rows)
        noise, _ = _gaussian(sigma2, len(pairs), draws, "scores")
        return {p: (exact[p] + int(z)) / grid for p, z in zip(pairs, noise, strict=True)}
    if cfg.score == "exact-k":
        exact_one = [union[s.offset:s.offset + s.size] for s in layout.one_way]
        expected = expected_counts_for_pairs(exact_one, pairs, max(rows, selection.max_rows))
        counts = {s.attrs: union[s.offset:s.offset + s.size] for s in layout.two_way}
        scores = indif_scores(counts, expected)
    else:
        _, scores = pair_scores(plan, union, one_way, selection.max_rows)
    if cfg.noise in ("gaussian", "gaussian-1way"):
        noise, _ = _gaussian(selection.noise_sigma2, len(pairs), draws, "scores")
    elif selection.score_joint is not None:
        noise, _ = _joint(selection.score_joint, len(pairs), draws, "scores")
    else:  # the two servers' Gaussians (``feddpsyn_served._score_noise``)
        a, _ = _gaussian(selection.noise_sigma2, len(pairs), draws, "scores")
        b, _ = _gaussian(selection.noise_sigma2, len(pairs), draws, "scores#second-server")
        noise = a + b
    return {p: scores[p] + int(z) for p, z in zip(pairs, noise, strict=True)}


_RATIOS: dict = {}


def _shape_ratio(plan: SessionPlan, log_rho: float) -> float:
    """Variance of the dominated shape at a per-marginal rho over its Gaussian's 1 / (2 rho)
    (on a grid of log rho, for the greedy rule's pricing)."""
    key = (id(plan), log_rho)
    if key not in _RATIOS:
        rho = _rational(math.exp(log_rho))
        shape = _group_shape(plan, rho)
        _RATIOS[key] = 1.0 if shape is None else float(shape.variance) * 2 * float(rho)
    return _RATIOS[key]


def _priced_ratio(plan: SessionPlan, rho: float) -> float:
    return _shape_ratio(plan, round(math.log(rho) * 8) / 8)


def greedy_select_with_floors(scores: dict[tuple[int, int], float],
                              cells: dict[tuple[int, int], int], one_way_cells: list[int],
                              one_way_floor: Fraction, rho: Fraction,
                              variance_ratio: Callable[[float], float]
                              ) -> list[tuple[int, int]]:
    """PrivSyn's greedy rule priced with the allocation the release will make: a candidate
    set's kept pairs and the 1-ways' top-ups share ``rho`` (the 2-way release's) by the
    water-fill with the 1-ways' floors (``one_way_floor`` each: what their first release
    gave them; :func:`allocation_with_floors`), pair i's expected L1 noise
    sqrt(2/pi) c_i sqrt(ratio(rho_i) / (2 rho_i)) at its share rho_i = lam w_i. A 1-way
    whose floor is above its c^(2/3) share takes nothing from the pairs, so where the
    floors hold (large tables, large budgets) this prices as :func:`greedy_select_allocated`
    does with the shapes' variances; :func:`greedy_select_with_one_ways` leaves the floors
    out and prices every 1-way as taking its whole share. Floats: a price, not a guarantee
    (the release's own shares are exact). A what-if only: measured worse than the servers'
    rule (``experiments/gap_sources/results/gap_topup_pricing.md``)."""
    weight = {p: float(allocation_weight(c)) for p, c in cells.items()}
    floor = float(one_way_floor)
    # The 1-ways in the order they join the water-fill (floor / w ascending).
    ones = sorted(float(allocation_weight(c)) for c in one_way_cells)[::-1]
    budget = float(rho)
    scale = math.sqrt(2 / math.pi)

    def level(pair_weight: float) -> float:
        lam = budget / pair_weight
        spent, total = 0.0, pair_weight
        for w in ones:  # bounded: one pass per 1-way
            if lam <= floor / w:
                break
            spent += floor
            total += w
            lam = (budget + spent) / total
        return lam

    def total_error(selected: list[tuple[int, int]]) -> float:
        if not selected:
            return sum(scores.values())
        lam = level(sum(weight[p] for p in selected))
        noise = 0.0
        for p in selected:
            rho_p = lam * weight[p]
            noise += scale * cells[p] * math.sqrt(variance_ratio(rho_p) / (2 * rho_p))
        return sum(v for p, v in scores.items() if p not in selected) + noise

    return greedy_by_error(list(scores), total_error)


def _greedy(cfg: WhatIf, plan: SessionPlan, noisy: dict, rho_total: Fraction) -> list:
    cells = {slot.attrs: slot.size for slot in plan.layout.two_way}
    one_cells = [slot.size for slot in plan.layout.one_way]
    if cfg.greedy == "served":
        return greedy_select_allocated(noisy, cells, plan.release("two_way").rho)
    if cfg.greedy == "privsyn":
        return privsyn_greedy(noisy, cells, one_cells, rho_total - plan.selection.rho)
    # "shape" / "privsyn-shape": the rule priced with each group's own shape variance, the
    # latter with the 1-ways in the allocation (the servers' rule with the 1-way top-up,
    # ``SessionPlan.select_pairs``, prices the same way with the servers' shapes).
    if cfg.greedy == "floors":
        d = len(plan.layout.one_way)
        return greedy_select_with_floors(noisy, cells, one_cells, plan.release("one_way").rho / d,
                                         plan.release("two_way").rho,
                                         lambda rho: _priced_ratio(plan, rho))
    if cfg.greedy == "privsyn-shape":
        return greedy_select_with_one_ways(noisy, cells, one_cells,
                                           rho_total - plan.selection.rho,
                                           lambda rho: _priced_ratio(plan, rho))
    return greedy_select_with_one_ways(noisy, cells, [], plan.release("two_way").rho,
                                       lambda rho: _priced_ratio(plan, rho))


def _waterfill(weights: list[float], floor: list[float], budget: float) -> list[float]:
    """Final per-marginal rho f_i = max(floor_i, lam w_i) with sum_i (f_i - floor_i) = budget
    (bisection on lam): PrivSyn's c^(2/3) shares where a first release has not already
    given a marginal more."""
    def spent(lam: float) -> float:
        return sum(max(f, lam * w) - f for w, f in zip(weights, floor, strict=True))

    lo, hi = 0.0, (budget + sum(floor)) / min(weights)
    for _ in range(200):  # bounded bisection
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if spent(mid) <= budget else (lo, mid)
    return [max(f, lo * w) for w, f in zip(weights, floor, strict=True)]


def whatif_session(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                   delta: float, seed: int, cfg: WhatIf) -> MethodResult:
    """One plaintext session under ``cfg`` (module docstring). The owners' counts add up to
    the union's, which is all a release depends on."""
    rows = len(records)
    plan = _plan(schema, rows, epsilon, delta, cfg)
    layout = plan.layout
    union = layout.counts(records)
    rho_total = plan.rho_total
    notes: dict = {"whatif": cfg.changed(), "rho_total": float(rho_total),
                   "max_rows": plan.max_rows,
                   "delta_conversion": plan.delta_conversion, "dp": "what-if"}
    gauss_one = cfg.noise in ("gaussian", "gaussian-1way")
    gauss_two = cfg.noise in ("gaussian", "gaussian-2way")
    wide = cfg.noise == "served-wide"
    one_spec = plan.release("one_way")
    noisy: list[NoisyMarginal] = []
    draws = Draws(seed)

    if cfg.selection == SelectionMode.NONE:
        for spec in plan.releases:
            for slot in plan.slots_of(spec):
                noise, var = _spec_noise(spec, slot.size, gauss_one if spec.name == "one_way"
                                         else gauss_two, draws,
                                         _stream(spec.name, slot.attrs))
                noisy.append(_marginal(slot, union, noise, var))
        chosen = [slot.attrs for slot in layout.two_way]
    else:
        # The 1-ways released before the selection: the served 10% (the scores read them).
        first: list[NoisyMarginal] = []
        if cfg.score != "central" or cfg.split != "privsyn":
            for slot in layout.one_way:
                noise, var = _spec_noise(one_spec, slot.size, gauss_one, draws,
                                         _stream("one_way", slot.attrs))
                first.append(_marginal(slot, union, noise, var))
            if cfg.max_rows == "stated" and cfg.noise == "served" \
                    and not cfg.split.startswith("one_way="):
                bound = plan.check_row_bound([m.counts.ravel() for m in first])
                if not bound.holds:
                    raise RuntimeError(f"the servers would refuse this union: {bound.message()}")
        scores = _scores(cfg, plan, union, first, rows, draws)
        chosen = _greedy(cfg, plan, scores, rho_total)
        if cfg.split == "privsyn":
            noisy = _privsyn_release(plan, union, chosen, first, gauss_one, gauss_two, notes,
                                     draws, wide)
        else:
            noisy = list(first)
            if chosen:
                noisy += _served_two_way(plan, union, chosen, gauss_two, notes, draws, wide)
    notes["selected_pairs"] = chosen
    synth = synthesize_records(schema, noisy, cfg.synthesis, None, np.random.default_rng(seed))
    return MethodResult(synth, Fraction(1), Fraction(1), notes=notes)


def _served_two_way(plan: SessionPlan, union: np.ndarray, chosen: list, gaussian: bool,
                    notes: dict, draws: Draws, wide: bool = False) -> list[NoisyMarginal]:
    """The kept pairs at the plan's 2-way rho, c^(2/3) per pair size: the servers' resolved
    split release (``SessionPlan.resolve``), or one Gaussian per group at its own rho."""
    out = []
    two = plan.release("two_way")
    if not gaussian and not wide and two.split_pending:
        resolved = plan.resolve(two, chosen)
        for part in resolved.parts or (resolved,):
            for slot in plan.slots_of(part):
                noise, var = _spec_noise(part, slot.size, False, draws,
                                         _stream("two_way", slot.attrs))
                out.append(_marginal(slot, union, noise, var))
        return out
    cells = {slot.attrs: slot.size for slot in plan.layout.two_way}
    for pairs, rho in allocation_groups(cells, chosen, two.rho):
        for p in pairs:
            slot = plan.layout.slot(p)
            noise, var = _group_noise(plan, rho / len(pairs), slot.size, gaussian, notes,
                                      draws, _stream("two_way", slot.attrs), wide)
            out.append(_marginal(slot, union, noise, var))
    return out


def _privsyn_release(plan: SessionPlan, union: np.ndarray, chosen: list,
                     first: list[NoisyMarginal], gauss_one: bool, gauss_two: bool,
                     notes: dict, draws: Draws, wide: bool = False) -> list[NoisyMarginal]:
    """PrivSyn's publication: the 1-ways and the kept pairs share rho - rho_selection by
    c^(2/3) per marginal. A first 1-way release (``first``) is part of it: each 1-way is
    topped up to its share by a second release (:func:`_waterfill`), the two combined by
    inverse variance; the kept pairs share the rest."""
    layout = plan.layout
    slots = list(layout.one_way) + [layout.slot(p) for p in chosen]
    weights = [float(allocation_weight(s.size)) for s in slots]
    publish = float(plan.rho_total - plan.selection.rho)
    d = len(layout.one_way)
    floor = [float(plan.release("one_way").rho) / d] * d if first else [0.0] * d
    floor += [0.0] * len(chosen)
    final = _waterfill(weights, floor, publish - sum(floor))
    out = []
    for i, slot in enumerate(slots):
        extra = final[i] - floor[i]
        gaussian = gauss_one if i < d else gauss_two
        if extra <= publish * 1e-9:
            out.append(first[i])
            continue
        # A pair's noise and a 1-way's only release share their streams with the served
        # release of the same counts; a top-up has its own.
        stream = (_stream("two_way", slot.attrs) if i >= d else
                  _stream("one_way", slot.attrs) + ("/top-up" if first else ""))
        noise, var = _group_noise(plan, extra, slot.size, gaussian, notes, draws, stream,
                                  wide)
        second = _marginal(slot, union, noise, var)
        if i < d and first:
            a, b = first[i], second
            w_a, w_b = 1 / a.variance, 1 / b.variance
            combined = (w_a * a.counts + w_b * b.counts) / (w_a + w_b)
            out.append(NoisyMarginal(slot.attrs, combined, 1 / (w_a + w_b)))
        else:
            out.append(second)
    return out


# --- the driver -----------------------------------------------------------------------------

def register(rungs: list[tuple[str, WhatIf]]) -> list[str]:
    """The rungs as bench methods (``gap:<name>``), for ``fedbench.runner.run_utility``."""
    names = []
    for name, cfg in rungs:
        method = f"gap:{name}"
        METHODS[method] = functools.partial(whatif_session, cfg=cfg)
        names.append(method)
    return names


def _paired(rows: list[dict], method: str, reference: str) -> tuple[float, float] | None:
    """Mean and standard error over repeats of (method - reference), paired by repeat (same
    split, same seed, coupled noises)."""
    mine = {r["repeat"]: float(r["two_way"]) for r in rows if r["method"] == method}
    ref = {r["repeat"]: float(r["two_way"]) for r in rows if r["method"] == reference}
    diffs = [mine[k] - ref[k] for k in mine if k in ref]
    if len(diffs) < 2:
        return None
    return statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))


# Groups whose rungs are also compared with the servers' default what-if (``diff_vs_default``).
FROM_DEFAULT_GROUPS = ("from_default", "from_default_rest")
CHAINS = {"ladder": [f"gap:{n}" for n, _ in LADDER],
          "every_pair": ["gap:served"] + [f"gap:{n}" for n, _ in EVERY_PAIR]}


def summarise(rows: list[dict], table: str, eps: float, rungs: dict) -> list[dict]:
    """Per method: mean and sd of the 2-way L1 over repeats; its paired difference from the
    served what-if (``diff_vs_served``, with its standard error), in the groups from the
    default from the default's what-if (``diff_vs_default``) and, on a ladder, from the
    rung before (``step_diff``); and those differences as shares of the gap (:func:`shares`)."""
    out = []
    for method in dict.fromkeys(r["method"] for r in rows):
        two = [float(r["two_way"]) for r in rows if r["method"] == method]
        name = method.removeprefix("gap:")
        out.append({"table": table, "eps": eps, "method": method,
                    "group": rungs.get(name, ("anchor", None))[0],
                    "whatif": (rungs[name][1].changed() if name in rungs else None),
                    "mean": statistics.fmean(two),
                    "sd": statistics.stdev(two) if len(two) > 1 else 0.0,
                    "selected_pairs_mean": statistics.fmean(
                        float(r["selected_pairs"]) for r in rows if r["method"] == method),
                    "repeats": len(two)})
    for e in out:
        paired = _paired(rows, e["method"], "gap:served")
        if paired is not None and e["method"] != "gap:served":
            e["diff_vs_served"], e["diff_vs_served_se"] = paired
        if e["group"] in FROM_DEFAULT_GROUPS and e["method"] != "gap:default":
            from_default = _paired(rows, e["method"], "gap:default")
            if from_default is not None:
                e["diff_vs_default"], e["diff_vs_default_se"] = from_default
        chain = CHAINS.get(e["group"], [])
        if e["method"] in chain[1:]:
            step = _paired(rows, e["method"], chain[chain.index(e["method"]) - 1])
            if step is not None:
                e["step_diff"], e["step_diff_se"] = step
    anchors = _paired(rows, "feddpsyn-default", "central-privsyn-pgm")
    out.append({"table": table, "eps": eps, "method": "gaps",
                "default_minus_central_privsyn_pgm": None if anchors is None else anchors[0],
                "default_minus_central_privsyn_pgm_se": None if anchors is None else anchors[1]})
    return shares(out)


def shares(entries: list[dict]) -> list[dict]:
    """Each what-if's difference as a share of the gap it is measured against, positive where
    the factor closes it: the gap between the served what-if and a ladder's end (the
    curator's release, ``+budget=central``; on the every-pair ladder the curator's
    every-pair release), paired by repeat. ``share_of_gap_alone``: the difference from the
    served what-if over the PrivSyn ladder's gap; ``share_of_gap_step``: a ladder rung's step
    over its ladder's gap. A gap within two standard errors of zero is not resolved: no
    shares are given against it (one case's entries, one run)."""
    by = {e["method"]: e for e in entries}
    gaps: dict = {}
    for group, chain in CHAINS.items():
        end = by.get(chain[-1], {})
        if "diff_vs_served" in end:
            gap, se = -end["diff_vs_served"], end["diff_vs_served_se"]
            gaps[group] = (gap, se, gap > 2 * se)
    for e in entries:
        e.pop("share_of_gap_alone", None)
        e.pop("share_of_gap_step", None)
        if not e["method"].startswith("gap:"):
            continue
        ladder = gaps.get("ladder")
        if "diff_vs_served" in e and e["group"] != "every_pair" and ladder and ladder[2]:
            e["share_of_gap_alone"] = -e["diff_vs_served"] / ladder[0]
        chain = gaps.get(e["group"])
        if "step_diff" in e and chain and chain[2]:
            e["share_of_gap_step"] = -e["step_diff"] / chain[0]
    for e in entries:
        if e["method"] == "gaps":
            for group, key in (("ladder", "served_whatif_minus_central_whatif"),
                               ("every_pair", "served_whatif_minus_every_pair_whatif")):
                gap, se, resolved = gaps.get(group, (None, None, False))
                e[key], e[key + "_se"], e[key + "_resolved"] = gap, se, resolved
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="fed_heart_disease:0.3,mroz:0.3,wages:4",
                        help="table:eps,...")
    parser.add_argument("--groups", default="ladder,alone,candidates",
                        help=f"rung groups, of {sorted(GROUPS)}")
    parser.add_argument("--every-pair-cases", default="wages:4",
                        help="cases that also run the every-pair group and central-privsyn-all")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--out", type=Path, required=True, help="per-run rows, per case")
    parser.add_argument("--json", type=Path, required=True,
                        help="the summary to write (refused if it exists)")
    parser.add_argument("--merge", default="",
                        help="instead of running: merge these summaries (a,b,...) into --json")
    parser.add_argument("--resume", type=Path, default=None,
                        help="an earlier run's --out: the tasks it finished are not run again "
                             "(all of them: its summary made again by this code)")
    parser.add_argument("--report", action="store_true",
                        help="instead of running: print --json's results as markdown")
    args = parser.parse_args()
    if args.report:
        print(report(json.loads(args.json.read_text())))
        return
    if args.json.exists():
        raise SystemExit(f"{args.json} exists: results are never overwritten")
    if args.merge:
        merge([Path(p) for p in args.merge.split(",")], args.json)
        return
    every_pair = set(filter(None, args.every_pair_cases.split(",")))
    entries, plans = [], []
    for case in args.cases.split(","):
        table, eps_text = case.split(":")
        eps = float(eps_text)
        rungs = {name: (group, cfg) for group in args.groups.split(",")
                 for name, cfg in GROUPS[group]}
        rungs.setdefault("served", ("ladder", SERVED))  # every difference is paired with it
        anchors = list(ANCHORS)
        if case in every_pair:
            rungs.update({name: ("every_pair", cfg) for name, cfg in EVERY_PAIR})
            anchors += ["feddpsyn-served-all", "central-privsyn-all"]
        methods = anchors + register([(n, c) for n, (_, c) in rungs.items()])
        csv, schema, target = _table(table)
        rows = run_utility(csv, schema, target, methods, [eps], [Setting(4, "uniform", None)],
                           args.repeats, args.out / f"{table}_{eps_text}", args.delta,
                           resume=_earlier_rows(args.resume, f"{table}_{eps_text}"))
        entries += summarise(rows, table, eps, rungs)
        plans += plan_facts(table, schema, _train_rows(csv, schema), eps, args.delta)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "what": "2-way L1 of what-if sessions between the served default "
                    "(feddpsyn-default) and central PrivSyn (central-privsyn-pgm), one factor "
                    "changed at a time (experiments/gap_sources/bench_gap_sources.py's "
                    "docstring); 4 uniform owners; mean and sd over repeats; position_in_gap 0 = "
                    "the default's what-if, 1 = the curator's",
            "command": "OMP_NUM_THREADS=1 nice -n 19 python "
                       "experiments/gap_sources/bench_gap_sources.py " + shlex.join(sys.argv[1:]),
            "commit": _commit(), "machine": platform.node(),
            "date": datetime.date.today().isoformat(), "delta": args.delta,
            "plans": plans, "results": entries}, indent=1) + "\n")


def report(doc: dict) -> str:
    """The summary as markdown tables, one per (table, eps): mean and sd of the 2-way L1, the
    paired difference from the served what-if (or, on a ladder, from the rung before) with
    its standard error, and that difference as a share of the gap."""
    lines = []
    cases = dict.fromkeys((r["table"], r["eps"]) for r in doc["results"])
    for table, eps in cases:
        rows = [r for r in doc["results"] if (r["table"], r["eps"]) == (table, eps)]
        gaps = next(r for r in rows if r["method"] == "gaps")  # the case's first run
        def num(key: str, gaps: dict = gaps) -> str:
            value, se = gaps.get(key), gaps.get(key + "_se")
            return "-" if value is None else (f"{value:.4f}" if se is None
                                              else f"{value:.4f} (se {se:.4f})")

        lines += [f"### {table}, eps {eps:g}", "",
                  f"gaps: served what-if - central what-if "
                  f"{num('served_whatif_minus_central_whatif')}; served what-if - every-pair "
                  f"what-if {num('served_whatif_minus_every_pair_whatif')}; "
                  f"feddpsyn-default - central-privsyn-pgm "
                  f"{num('default_minus_central_privsyn_pgm')}", "",
                  "| group | rung | 2-way L1 mean (sd) | pairs | diff (se) | share of gap |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            if r["method"] == "gaps":
                continue
            step = "step_diff" in r
            diff = r.get("step_diff" if step else "diff_vs_served")
            se = r.get("step_diff_se" if step else "diff_vs_served_se")
            share = r.get("share_of_gap_step" if step else "share_of_gap_alone")
            run = f" (run {r['run']})" if "run" in r else ""
            lines.append(
                f"| {r['group']}{run} | {r['method'].removeprefix('gap:')} | {r['mean']:.4f} "
                f"({r['sd']:.4f}) | {r['selected_pairs_mean']:.1f} | "
                + ("" if diff is None else f"{diff:+.4f} ({se:.4f}){' step' if step else ''}")
                + " | " + ("" if share is None else f"{share:+.0%}") + " |")
        lines.append("")
    return "\n".join(lines)


def merge(parts: list[Path], out: Path) -> None:
    """One summary from runs made separately (e.g. a table per process): every part's
    command, commit and machine are kept with its results."""
    docs = [json.loads(p.read_text()) for p in parts]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "what": docs[0]["what"],
        "command": " && ".join([d["command"] for d in docs]
                               + ["python experiments/gap_sources/bench_gap_sources.py "
                                  + shlex.join(sys.argv[1:])]),
        "runs": [{k: d[k] for k in ("command", "commit", "machine", "date")} for d in docs],
        "commit": docs[0]["commit"], "machine": docs[0]["machine"], "date": docs[0]["date"],
        "delta": docs[0]["delta"],
        "plans": [p for d in docs for p in d["plans"]],
        "results": [r for i, d in enumerate(docs) for r in _rerun_shares(d["results"], i)]},
        indent=1) + "\n")


def _rerun_shares(results: list[dict], run: int) -> list[dict]:
    """One part's results, marked with its run, their shares recomputed by :func:`shares`
    (per case)."""
    out = []
    for case in dict.fromkeys((r["table"], r["eps"]) for r in results):
        out += shares([{**r, "run": run} for r in results if (r["table"], r["eps"]) == case])
    return out


def _train_rows(csv: Path, schema: Schema) -> int:
    """The training rows of the runner's first repeat (its split: seed 0, repeat 0)."""
    from feddpsyn.params.table_codec import encode_csv

    records = encode_csv(csv, schema).records
    return int((np.random.default_rng([0, 0]).random(len(records)) >= 0.2).sum())


def plan_facts(table: str, schema: Schema, rows: int, eps: float, delta: float) -> list[dict]:
    """The numbers behind the factors at one (table, eps): each plan's rho_total, max_rows,
    conversion delta and noises (what the what-ifs change)."""
    out = []
    for name, cfg in [("served", SERVED), ("max_rows=rows", replace(SERVED, max_rows="rows")),
                      ("reserves=none", replace(SERVED, reserves="none"))]:
        plan = _plan(schema, rows, eps, delta, cfg)
        one, two, sel = plan.release("one_way"), plan.release("two_way"), plan.selection
        out.append({"table": table, "eps": eps, "rows": rows, "plan": name,
                    "rho_total": float(plan.rho_total), "max_rows": plan.max_rows,
                    "delta_conversion": plan.delta_conversion,
                    "delta_terms": plan.delta_terms(),
                    "one_way": {"rho": float(one.rho), "gaussian_sigma2": float(one.sigma2),
                                "variance": float(one.per_count_variance)},
                    "scores": {"rho": float(sel.rho), "gaussian_sigma2": float(sel.noise_sigma2),
                               "variance": float(sel.score_variance)},
                    "two_way_envelope": None if two.joint is None else
                    two.joint.label})
    out.append({"table": table, "eps": eps, "rows": rows, "plan": "central",
                "rho_total": float(curator_rho(schema, eps, delta))})
    out.append({"table": table, "eps": eps, "rows": rows, "plan": "gaussian-pld",
                "rho_total": float(gaussian_pld_rho(eps, delta))})
    return out


if __name__ == "__main__":
    main()
