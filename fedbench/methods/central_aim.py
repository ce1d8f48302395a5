"""``central-aim``: AIM (McKenna et al. 2022) on the union, by a trusted curator.

``synthesis.aim`` with ``PlainOracle``: exact discrete Gaussian measurements, the exact
exponential mechanism (charged eps^2 / 8 as in AIM), Private-PGM (numpy mirror descent,
``synthesis.mirror_descent``) for the model.
Workload: every 2-way marginal (the benchmark's main metric), so the candidates are all
pairs and all 1-ways with AIM's weights.

AIM's own budget plan is kept (T = 16 d: sigma_0^2 = 16 d / (2 * 0.9 * rho),
eps_0^2 = 8 * 0.1 * rho / (16 d), annealing, the last round spends the exact remainder).
Deviations, for the benchmark's time budget (about 36 runs per method on Adult): the model
size limit is ``MAX_MODEL_MB`` = 0.25 MB instead of AIM's 80 MB (the numpy estimator's cost
grows with the junction tree's cells; measured on Adult at eps = 1 with 200 iterations per
round: 0.25 MB, 12 s, 2-way error 0.042; 1 MB, 56 s, 0.037, with the former fixed-count
estimator; ``central-aim-4mb`` runs at 4 MB), and the loop is capped at ``MAX_ROUNDS``
selection rounds (the cap's round spends the remainder).

Each round's fit is capped at ``synthesis.aim.ANNEALING_ROUND_ITERS`` = 100 warm-started
estimator steps (the engine's rule in AIM's mode; AIM's reference code runs a fixed 1,000 mbi
iterations a round) and the final fit at ``FINAL_ITERS`` = 2,500 (the reference's final
``engine.iters``). Fits run to convergence every round made annealing wait (the engine's
docstring has why) and cost 250-2,170 s a run over the benchmark's eps grid, at 2-way error
0.0862 (eps 0.5) against 0.0656 before the converging estimator.

Privacy: rho-zCDP with rho = budget_rho(eps, delta) under add/remove of one record of the
union, by the engine's exact ledger (``AimResult.rho_spent`` equals rho).
"""

from __future__ import annotations

import itertools

import numpy as np

from dp.discrete_gaussian import CSPRNG
from fedbench.methods.base import MethodResult, budget_rho
from params.schema import Schema
from synthesis.aim import PlainOracle, aim
from synthesis.pgm import DEFAULT_MAX_MODEL_MB

MAX_ROUNDS = 60
MAX_MODEL_MB = 0.25
FINAL_ITERS = 2500    # estimator steps after the last round (AIM's reference: 2,500)


def central_aim(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                delta: float, seed: int, max_model_mb: float = MAX_MODEL_MB) -> MethodResult:
    del owner  # the union in the clear; private noise comes from the OS CSPRNG
    rho = budget_rho(epsilon, delta)
    sizes = schema.domain_sizes
    workload = list(itertools.combinations(range(len(sizes)), 2))
    result = aim(PlainOracle(records, sizes, CSPRNG), sizes, workload, rho,
                 max_model_size_mb=max_model_mb, max_rounds=MAX_ROUNDS,
                 final_iters=FINAL_ITERS)
    # as many rows as the model's (noisy) total; record sampling is post-processing
    synth = result.model.sample(None, np.random.default_rng(seed))
    return MethodResult(synth, result.rho_spent, rho,
                        notes={"selected": result.selected,
                               "selected_pairs": result.selected,
                               "annealed": sum(r.annealed for r in result.rounds)})


def central_aim_4mb(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                    delta: float, seed: int) -> MethodResult:
    """``central-aim-4mb``: central AIM with a 4 MB model, the size ``synthesis.pgm`` fits
    (``DEFAULT_MAX_MODEL_MB``): the like-for-like central baseline of the ``-pgm`` methods,
    whose estimate is a graphical model of that size."""
    return central_aim(records, owner, schema, epsilon, delta, seed, DEFAULT_MAX_MODEL_MB)
