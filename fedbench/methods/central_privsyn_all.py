"""``central-privsyn-all``: a trusted curator on the union releasing *every* 2-way marginal.

Not PrivSyn: there is no selection (``central-privsyn`` is PrivSyn with its selection). Same
releases and budget split as our all-pairs federated protocol (``params.session_plan``, 0.2
of rho on the 1-ways, 0.8 on the 2-ways), one discrete Gaussian noise per count, then
consistency and GUM: ``feddpsyn-all`` with one noise in place of two.
"""

from __future__ import annotations

import numpy as np

from fedbench.methods.base import MethodResult, plan_budget
from params.schema import Schema
from params.session_plan import SessionPlan
from synthesis.central import central_marginals
from synthesis.synthesize import synthesize_records

DEFAULT_SPLIT = {"one_way": 0.2, "two_way": 0.8}


def central_privsyn_all(records: np.ndarray, owner: np.ndarray, schema: Schema,
                        epsilon: float, delta: float, seed: int) -> MethodResult:
    plan = SessionPlan.build(schema, None, epsilon, delta, DEFAULT_SPLIT, "default",
                             max_rows=max(len(records), 1), noise="two-server")
    noisy = central_marginals(plan, records)
    synth = synthesize_records(schema, noisy, "gum", None, np.random.default_rng(seed))
    spent = sum((r.rho for r in plan.releases), start=0 * plan.rho_total)
    return MethodResult(synth, spent, plan_budget(plan, epsilon, delta))
