"""The centralized baseline: the same releases computed on the union by one trusted curator.

Same layout, same per-release rho, but one discrete Gaussian noise per count (variance
sigma2) instead of the two independent noises of the two-server protocol: this is the
accuracy the federated protocol would have without its non-collusion cost.
"""

from __future__ import annotations

import numpy as np

from feddpsyn.dp.discrete_gaussian import discrete_gaussian_vector
from feddpsyn.params.session_plan import SessionPlan
from feddpsyn.synthesis.marginals import NoisyMarginal


def central_marginals(plan: SessionPlan, records: np.ndarray) -> list[NoisyMarginal]:
    counts = plan.layout.counts(records)
    out = []
    for spec in plan.releases:
        for slot in plan.slots_of(spec):
            noisy = counts[slot.offset:slot.offset + slot.size] + discrete_gaussian_vector(
                spec.sigma2, slot.size)
            out.append(NoisyMarginal(slot.attrs, noisy.reshape(slot.shape).astype(float),
                                     float(spec.sigma2)))
    return out
