"""AIM (McKenna, Mullins, Sheldon, Miklau 2022, "AIM: An Adaptive and Iterative Mechanism for
Differentially Private Synthetic Data"), with the data-touching steps behind an oracle.

Whoever holds the data -- in the clear (``PlainOracle``, central AIM), secret-shared
(DistAIM), federated -- implements ``MarginalOracle``: the two private steps of a round.

* ``measure(clique, sigma2) -> ndarray``: the clique's marginal counts (flat, C order over
  the clique's attributes in the given order) plus per-cell noise of variance ``sigma2``; the
  engine charges 1 / (2 sigma2) (L2 sensitivity 1 under add/remove of one record).
* ``select(candidates, model_answers, weights, sigma2, epsilon) -> int``: AIM's exponential
  mechanism over the quality scores
  q_r = w_r (||M_r(D) - model_answers[r]||_1 - sqrt(2/pi) sigma n_r)
  (n_r cells; sensitivity max_r w_r), returning the chosen index; the engine charges
  ``selection_rho(epsilon)`` (exact EM: eps^2 / 8) plus ``extra_delta`` per call (0 for an
  exact sampler; an approximate in-MPC sampler states its deviation there).
* ``selection_rho(epsilon) -> Fraction`` and attribute ``extra_delta: Fraction``.
* Data that grows by round (DistAIM with client participation p < 1, FLAIM paper,
  Algorithm 3: round t sees the clients joined so far) sets ``grows = True`` and adds
  ``measure_total(sigma2, scope) -> number`` (the count of records, "all" of them or the
  "current" round's, plus noise of variance ``sigma2``; charged 1 / (2 sigma2)) and
  ``advance() -> bool`` (move to the next round's data; True if it changed).

``aim(oracle, domain_sizes, workload, rho, ...)`` runs AIM's loop in plaintext around them:

1. workload completion (every non-empty subset of a workload clique is a candidate) and
   weights w_r = sum over workload cliques s of |r & s|;
2. 1-way initialisation: every 1-way candidate measured once at sigma_0;
3. each round: the model-size filter (candidates whose junction tree with the model's
   cliques stays within (rho_used / rho) * max_model_size_mb, or that lie inside a measured
   clique already), select, measure, re-estimate (Private-PGM's estimator until it
   converges, warm-started from the previous round's potentials and step: in numpy by
   default, ``synthesis.mirror_descent``, or ``mbi`` with ``backend="mbi"``), and, in AIM's
   mode, annealing: if the model's answer on the measured clique moved by at most
   sqrt(2/pi) sigma n_q, then sigma /= 2 and eps *= 2;
4. the final round: when the remaining budget is under twice one round's cost, or at
   ``max_rounds``, sigma and eps are set so that the round spends exactly the remainder
   (fraction ``alpha`` of it on the measurement, up to rounding eps down to a rational).
The ledger is exact (``Fraction``): it adds 1 / (2 sigma2) for every measurement and
``selection_rho(eps)`` for every selection and ends at exactly ``rho``.

Two modes, one per paper. ``rounds`` = None: AIM's own plan (McKenna et al. 2022: sigma_0
and eps_0 for T = 16 d rounds, annealing, the loop ends when the budget does); central AIM
and sessions created without ``rounds`` run it. ``rounds`` = T: FLAIM's fixed-T runs
(Maddock et al., Section 5 and Table 1: T = 10), sigma_0^2 = (T + n_1) / (2 alpha rho) and
eps_0^2 = 8 (1 - alpha) rho / T for the n_1 initial 1-ways plus T rounds, no annealing (FLAIM
reports annealing worse in the federated setting), so a plan for T rounds makes exactly T
selections (after t - 1 rounds (T - t + 1) rounds' cost remain, and the last round starts
when under two remain). ``max_rounds`` caps the loop (the last round then spends the rest).

Data that grows by round. With p < 1 the data of round t is a subset D_t of the union whose
size grows from ~pN; its raw counts would pull the model's total towards a mixture of sizes
and give every candidate's L1 score a pure size-mismatch term. So ``SIZE_SHARE`` (1%) of rho
pays for noisy sizes at sigma_s^2 = (T + 2) / (2 SIZE_SHARE rho): one of the union (N_hat,
the model's total) and one of each new D_t (n_t); every measurement of D_t is rescaled by
N_hat / n_t (its variance by the square: post-processing), the model is fitted with total
N_hat, and candidates are scored against the model's answers times n_t / N_hat, i.e. at the
size of the data being scored (as FLAIM's reference code, which rescales to n and scores
normalised marginals). With p = 1 nothing of this runs: the engine is central AIM's.

Fast model answers: M_r(model) for a candidate r not inside a model clique is computed here
in numpy by variable elimination on the fitted potentials (mbi's own projection is far
slower: about 0.3-0.9 s per clique on Adult against under 1 ms here, for ~120 candidates per
round); answers inside a clique are sums of the calibrated clique marginal. Estimation
defaults to the numpy estimator because ``mbi`` recompiles (about 2 s on this machine) every
time the clique set changes, i.e. every AIM round.

Deviations from AIM's reference defaults, stated: repeated measurements of one clique are
merged into their inverse-variance weighted mean before estimation (the same L2 objective up
to a constant, so PGM's optimum is unchanged; it keeps the model's compiled structure stable
across rounds); in AIM's mode each round's fit is capped at ``ANNEALING_ROUND_ITERS`` = 100
warm-started steps (AIM's reference code: a fixed 1,000 mbi iterations a round; FLAIM's
Appendix B.4: 100), FLAIM's fixed-T mode and the final fit run the estimator to its
convergence criterion (``round_iters`` / ``final_iters`` override both).

Why the per-round cap in AIM's mode: annealing halves sigma when the model's answer on the
clique just measured moved by at most the noise's expected L1, sqrt(2/pi) sigma n. A fit run
to convergence interpolates a newly measured clique, so it moves by about that much on every
new clique and annealing waits for re-measurements: the budget goes to more, noisier rounds,
each fit taking hundreds to thousands of steps. Measured (Adult's first 8 attributes,
eps 0.5, 2-way workload, 0.25 MB cap, seed 1,
``experiments/central_aim_fit/bench_central_aim_fit.py``): converged every round, 24
rounds, first annealing at round 12, 2-way error 0.091; 100 steps a round, 19 rounds, first
annealing at round 8, 0.068 (0.072 and 0.075 for seeds 2 and 3).

Privacy: rho-zCDP (plus ``delta_spent`` = the sum of the oracle's extra deltas) under
add/remove of one record, by adaptive composition of the oracle's measurements and
selections; everything else -- the model, its answers, the filters, annealing -- is
post-processing of released values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol

import numpy as np

from feddpsyn.dp.discrete_gaussian import CSPRNG, ExactSampler
from feddpsyn.dp.exponential_mechanism import em_rho, exponential_mechanism
from feddpsyn.params.layout import completion  # AIM's candidates (re-exported: fedbench, benches)
from feddpsyn.synthesis.graphical_model import (
    Clique,
    GraphicalModel,
    cells,
    marginal_counts,
    model_size_mb,
)
from feddpsyn.synthesis.marginals import NoisyMarginal

SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_GRID = 2 ** 20  # public values (model answers, penalties) are rounded to multiples of 2^-20
SIZE_SHARE = Fraction(1, 100)  # of rho, for the noisy sizes of data that grows by round
ALPHA = Fraction(9, 10)        # of a round's budget, on its measurement (AIM's alpha)
ANNEALING_ROUND_ITERS = 100    # estimator steps a round in AIM's mode (module docstring)


class MarginalOracle(Protocol):
    """The two private steps of an AIM round, implemented by whoever holds the data."""

    extra_delta: Fraction  # added to the ledger's delta per ``select`` call (0 if exact)

    def measure(self, clique: Clique, sigma2: Fraction) -> np.ndarray:
        ...

    def select(self, candidates: list[Clique], model_answers: list[np.ndarray],
               weights: list[Fraction], sigma2: Fraction, epsilon: Fraction) -> int:
        ...

    def selection_rho(self, epsilon: Fraction) -> Fraction:
        ...


# --------------------------------------------------------------------------- workload


def workload_weights(candidates: Sequence[Clique], workload: Sequence[Clique]) -> list[Fraction]:
    """AIM's w_r = sum over workload cliques s of |r & s|."""
    sets = [set(s) for s in workload]
    return [Fraction(sum(len(set(r) & s) for s in sets)) for r in candidates]


