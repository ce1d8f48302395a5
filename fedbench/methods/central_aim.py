"""``central-aim``: AIM (McKenna et al. 2022) on the union, by a trusted curator.

``synthesis.aim`` with ``PlainOracle``: exact discrete Gaussian measurements, the exact
exponential mechanism (charged eps^2 / 8 as in AIM), Private-PGM (``mbi``) for the model.
Workload: every 2-way marginal (the benchmark's main metric), so the candidates are all
pairs and all 1-ways with AIM's weights.

Deviations from AIM's defaults, for the benchmark's time budget (about 36 runs per method on
Adult): the loop is capped at ``MAX_ROUNDS`` selection rounds and the budget is planned for
that many (sigma_0^2 = (T + d) / (2 * 0.9 * rho), eps_0^2 = 8 * 0.1 * rho / T instead of
AIM's T = 16 d with early annealing); annealing still halves sigma when a measurement barely
moves the model, and the last round spends the exact remainder. The estimator runs
``ROUND_ITERS`` mirror-descent iterations per round and ``FINAL_ITERS`` at the end (AIM: 1000
and more); no model-size limit binds on Adult's pairs (80 MB default kept).

Privacy: rho-zCDP with rho = budget_rho(eps, delta) under add/remove of one record of the
union, by the engine's exact ledger (``AimResult.rho_spent`` equals rho).
"""

from __future__ import annotations

import itertools

import numpy as np

from crypto.discrete_gaussian import CSPRNG
from fedbench.methods.base import MethodResult, budget_rho
from params.schema import Schema
from synthesis.aim import PlainOracle, aim

MAX_ROUNDS = 10
ROUND_ITERS = 100
FINAL_ITERS = 1000


def central_aim(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                delta: float, seed: int) -> MethodResult:
    del owner, seed  # the union in the clear; private noise comes from the OS CSPRNG
    rho = budget_rho(epsilon, delta)
    sizes = schema.domain_sizes
    workload = list(itertools.combinations(range(len(sizes)), 2))
    result = aim(PlainOracle(records, sizes, CSPRNG), sizes, workload, rho,
                 max_rounds=MAX_ROUNDS, rounds=MAX_ROUNDS, round_iters=ROUND_ITERS,
                 final_iters=FINAL_ITERS)
    synth = result.model.sample()  # as many rows as the model's (noisy) total
    return MethodResult(synth, result.rho_spent, rho,
                        notes={"selected": result.selected,
                               "annealed": sum(r.annealed for r in result.rounds)})
