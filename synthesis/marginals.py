"""Noisy marginals as synthesis sees them: attribute indices, counts and their noise variance.

>>> m = NoisyMarginal((0,), np.array([3.0, 1.0]), variance=2.0)
>>> m.total
4.0
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from common import wire
from params.schema import Schema


@dataclass
class NoisyMarginal:
    attrs: tuple[int, ...]
    counts: np.ndarray  # shape = domain sizes of attrs
    variance: float  # per-cell noise variance of the released counts

    @property
    def total(self) -> float:
        return float(self.counts.sum())


def marginals_from_release(document: wire.ReleaseDocument) -> tuple[Schema, list[NoisyMarginal]]:
    """Read a release document; each count's noise variance is what its release states
    (``per_count_variance``: the joint noise's, or both servers' 2 sigma2), or what its
    marginal states where that differs (a split release's groups)."""
    schema = Schema.from_dict(document.schema_)
    index = {n: i for i, n in enumerate(schema.names)}
    out = []
    for release in document.releases:
        variance = (float(Fraction(release.per_count_variance))
                    if release.per_count_variance is not None
                    else 2 * float(Fraction(release.sigma2_per_server)))
        for marginal in release.marginals.values():
            attrs = tuple(index[a] for a in marginal.attrs)
            counts = np.asarray(marginal.counts, dtype=float).reshape(marginal.shape)
            own = (variance if marginal.per_count_variance is None
                   else float(Fraction(marginal.per_count_variance)))
            out.append(NoisyMarginal(attrs, counts, own))
    return schema, out