# --------------------------------------------------------------------------- budget helpers


def eps_within(target: Fraction, selection_rho: Callable[[Fraction], Fraction]) -> Fraction:
    """The largest eps on a 2^-40 grid (found by a bounded search) with
    selection_rho(eps) <= target, assuming selection_rho grows with eps like eps^2."""
    if target <= 0:
        raise ValueError("no selection budget left")
    grid = 2 ** 40
    guess = math.sqrt(8 * float(target))
    for _ in range(4):  # correct the eps^2/8 guess for mechanisms with other constants
        charge = float(selection_rho(Fraction(guess)))
        guess *= math.sqrt(float(target) / charge)
    eps = Fraction(math.floor(guess * grid), grid)
    for _ in range(10_000):
        if eps > 0 and selection_rho(eps) <= target:
            return eps
        eps = Fraction(math.floor(eps * grid * (1 - 1e-9)) - 1, grid)
    raise ArithmeticError("could not fit eps under the selection budget")


# --------------------------------------------------------------------------- the engine


@dataclass
class RoundLog:
    clique: Clique
    sigma2: Fraction
    epsilon: Fraction | None  # None for the initial 1-way measurements
    annealed: bool = False
    final: bool = False


@dataclass
class AimResult:
    measurements: list[NoisyMarginal]
    rho_spent: Fraction
    delta_spent: Fraction
    selected: list[Clique]  # one per selection round, in order
    rounds: list[RoundLog]
    model: GraphicalModel
    notes: dict = field(default_factory=dict)
    rng: np.random.Generator | None = None

    def synthesize(self, rows: int | None = None) -> np.ndarray:
        """Records from the model (its total's worth by default)."""
        return self.model.sample(rows, self.rng)


