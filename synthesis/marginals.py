"""Noisy marginals as synthesis sees them: attribute indices, counts and their noise variance.

A release may measure one marginal twice (a 1-way released before the selection, then topped
up by the 2-way release: ``params.run_time``); synthesis sees one measurement of it, the
two combined by inverse variance (:func:`combine_repeated`). Both noises are independent,
unbiased and of known variance, so the combination is the minimum-variance unbiased linear
estimate of the counts, and for Gaussian-like noises the sufficient statistic of the pair
(what Private-PGM's least squares on the two measurements would reach too).

>>> m = NoisyMarginal((0,), np.array([3.0, 1.0]), variance=2.0)
>>> m.total
4.0
>>> [(c.counts.tolist(), c.variance) for c in combine_repeated(
...     [m, NoisyMarginal((0,), np.array([6.0, 4.0]), variance=1.0)])]
[([5.0, 3.0], 0.6666666666666666)]
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from feddpsyn.common import wire
from feddpsyn.params.schema import Schema


@dataclass
class NoisyMarginal:
    attrs: tuple[int, ...]
    counts: np.ndarray  # shape = domain sizes of attrs
    variance: float  # per-cell noise variance of the released counts

    @property
    def total(self) -> float:
        return float(self.counts.sum())


def combine_repeated(marginals: list[NoisyMarginal]) -> list[NoisyMarginal]:
    """One measurement per attribute set, in first-seen order: a marginal measured more than
    once becomes the inverse-variance weighted mean of its measurements, of variance
    1 / sum(1 / variance_j) (module docstring); the others are returned as they are."""
    by_attrs: dict[tuple[int, ...], list[NoisyMarginal]] = {}
    for m in marginals:
        by_attrs.setdefault(tuple(m.attrs), []).append(m)
    out = []
    for attrs, measured in by_attrs.items():
        if len(measured) == 1:
            out.append(measured[0])
            continue
        weights = [1 / m.variance for m in measured]
        counts = sum(w * m.counts for w, m in zip(weights, measured, strict=True))
        out.append(NoisyMarginal(attrs, np.asarray(counts / sum(weights)), 1 / sum(weights)))
    return out


def marginals_from_release(document: wire.ReleaseDocument) -> tuple[Schema, list[NoisyMarginal]]:
    """Read a release document; each count's noise variance is what its release states
    (``per_count_variance``: the joint noise's, or both servers' 2 sigma2), or what its
    marginal states where that differs (a split release's groups); a marginal released
    twice (a 1-way's top-up) is read as one, its measurements combined
    (:func:`combine_repeated`)."""
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
    return schema, combine_repeated(out)
