"""``augflaim-private``: AugFLAIM (private) (Maddock et al., FLAIM, Algorithm 1 and
Section 4.3).

As NaiveFLAIM, but each client's local scores subtract the private heterogeneity proxy
tau_k(q) = (1/|q|) sum_{j in q} ||M_j(D_k) - M_j(model)||_1 (with the exponential mechanism's
sensitivity doubled), 1-way marginals leave the local choices and are instead aggregated
from every participant in every round (filtering and combining), and the server weights each
aggregated marginal by the (noisy) number of records behind it. Loop, accounting and
deviations: ``fedbench.methods.flaim``; defaults: T = 10 rounds, p = 1, s = 1, 2-way workload.

Privacy: rho-zCDP (rho = budget_rho(eps, delta)) under add/remove of one record of the union,
by the loop's exact ledger (asserted equal to rho).
"""

from __future__ import annotations

import numpy as np

from feddpsyn.dp.discrete_gaussian import CSPRNG
from feddpsyn.fedbench.methods.base import MethodResult, budget_rho
from feddpsyn.fedbench.methods.flaim import flaim
from feddpsyn.params.schema import Schema


def augflaim_private(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                     delta: float, seed: int) -> MethodResult:
    rho = budget_rho(epsilon, delta)
    result = flaim(records, owner, schema.domain_sizes, rho, "private", seed=seed,
                   sampler=CSPRNG)
    return MethodResult(result.records, result.rho_spent, rho, result.bytes_per_client,
                        notes={"selected": result.selected})