def aim(oracle: MarginalOracle, domain_sizes: Sequence[int], workload: Sequence[Clique],
        rho: Fraction, *, max_model_size_mb: float = 80.0, max_rounds: int = 1000,
        rounds: int | None = None, alpha: Fraction = ALPHA,
        round_iters: int | None = None, final_iters: int | None = None,
        backend: str = "numpy", rng: np.random.Generator | None = None,
        say: Callable[[str], None] = lambda _: None) -> AimResult:
    """Run AIM; see the module docstring. ``rng`` is the non-private generator kept in the
    result for sampling records (the oracle owns all private randomness). ``rounds`` = None
    is AIM's own plan with annealing (AIM paper); ``rounds`` = T is FLAIM's fixed-T plan
    without annealing (exactly T selections when ``max_rounds`` >= T). ``round_iters`` and
    ``final_iters`` cap the estimator's iterations (default: ``ANNEALING_ROUND_ITERS`` a
    round in AIM's mode, else until converged)."""
    rho = Fraction(rho)
    if rho <= 0:
        raise ValueError("rho must be > 0")
    if max_rounds < 1 or (rounds is not None and rounds < 1):
        raise ValueError("max_rounds and rounds must be >= 1")
    sizes = tuple(int(s) for s in domain_sizes)
    candidates_all = completion(workload)
    weights_all = workload_weights(candidates_all, workload)
    one_ways = [c for c in candidates_all if len(c) == 1]
    d = len(sizes)
    anneal = rounds is None
    if anneal and round_iters is None:
        round_iters = ANNEALING_ROUND_ITERS
    planned = 16 * d if rounds is None else rounds
    grows = bool(getattr(oracle, "grows", False))
    # data that grows by round: a reserve for the noisy sizes (union, then one per data set)
    size_budget = SIZE_SHARE * rho if grows else Fraction(0)
    size_counts = planned + 2
    sigma2_size = Fraction(size_counts) / (2 * size_budget) if grows else None
    marginal_budget = rho - size_budget
    if rounds is None:
        sigma2 = Fraction(16 * d) / (2 * alpha * marginal_budget)
        eps = eps_within((1 - alpha) * marginal_budget / (16 * d), oracle.selection_rho)
    else:
        sigma2 = Fraction(rounds + len(one_ways)) / (2 * alpha * marginal_budget)
        eps = eps_within((1 - alpha) * marginal_budget / rounds, oracle.selection_rho)

    used = Fraction(0)
    delta_spent = Fraction(0)
    measurements: list[NoisyMarginal] = []
    log: list[RoundLog] = []
    sizes_log: list[float] = []
    if len(one_ways) / (2 * sigma2) + size_budget >= rho:  # checked before anything is measured
        raise ValueError("the 1-way initialisation alone would exhaust the budget")

    def noisy_size(scope: str) -> float:
        nonlocal used
        value = float(oracle.measure_total(sigma2_size, scope))
        used += 1 / (2 * sigma2_size)
        sizes_log.append(value)
        return max(value, 1.0)

    # the union's noisy size is the model's total; each data set's rescales its measurements
    union = noisy_size("all") if grows else None
    current = noisy_size("current") if grows else None
    scale = union / current if grows else 1.0

    def record(clique: Clique, y, var: Fraction) -> None:
        counts = np.asarray(y, dtype=float).reshape([sizes[a] for a in clique])
        measurements.append(NoisyMarginal(clique, counts * scale, float(var) * scale ** 2))

    for clique in one_ways:
        y = oracle.measure(clique, sigma2)
        used += 1 / (2 * sigma2)
        record(clique, y, sigma2)
        log.append(RoundLog(clique, sigma2, None))
    model = GraphicalModel(sizes, backend)
    model.fit(measurements, round_iters, total=union)
    selected: list[Clique] = []
    size_cache: dict[frozenset, float] = {}

    for t in range(1, max_rounds + 1):
        if grows and len(sizes_log) < size_counts and oracle.advance():
            current = noisy_size("current")
            scale = union / current
        remaining = rho - used
        final = t == max_rounds or remaining < 2 * (1 / (2 * sigma2) + oracle.selection_rho(eps))
        if final:
            eps = eps_within((1 - alpha) * remaining, oracle.selection_rho)
            sigma2 = 1 / (2 * (remaining - oracle.selection_rho(eps)))
        limit = float(used / rho) * max_model_size_mb
        pool, weights = [], []
        for c, w in zip(candidates_all, weights_all):
            key = frozenset(model.cliques + [c])
            if key not in size_cache:
                size_cache[key] = model_size_mb(list(key), sizes)
            if size_cache[key] <= limit or any(set(c) <= set(m) for m in model.cliques):
                pool.append(c)
                weights.append(w)
        # the scores compare the oracle's current data with the model at that data's size
        answers = [model.answer(c) / scale for c in pool]
        pick = oracle.select(pool, answers, weights, sigma2, eps)
        used += oracle.selection_rho(eps)
        delta_spent += Fraction(getattr(oracle, "extra_delta", 0))
        clique = pool[pick]
        y = oracle.measure(clique, sigma2)
        used += 1 / (2 * sigma2)
        if used > rho:
            raise AssertionError("AIM ledger exceeded its budget")  # cannot happen; fail closed
        before = answers[pick] * scale
        record(clique, y, sigma2)
        selected.append(clique)
        model.fit(measurements, final_iters if final else round_iters, total=union)
        entry = RoundLog(clique, sigma2, eps, final=final)
        log.append(entry)
        say(f"[aim] round {t}: {clique} sigma={math.sqrt(sigma2):.1f} eps={float(eps):.4f} "
            f"rho used {float(used / rho):.3f}")
        if final:
            break
        if not anneal:
            continue
        moved = float(np.abs(model.answer(clique) - before).sum())
        if moved <= SQRT_2_OVER_PI * math.sqrt(sigma2) * scale * cells(clique, sizes):
            sigma2, eps = sigma2 / 4, 2 * eps
            entry.annealed = True
    if used != rho:
        raise AssertionError(f"AIM ended with {used} of {rho} spent")  # final round spends rest
    return AimResult(measurements, used, delta_spent, selected, log, model,
                     notes={"rounds": len(selected), "noisy_sizes": sizes_log},
                     rng=rng if rng is not None else np.random.default_rng())


