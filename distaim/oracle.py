"""DistAIM's ``MarginalOracle``: AIM's select and measure steps inside MPyC on the servers'
aggregated shares (FLAIM paper, Algorithm 3, lines 6-7); only the chosen index and the noisy
marginal are opened.

Every server runs ``synthesis.aim.aim`` with its own ``MpcOracle``; the engine's plaintext
parts (model fitting, filters, annealing) are post-processing of opened values, so the three
servers follow the same path. The public inputs of a secure step (candidates, weights, the
model's answers) are taken from party 0 by a transfer, so that floating-point differences
between machines can never desynchronise the MPC programs.

Scores. AIM's q_r = w_r (||x_r - m_r||_1 - sqrt(2/pi) sigma n_r) is computed as the integer
S_r = w_r sum_i |2^g x_ri - round(2^g m_ri)| - round(w_r sqrt(2/pi) sigma n_r 2^g), with
one secure absolute value per cell. Its cost is linear in the operands' width,
log2(rows_bound) + g + 2 bits: sessions use g = 0 (``distaim.plan``; 0.75x the select time
of g = 8, the oracle's default, at the same workload error on Adult: rounding a public
answer moves a cell's term by at most 1/2, next to a penalty of sqrt(2/pi) sigma >= 8;
``experiments/distaim_mpc/bench_distaim_speedup.py``). Rounding *public* model answers keeps the
sensitivity (triangle inequality), so S has sensitivity max_r w_r 2^g exactly and the
exponential mechanism over S with parameter eps is an exact AIM selection step up to the
sampler's counted deviation (``distaim.secure_selection``).

Accounting. ``selection_rho(eps)`` = eps^2 / 8 (bounded range), as central AIM.
``extra_delta`` (read by the engine after each ``select``) is (1 + e^eps_total) times the
selection's TV bound; the measurements' TV bounds are summed in ``measure_tv`` and reported
by the runner as a further (1 + e^eps_total) * measure_tv of delta (the engine charges extra
delta per selection only).
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np

from feddpsyn.distaim.secure_noise import GaussianPlan, secure_discrete_gaussian
from feddpsyn.distaim.secure_selection import SelectionPlan, secure_exponential_mechanism
from feddpsyn.dp.exponential_mechanism import em_rho
from feddpsyn.params.layout import MarginalLayout

__all__ = ["MpcOracle", "SCORE_GRID_BITS", "score_penalty"]

SCORE_GRID_BITS = 8
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def score_penalty(weight: int, sigma: float, cells: int, grid_bits: int = SCORE_GRID_BITS) -> int:
    """round(w sqrt(2/pi) sigma n 2^g): the public part of a score (any rounding is fine)."""
    return round(weight * _SQRT_2_OVER_PI * sigma * cells * (1 << grid_bits))


class MpcOracle:
    def __init__(self, rt, secint, em_secint, totals, layout: MarginalLayout,
                 epsilon_total: float, rows_bound: int = 1 << 20, totals_at_round=None,
                 score_grid_bits: int = SCORE_GRID_BITS, grows: bool = False):
        self.rt, self.secint, self.em_secint = rt, secint, em_secint
        self.totals = totals                       # secure array: sum of all clients' vectors
        self.layout = layout
        self.offsets = layout.offsets
        self.tv_to_delta = Fraction(1) + Fraction(math.exp(epsilon_total) * (1 + 1e-12))
        self.rows_bound = rows_bound               # public bound on any summed count
        if not 0 <= score_grid_bits <= SCORE_GRID_BITS:
            raise ValueError(f"score_grid_bits in [0, {SCORE_GRID_BITS}]")
        self.grid_bits = score_grid_bits           # g: the secure abs width grows with it
        self.extra_delta = Fraction(0)
        self.measure_tv = Fraction(0)
        self.select_tv = Fraction(0)
        self.timings: list[dict] = []
        # With client participation p < 1 the data grows by round: totals_at_round(t) is the
        # secure sum of the clients joined by round t (round 0: the 1-way initialisation),
        # totals_at_round(None) that of every admitted client; ``grows`` tells the engine
        # (``synthesis.aim``) to rescale by noisy sizes and to call ``advance``.
        self.totals_at_round = totals_at_round
        self.grows = bool(grows and totals_at_round is not None)
        self.round = 0
        if totals_at_round is not None:
            self.totals = totals_at_round(0)

    def _public(self, value):
        """Party 0's copy of a public value (see the module docstring)."""
        if len(self.rt.parties) == 1:
            return value
        return self.rt.run(self.rt.transfer(value, senders=[0]))[0]

    def measure(self, clique, sigma2: Fraction) -> np.ndarray:
        start, cpu = time.time(), time.process_time()
        clique = tuple(clique)
        offset, n = self.offsets[clique]
        plan = GaussianPlan.for_sigma2(Fraction(sigma2))
        cells = self.totals[offset:offset + n]
        noisy = cells + secure_discrete_gaussian(self.rt, self.secint, plan, n)
        values = np.array([int(v) for v in self.rt.run(self.rt.output(noisy))], dtype=np.int64)
        self.measure_tv += n * plan.tv_bound
        self.timings.append({"step": "measure", "clique": list(clique), "cells": n,
                             "levels": len(plan.levels), "started_at": start,
                             "seconds": time.time() - start,
                             "cpu_seconds": time.process_time() - cpu})
        return values

    def advance(self) -> bool:
        """The next round's data (the clients joined by then); True if it changed."""
        self.round += 1
        previous, self.totals = self.totals, self.totals_at_round(self.round)
        return self.totals is not previous

    def measure_total(self, sigma2: Fraction, scope: str) -> int:
        """The number of records ("all" admitted clients' or the "current" round's) plus
        discrete Gaussian noise: the sum of the first 1-way marginal's cells (every client's
        marginals sum to its row count, ``distaim.validation``), sensitivity 1."""
        start, cpu = time.time(), time.process_time()
        data = self.totals_at_round(None) if scope == "all" else self.totals
        first = next(c for c in self.layout.cliques if len(c) == 1)
        offset, n = self.offsets[first]
        plan = GaussianPlan.for_sigma2(Fraction(sigma2))
        count = self.rt.np_sum(data[offset:offset + n])
        noisy = count + secure_discrete_gaussian(self.rt, self.secint, plan, 1)[0]
        value = int(self.rt.run(self.rt.output(noisy)))
        self.measure_tv += plan.tv_bound
        self.timings.append({"step": "size", "scope": scope, "started_at": start,
                             "seconds": time.time() - start,
                             "cpu_seconds": time.process_time() - cpu})
        return value

    def select(self, candidates, model_answers, weights, sigma2, epsilon) -> int:
        start, cpu = time.time(), time.process_time()
        g = self.grid_bits
        public = self._public({
            "candidates": [tuple(c) for c in candidates],
            "weights": [int(Fraction(w)) for w in weights],
            "answers": [np.rint(np.asarray(m, dtype=float).ravel() * (1 << g)).astype(
                np.int64).tolist() for m in model_answers],
            "sigma2": Fraction(sigma2), "epsilon": Fraction(epsilon)})
        cands, wts = public["candidates"], public["weights"]
        if any(Fraction(w) != int(Fraction(w)) for w in weights):
            raise ValueError("AIM weights must be integers")
        scores, cells = self.secure_scores(cands, public["answers"], wts, public["sigma2"])
        plan = SelectionPlan.build(public["epsilon"], max(wts) << g, len(cands))
        secret = secure_exponential_mechanism(self.rt, scores, plan, self.em_secint)
        pick = int(self.rt.run(self.rt.output(secret)))
        self.select_tv += plan.tv_bound
        self.extra_delta = self.tv_to_delta * plan.tv_bound
        self.timings.append({"step": "select", "candidates": len(cands), "cells": cells,
                             "started_at": start, "seconds": time.time() - start,
                             "cpu_seconds": time.process_time() - cpu})
        return pick

    def secure_scores(self, cands, answers_on_grid, wts, sigma2):
        """Secret integer scores S_r (see the module docstring) and the number of cells."""
        g = self.grid_bits
        index = np.concatenate([np.arange(self.offsets[c][0], self.offsets[c][0]
                                          + self.offsets[c][1]) for c in cands])
        model = np.concatenate([np.asarray(a, dtype=object) for a in answers_on_grid])
        diff = self.totals[index] * (1 << g) - model
        # admitted clients' counts lie in [0, rows_bound] (distaim.validation); model
        # answers are public, so the operands' width is known without looking at the data
        width = max(self.rows_bound << g, int(np.abs(model).max(initial=0))).bit_length() + 2
        absolute = self.rt.np_absolute(diff, l=width)
        sigma = math.sqrt(float(sigma2))
        scores, pos = [], 0
        for c, w in zip(cands, wts):
            n = self.offsets[c][1]
            scores.append(self.rt.np_sum(absolute[pos:pos + n]) * w - score_penalty(w, sigma, n, g))
            pos += n
        return self.rt.np_fromlist(scores), int(len(index))

    def selection_rho(self, epsilon: Fraction) -> Fraction:
        return em_rho(epsilon)
