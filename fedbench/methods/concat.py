"""``concat``: each client synthesizes its own rows with ``central-privsyn-all`` (every
2-way marginal, one noise) at the full budget and the outputs are concatenated (FedDPSyn's
motivating baseline, Section 1).

Each client's release is (eps, delta)-DP for its own records and the clients' data are
disjoint, so the union of outputs is (eps, delta)-DP by parallel composition; the cost is
noise that grows relative to each client's smaller counts.
"""

from __future__ import annotations

import numpy as np

from feddpsyn.fedbench.methods.base import MethodResult
from feddpsyn.fedbench.methods.central_privsyn_all import central_privsyn_all
from feddpsyn.params.schema import Schema


def concat(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
           delta: float, seed: int) -> MethodResult:
    parts, spent, budgets = [], [], []
    for client in np.unique(owner):
        result = central_privsyn_all(records[owner == client], owner[owner == client],
                                     schema, epsilon, delta, seed + int(client))
        parts.append(result.records)
        spent.append(result.rho_spent)
        budgets.append(result.rho_budget)
    # Parallel composition over disjoint clients: each owner's release is (eps, delta)-DP on
    # its own rows, so the cost is the largest single spend, against the largest budget
    # (each owner's plan is calibrated to the eps asked on its own table's plan).
    return MethodResult(np.concatenate(parts), max(spent), max(budgets))
