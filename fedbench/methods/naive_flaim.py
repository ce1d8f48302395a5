"""``naive-flaim``: NaiveFLAIM (Maddock et al., FLAIM, Algorithm 1, "Naive" branch).

Each sampled client selects a marginal with AIM's exponential mechanism on its own data and
unaugmented local scores; the chosen marginals are summed by secure aggregation, the server
adds the Gaussian noise and re-fits the global Private-PGM model. The loop, its accounting
and every deviation from the paper are in ``fedbench.methods.flaim``; defaults: T = 10
rounds, p = 1, s = 1, 2-way workload.

Privacy: rho-zCDP (rho = budget_rho(eps, delta)) under add/remove of one record of the union,
by the loop's exact ledger (asserted equal to rho).
"""

from __future__ import annotations

import numpy as np

from feddpsyn.dp.discrete_gaussian import CSPRNG
from feddpsyn.fedbench.methods.base import MethodResult, budget_rho
from feddpsyn.fedbench.methods.flaim import flaim
from feddpsyn.params.schema import Schema


def naive_flaim(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                delta: float, seed: int) -> MethodResult:
    rho = budget_rho(epsilon, delta)
    result = flaim(records, owner, schema.domain_sizes, rho, "naive", seed=seed,
                   sampler=CSPRNG)
    return MethodResult(result.records, result.rho_spent, rho, result.bytes_per_client,
                        notes={"selected": result.selected})