# --------------------------------------------------------------------------- central oracle


class PlainOracle:
    """Central AIM's oracle: the union in the clear, exact discrete Gaussian noise
    (``dp.discrete_gaussian``) and the exact exponential mechanism
    (``dp.exponential_mechanism``), charged eps^2 / 8.

    Scores are exact rationals: counts are integers and the public parts (model answers and
    the sqrt(2/pi) sigma n_r penalty) are rounded to multiples of 2^-20 -- post-processing of
    public values, so each score still moves by at most w_r when one record is added or
    removed."""

    extra_delta = Fraction(0)

    def __init__(self, records: np.ndarray, domain_sizes: Sequence[int],
                 sampler: ExactSampler = CSPRNG):
        self.records = np.asarray(records, dtype=np.int64)
        self.domain_sizes = tuple(int(s) for s in domain_sizes)
        self.sampler = sampler
        self._counts: dict[Clique, np.ndarray] = {}

    def counts(self, clique: Clique) -> np.ndarray:
        if clique not in self._counts:
            self._counts[clique] = marginal_counts(self.records, clique, self.domain_sizes)
        return self._counts[clique]

    def measure(self, clique: Clique, sigma2: Fraction) -> np.ndarray:
        counts = self.counts(clique)
        return counts + self.sampler.discrete_gaussian_vector(Fraction(sigma2), len(counts))

    def scores(self, candidates, model_answers, weights, sigma2) -> list[Fraction]:
        return exact_scores([self.counts(c) for c in candidates], model_answers, weights,
                            sigma2)

    def select(self, candidates, model_answers, weights, sigma2, epsilon) -> int:
        scores = self.scores(candidates, model_answers, weights, sigma2)
        return exponential_mechanism(scores, Fraction(epsilon), max(weights), self.sampler)

    def selection_rho(self, epsilon: Fraction) -> Fraction:
        return em_rho(epsilon)


def exact_scores(counts: Sequence[np.ndarray], model_answers: Sequence[np.ndarray],
                 weights: Sequence[Fraction], sigma2: Fraction,
                 extra: Sequence[Fraction] | None = None) -> list[Fraction]:
    """AIM's q_r = w_r (||x_r - m_r||_1 - sqrt(2/pi) sigma n_r - extra_r) with integer counts
    x_r and the public m_r and penalty on the 2^-20 grid: exact rationals."""
    sigma = math.sqrt(float(sigma2))
    out = []
    for i, (x, m, w) in enumerate(zip(counts, model_answers, weights)):
        m_grid = np.rint(np.asarray(m, dtype=float) * _GRID).astype(np.int64)
        l1 = int(np.abs(np.asarray(x, dtype=np.int64) * _GRID - m_grid).sum())
        penalty = round(SQRT_2_OVER_PI * sigma * len(m_grid) * _GRID)
        score = Fraction(l1 - penalty, _GRID)
        if extra is not None:
            score -= extra[i]
        out.append(Fraction(w) * score)
    return out
