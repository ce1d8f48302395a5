"""``central-mst``: MST (McKenna, Miklau, Sheldon 2021) on the union, by a trusted curator.

MST in three thirds of rho, as the paper's mechanism does:

1. every 1-way marginal, Gaussian noise (d marginals share rho / 3: sigma^2 = d / (2 rho/3));
   then **domain compression**: per attribute, the values whose noisy count is below
   3 sigma are merged into one value (kept as is when at most one value is rare); the merged
   value's measurement is the sum of the rare values' noisy counts, divided by sqrt(#rare)
   so that it carries the same noise scale (``mbi.LinearMeasurement.compress``). The
   records are mapped to the compressed domain (post-processing of the noisy 1-ways);
2. a maximum spanning tree over attribute pairs, grown Kruskal-style: each of the d - 1
   edges is chosen among the pairs joining two components by the **exponential mechanism**
   with eps = sqrt(8 (rho/3) / (d - 1)) (rounded down to a rational), charged eps^2 / 8
   (bounded range, Cesar and Rogers 2021, as MST charges it). Score: L1 distance between
   the pair's true 2-way marginal (compressed domain) and the product of the noisy 1-ways
   (sensitivity 1 under add/remove: the product is public, one record moves one cell);
3. the tree's 2-way marginals, Gaussian noise, taking the exact remainder of rho (so the
   method spends exactly its budget: only the EM's rounding of eps goes there);

then Private-PGM (``mbi`` mirror descent) with **5000 iterations** (MST's final estimate),
sampling, and the compression undone (a merged value becomes one of its original values,
uniformly, as MST does).

Deviations, stated: noise is the exact discrete Gaussian; the EM is sampled exactly
(``dp.exponential_mechanism``); the selection's model is the product of the clipped noisy
1-ways on the compressed domain (the maximum-entropy fit of 1-ways alone, which MST obtains
by 1000 iterations of Private-PGM); its cells are rounded to multiples of 2^-20 (public) so
every score is an exact rational and the sensitivity is exactly 1.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from feddpsyn.dp.discrete_gaussian import discrete_gaussian_vector
from feddpsyn.dp.exponential_mechanism import em_rho, exponential_mechanism
from feddpsyn.fedbench.methods.base import MethodResult, budget_rho
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.schema import Schema
from feddpsyn.synthesis.disjoint_sets import DisjointSets

FIT_ITERATIONS = 5000  # MST's final Private-PGM estimate
RARE_SIGMAS = 3        # MST compresses values whose noisy count is below 3 sigma
_MODEL_GRID = 1 << 20  # the selection model's cells, rounded to multiples of 2^-20


def em_epsilon(rho_step: Fraction) -> Fraction:
    """Largest eps (rounded down to 1e-12) with eps^2 / 8 <= rho_step."""
    eps = Fraction(math.floor(math.sqrt(8 * float(rho_step)) * 10 ** 12), 10 ** 12)
    for _ in range(10 ** 6):  # float sqrt may round up; step down until it fits
        if em_rho(eps) <= rho_step:
            return eps
        eps -= Fraction(1, 10 ** 12)
    raise ValueError("no exponential-mechanism epsilon fits the step's rho")


def compression_map(noisy: np.ndarray, sigma: float) -> np.ndarray:
    """Original value -> compressed value: supported values keep their order, rare ones
    (noisy count < 3 sigma) share the last index; unchanged if at most one value is rare."""
    rare = noisy < RARE_SIGMAS * sigma
    if rare.sum() <= 1:
        return np.arange(len(noisy))
    mapping = np.empty(len(noisy), dtype=np.int64)
    mapping[~rare] = np.arange(int((~rare).sum()))
    mapping[rare] = int((~rare).sum())
    return mapping


def undo_compression(column: np.ndarray, mapping: np.ndarray,
                     rng: np.random.Generator) -> np.ndarray:
    """Compressed values back to original ones; a merged value to one of its originals,
    uniformly (post-processing)."""
    out = np.empty(len(column), dtype=np.int64)
    for value in range(int(mapping.max()) + 1):
        originals = np.flatnonzero(mapping == value)
        rows = column == value
        out[rows] = originals[rng.integers(len(originals), size=int(rows.sum()))]
    return out


def _selection_scores(counts: np.ndarray, layout: MarginalLayout,
                      one_way: list[np.ndarray], total: float) -> dict[tuple[int, int], Fraction]:
    scores = {}
    for slot in layout.two_way:
        a, b = slot.attrs
        model = np.rint(np.outer(one_way[a], one_way[b]) / total * _MODEL_GRID).astype(np.int64)
        true = counts[slot.offset:slot.offset + slot.size].reshape(slot.shape)
        scores[(a, b)] = Fraction(int(np.abs(true.astype(np.int64) * _MODEL_GRID
                                             - model).sum()), _MODEL_GRID)
    return scores


def central_mst(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                delta: float, seed: int) -> MethodResult:
    from feddpsyn.synthesis import _jax_compat  # noqa: F401  (must precede the mbi import)
    # isort: split
    from mbi import Domain, LinearMeasurement, estimation

    rng = np.random.default_rng(seed)
    rho = budget_rho(epsilon, delta)
    third = rho / 3
    sizes = schema.domain_sizes
    d = len(sizes)
    names = [f"a{i}" for i in range(d)]

    # 1. 1-ways on the original domain, then compression.
    layout = MarginalLayout.build(sizes, pairs=[])
    counts = layout.counts(records)
    sigma2_one = Fraction(d) / (2 * third)
    sigma_one = math.sqrt(sigma2_one)
    noisy_one = [counts[s.offset:s.offset + s.size]
                 + discrete_gaussian_vector(sigma2_one, s.size) for s in layout.one_way]
    mappings = [compression_map(y, sigma_one) for y in noisy_one]
    full_domain = Domain(names, list(sizes))
    measurements = [LinearMeasurement(y.astype(float), (names[i],), stddev=sigma_one)
                    .compress({names[i]: mappings[i]}, full_domain)
                    for i, y in enumerate(noisy_one)]
    compressed_sizes = tuple(int(m.max()) + 1 for m in mappings)
    compressed = np.stack([mappings[j][records[:, j]] for j in range(d)], axis=1)

    # 2. The tree, by the exponential mechanism on the compressed domain.
    layout_c = MarginalLayout.build(compressed_sizes)
    counts_c = layout_c.counts(compressed)
    one_way_c = [np.maximum(np.bincount(mappings[i], weights=noisy_one[i].astype(float),
                                        minlength=compressed_sizes[i]), 0)
                 for i in range(d)]
    total = max(float(np.mean([np.maximum(y, 0).sum() for y in noisy_one])), 1.0)
    scores = _selection_scores(counts_c, layout_c, one_way_c, total)
    eps_step = em_epsilon(third / (d - 1)) if d > 1 else Fraction(0)
    components = DisjointSets(d)
    tree = []
    for _ in range(d - 1):
        candidates = [e for e in scores if components.joins(*e)]
        pick = candidates[exponential_mechanism([scores[e] for e in candidates], eps_step, 1)]
        components.union(*pick)
        tree.append(pick)

    # 3. The tree's 2-ways with the exact remainder, then the fit.
    spent = Fraction(d) / (2 * sigma2_one) + (d - 1) * em_rho(eps_step)
    if tree:
        sigma2_two = Fraction(len(tree)) / (2 * (rho - spent))
        for a, b in tree:
            slot = layout_c.slot((a, b))
            noisy = counts_c[slot.offset:slot.offset + slot.size] + discrete_gaussian_vector(
                sigma2_two, slot.size)
            measurements.append(LinearMeasurement(noisy.astype(float), (names[a], names[b]),
                                                  stddev=math.sqrt(sigma2_two)))
        spent += Fraction(len(tree)) / (2 * sigma2_two)
    domain_c = Domain(names, list(compressed_sizes))
    model = estimation.MirrorDescent().estimate(domain_c, measurements, iters=FIT_ITERATIONS)
    data = model.synthetic_data(int(round(total))).to_dict()
    synth = np.stack([undo_compression(np.asarray(data[n]), mappings[i], rng)
                      for i, n in enumerate(names)], axis=1)
    return MethodResult(synth, spent, rho,
                        notes={"tree": tree, "compressed_sizes": compressed_sizes})
