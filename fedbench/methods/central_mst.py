"""``central-mst``: MST (McKenna, Miklau, Sheldon 2021) on the union, by a trusted curator.

MST's three thirds of rho: (1) every 1-way marginal, Gaussian noise; (2) a maximum spanning
tree over attribute pairs, grown Kruskal-style, each of the d - 1 edges chosen privately by
score = L1 distance between the pair's true 2-way marginal and the product of the noisy
1-ways (sensitivity 1 under add/remove, as the product is public); (3) the tree's 2-way
marginals, Gaussian noise; then Private-PGM (``mbi``) and sampling.

Deviations, stated: noise is the exact discrete Gaussian; each edge is picked with our exact
permute-and-flip, which is eps-DP and is charged rho = eps^2 / 2 (the generic pure-DP to zCDP
conversion) where MST's exponential mechanism is charged eps^2 / 8; MST's domain compression
of rare values is not done.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from crypto.discrete_gaussian import discrete_gaussian_vector
from crypto.permute_and_flip import permute_and_flip
from fedbench.methods.base import MethodResult, budget_rho
from params.layout import MarginalLayout
from params.schema import Schema
from synthesis.disjoint_sets import DisjointSets
from synthesis.marginals import NoisyMarginal


def _pf_epsilon(rho_step: Fraction) -> Fraction:
    """Largest eps (rounded down to 1e-12) with eps^2 / 2 <= rho_step."""
    eps = Fraction(math.floor(math.sqrt(2 * float(rho_step)) * 10 ** 12), 10 ** 12)
    while eps * eps / 2 > rho_step:  # float sqrt may round up; step down until it fits
        eps -= Fraction(1, 10 ** 12)
    return eps


def central_mst(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                delta: float, seed: int) -> MethodResult:
    from synthesis.pgm import fit_pgm

    rho = budget_rho(epsilon, delta)
    third = rho / 3
    sizes = schema.domain_sizes
    d = len(sizes)
    layout = MarginalLayout.build(sizes)
    counts = layout.counts(records)
    sigma2_one = Fraction(d) / (2 * third)
    measured = []
    one_way = []
    for slot in layout.one_way:
        noisy = counts[slot.offset:slot.offset + slot.size] + discrete_gaussian_vector(
            sigma2_one, slot.size)
        one_way.append(np.maximum(noisy, 0).astype(float))
        measured.append(NoisyMarginal(slot.attrs, noisy.astype(float), float(sigma2_one)))
    total = max(float(np.mean([m.sum() for m in one_way])), 1.0)
    scores = {}
    for slot in layout.two_way:
        a, b = slot.attrs
        expected = np.outer(one_way[a], one_way[b]) / total
        true = counts[slot.offset:slot.offset + slot.size].reshape(slot.shape)
        scores[(a, b)] = float(np.abs(true - expected).sum())
    eps_step = _pf_epsilon(third / (d - 1))
    components = DisjointSets(d)
    tree = []
    for _ in range(d - 1):
        candidates = [e for e in scores if components.joins(*e)]
        pick = candidates[permute_and_flip([scores[e] for e in candidates], eps_step, 1)]
        components.union(*pick)
        tree.append(pick)
    sigma2_two = Fraction(d - 1) / (2 * third)
    for a, b in tree:
        slot = layout.slot((a, b))
        noisy = counts[slot.offset:slot.offset + slot.size] + discrete_gaussian_vector(
            sigma2_two, slot.size)
        measured.append(NoisyMarginal((a, b), noisy.reshape(slot.shape).astype(float),
                                      float(sigma2_two)))
    synth = fit_pgm(measured, sizes, int(round(total)), keep_all=True)
    spent = (Fraction(d) / (2 * sigma2_one) + (d - 1) * eps_step ** 2 / 2
             + Fraction(d - 1) / (2 * sigma2_two))
    return MethodResult(synth, spent, rho, notes={"tree": tree})
