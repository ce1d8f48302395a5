"""PrivSyn's consistency step (Zhang et al. 2021, Section 5): make noisy marginals agree.

1. A common total: the inverse-variance weighted mean of every marginal's total.
2. Attribute consistency: for each attribute, the inverse-variance weighted average of its
   projections from every marginal containing it; each marginal is then shifted (the
   difference spread evenly over the cells that project onto a value) to match it.
3. Non-negativity ("norm-sub"): negative cells are zeroed and the mass is taken evenly from
   the positive cells, keeping the total, repeated until no cell is negative.

Steps 2-3 are alternated a few times, since norm-sub can break consistency slightly.
All of this is post-processing: it costs no privacy.
"""

from __future__ import annotations

import numpy as np

from feddpsyn.synthesis.marginals import NoisyMarginal


def _project(m: NoisyMarginal, attr: int) -> np.ndarray:
    axis = m.attrs.index(attr)
    other = tuple(i for i in range(len(m.attrs)) if i != axis)
    return m.counts.sum(axis=other) if other else m.counts.copy()


def norm_sub(counts: np.ndarray, total: float, max_rounds: int = 100) -> np.ndarray:
    """Closest-in-spirit non-negative vector with the given total (PrivSyn's norm-sub)."""
    x = counts.astype(float).ravel().copy()
    if total <= 0:
        return np.zeros_like(counts, dtype=float)
    for _ in range(max_rounds):
        x = np.maximum(x, 0)
        positive = x > 0
        if not positive.any():
            x[:] = total / x.size
            break
        diff = (total - x.sum()) / positive.sum()
        x[positive] += diff
        if (x >= -1e-9).all():
            break
    x = np.maximum(x, 0)
    if x.sum() > 0:
        x *= total / x.sum()
    return x.reshape(counts.shape)


def make_consistent(marginals: list[NoisyMarginal], domain_sizes: tuple[int, ...],
                    rounds: int = 5) -> tuple[list[NoisyMarginal], float]:
    """Return consistent, non-negative copies of the marginals and the common total."""
    ms = [NoisyMarginal(m.attrs, m.counts.astype(float).copy(), m.variance) for m in marginals]
    weights = np.array([1 / (m.variance * m.counts.size) for m in ms])
    total = float(np.dot(weights, [m.total for m in ms]) / weights.sum())
    total = max(total, 1.0)
    for m in ms:
        m.counts += (total - m.total) / m.counts.size
    for _ in range(rounds):
        for attr in range(len(domain_sizes)):
            holders = [m for m in ms if attr in m.attrs]
            if len(holders) < 2:
                continue
            # A projection summing c cells has variance c * variance.
            w = np.array([1 / (m.variance * (m.counts.size // domain_sizes[attr]))
                          for m in holders])
            target = sum(wi * _project(m, attr) for wi, m in zip(w, holders)) / w.sum()
            for m in holders:
                axis = m.attrs.index(attr)
                per_value = m.counts.size // domain_sizes[attr]
                delta = (target - _project(m, attr)) / per_value
                shape = [1] * len(m.attrs)
                shape[axis] = domain_sizes[attr]
                m.counts += delta.reshape(shape)
        for m in ms:
            m.counts = norm_sub(m.counts, total)
    return ms, total
