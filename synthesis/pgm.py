"""Synthesis with Private-PGM (McKenna et al. 2019), the ``mbi`` package.

Each released marginal becomes an ``mbi.LinearMeasurement`` with the standard deviation of
its noise; ``MirrorDescent`` fits a graphical model; ``synthetic_data`` samples records.
"""

from __future__ import annotations

import numpy as np

from synthesis import _jax_compat  # noqa: F401  (must precede the mbi import)
from mbi import Domain, LinearMeasurement, estimation  # noqa: E402

from synthesis.marginals import NoisyMarginal  # noqa: E402


def fit_pgm(marginals: list[NoisyMarginal], domain_sizes: tuple[int, ...], rows: int,
            iters: int = 1000) -> np.ndarray:
    names = [f"a{i}" for i in range(len(domain_sizes))]
    domain = Domain(names, list(domain_sizes))
    measurements = [
        LinearMeasurement(np.asarray(m.counts, dtype=float).ravel(),
                          tuple(names[a] for a in m.attrs), stddev=float(np.sqrt(m.variance)))
        for m in marginals
    ]
    model = estimation.MirrorDescent().estimate(domain, measurements, iters=iters)
    data = model.synthetic_data(rows)
    return np.stack([np.asarray(data.to_dict()[n]) for n in names], axis=1).astype(np.int64)
