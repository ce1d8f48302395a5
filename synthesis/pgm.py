"""Synthesis with Private-PGM (McKenna et al. 2019), the ``mbi`` package.

Private-PGM's cost grows with the junction tree of the measured cliques; with every 2-way
marginal measured, the tree is one clique over all attributes (for Adult, far beyond
memory). So, as post-processing of the released values (no privacy cost), we keep the 1-way
marginals and the 2-way marginals of a maximum spanning tree over the attributes, weighted by
each pair's dependence as estimated from its (consistent) noisy marginal -- the structure
MST (McKenna et al. 2021) uses, here chosen from already-released data. Each kept marginal
becomes an ``mbi.LinearMeasurement`` with its noise's standard deviation; ``MirrorDescent``
fits the model and ``synthetic_data`` samples records.
"""

from __future__ import annotations

import numpy as np

from synthesis import _jax_compat  # noqa: F401  (must precede the mbi import)
from mbi import Domain, LinearMeasurement, estimation  # noqa: E402

from synthesis.consistency import make_consistent  # noqa: E402
from synthesis.disjoint_sets import DisjointSets  # noqa: E402
from synthesis.marginals import NoisyMarginal  # noqa: E402


def dependence(m: NoisyMarginal) -> float:
    """L1 distance between a 2-way marginal and the product of its 1-way projections."""
    joint = np.maximum(m.counts, 0)
    total = joint.sum()
    if total <= 0:
        return 0.0
    joint = joint / total
    product = np.outer(joint.sum(axis=1), joint.sum(axis=0))
    return float(np.abs(joint - product).sum())


def spanning_tree(marginals: list[NoisyMarginal], n_attrs: int,
                  domain_sizes: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Kruskal's maximum spanning tree over the released pairs, by estimated dependence."""
    consistent, _ = make_consistent(marginals, domain_sizes)
    scored = sorted(((dependence(m), m.attrs) for m in consistent if len(m.attrs) == 2),
                    reverse=True)
    components = DisjointSets(n_attrs)
    edges = []
    for _, (a, b) in scored:
        if components.joins(a, b):
            components.union(a, b)
            edges.append((a, b))
    return edges


def fit_pgm(marginals: list[NoisyMarginal], domain_sizes: tuple[int, ...], rows: int,
            iters: int = 1000, keep_all: bool = False) -> np.ndarray:
    """Fit and sample. ``keep_all`` uses every given marginal (the caller already chose a
    tractable set, as MST does); otherwise 1-ways plus a maximum spanning tree of the pairs."""
    names = [f"a{i}" for i in range(len(domain_sizes))]
    domain = Domain(names, list(domain_sizes))
    keep = ({m.attrs for m in marginals} if keep_all
            else set(spanning_tree(marginals, len(domain_sizes), domain_sizes)))
    measurements = [
        LinearMeasurement(np.asarray(m.counts, dtype=float).ravel(),
                          tuple(names[a] for a in m.attrs), stddev=float(np.sqrt(m.variance)))
        for m in marginals if len(m.attrs) == 1 or m.attrs in keep
    ]
    model = estimation.MirrorDescent().estimate(domain, measurements, iters=iters)
    data = model.synthetic_data(rows)
    return np.stack([np.asarray(data.to_dict()[n]) for n in names], axis=1).astype(np.int64)
