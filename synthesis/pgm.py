"""Synthesis with Private-PGM (McKenna, Sheldon, Miklau 2019) on a bounded junction tree of the
released marginals.

Private-PGM's cost grows with the junction tree of the cliques it fits; with every released
2-way pair in it, Adult's tree is one clique over all attributes (far beyond memory). So, as
post-processing of the released values (no privacy cost):

1. **Which pairs.** The released pairs are ranked by their estimated dependence: the L1
   distance of the pair's consistent noisy marginal (``synthesis.consistency``) from the
   product of its projections. They are added in that order, each only if the junction tree
   of the kept cliques stays within ``max_model_mb`` (``graphical_model.model_size_mb``, the
   measure AIM's model-size filter uses, McKenna et al. 2022, Section 4). Pairs that do not
   fit are left out of the model; every 1-way is kept.
2. **The model.** ``synthesis.mirror_descent`` (Private-PGM's Algorithm 1, numpy) fits the
   kept marginals, each weighted by its own noise variance, with the consistent total, for at
   most ``iters`` steps (``DEFAULT_ITERS``) or until converged.
3. **The records.** The model's randomized-rounding sampler draws ``rows`` records, and a
   local search moves them toward the model's own 2-way marginals (``synthesis.polish``):
   the draw's own noise was most of the sample's error at high budgets.
4. **The pairs the tree left out.** At high budgets most pairs are released and the tree
   cannot hold them all (doctor_contacts at eps 4: 94-96 of 105 released); the model
   completes the others by maximum entropy, which can miss a released pair by far more than
   its noise. Where the model's answer is further from a left-out pair's consistent
   released values than ``HELD_OUT_RATIO`` times the L1 their noise alone would give
   (cells x sd x sqrt(2/pi)), the search aims at the released values for that pair
   instead. Both are functions of the release only. On the same releases, this lowered the
   2-way error by 28% on doctor_contacts and 18% on Adult at eps 4, under 1% at eps 1
   (``experiments/synthesis_estimators/results/paired_doctor_adult.json``).

Why a bounded tree rather than MST's spanning tree (what this module did before): the
spanning tree keeps 14 of Adult's released pairs, and the model is then independent given
the tree. Measured on Adult with the servers' noisy-greedy release (4 clients, all 2-way L1,
eps 0.5 / 1 / 2): on the same 3 releases, GUM 0.0737 / 0.0583 / 0.0389, this module at 4 MB
0.0619 / 0.0474 / 0.0360 (the tree held 37-42 of 37-58 released pairs), at 1 MB 0.0634 /
0.0490 / 0.0380; over 10 repeats (``bench/results/adult_served/pgm``) 0.0629 / 0.0470 /
0.0352 against GUM's 0.0748 / 0.0569 / 0.0402. GUM fits the released pairs closely (2-way
error on them 0.043 at eps 1, what the noise allows) but infers the others poorly (0.071);
the graphical model's maximum-entropy completion infers them better (0.049) at some cost on
the pairs it leaves out. Where every pair is released with noise spread over all of them,
GUM is better (``synthesize.resolve_method``).
"""

from __future__ import annotations

import math

import numpy as np

from feddpsyn.synthesis.graphical_model import GraphicalModel, model_size_mb
from feddpsyn.synthesis.marginals import NoisyMarginal

__all__ = ["DEFAULT_ITERS", "DEFAULT_MAX_MODEL_MB", "HELD_OUT_RATIO", "dependence", "fit_model",
           "fit_pgm", "held_out_targets", "kept_pairs"]

# Adult (15 attributes, 4 clients, eps 1): 1 MB keeps 32-33 pairs in 9 s a fit, 4 MB 39-40
# pairs in 32 s, with 2-way error 0.0490 and 0.0474 (3 repeats, 300 steps).
DEFAULT_MAX_MODEL_MB = 4.0
# A cap on the estimator's steps. Adult at 4 MB, eps 1, one release: 300 steps 0.0479 (31 s),
# 500 0.0481, 1,000 0.0480, run to convergence 0.0476 (125 s): the rest of the fit moves the
# error less than the sampling does.
DEFAULT_ITERS = 300
# A left-out pair's released values replace the model's answer as the search's target when
# the model misses them by more than this many times the L1 their noise alone would give
# (step 4 of the module docstring).
HELD_OUT_RATIO = 1.5


def dependence(m: NoisyMarginal) -> float:
    """L1 distance between a 2-way marginal and the product of its 1-way projections."""
    joint = np.maximum(m.counts, 0)
    total = joint.sum()
    if total <= 0:
        return 0.0
    joint = joint / total
    product = np.outer(joint.sum(axis=1), joint.sum(axis=0))
    return float(np.abs(joint - product).sum())


def kept_pairs(consistent: list[NoisyMarginal], domain_sizes: tuple[int, ...],
               max_model_mb: float) -> list[tuple[int, ...]]:
    """The released pairs the model fits: most dependent first, each while the junction tree
    stays within ``max_model_mb`` (step 1 of the module docstring). Ties keep release order,
    so the choice is a function of the released values alone."""
    pairs = [m for m in consistent if len(m.attrs) == 2]
    ranked = sorted(range(len(pairs)), key=lambda i: -dependence(pairs[i]))
    kept: list[tuple[int, ...]] = []
    for i in ranked:  # bounded: one junction-tree size per released pair
        trial = kept + [tuple(pairs[i].attrs)]
        if model_size_mb(trial, domain_sizes) <= max_model_mb:
            kept = trial
    return kept


def fit_model(marginals: list[NoisyMarginal], consistent: list[NoisyMarginal], total: float,
              domain_sizes: tuple[int, ...], max_model_mb: float = DEFAULT_MAX_MODEL_MB,
              iters: int = DEFAULT_ITERS) -> GraphicalModel:
    """The graphical model fitted to the released marginals that fit in ``max_model_mb``
    (steps 1 and 2 of the module docstring); :func:`fit_pgm` samples it. ``consistent`` and
    ``total``: the marginals' consistent copies and common total
    (``synthesis.consistency.make_consistent``), which rank the pairs and fix the model's
    total; the model fits the released values themselves. Marginals of more than two
    attributes are kept too when they fit."""
    if max_model_mb <= 0:
        raise ValueError("max_model_mb must be positive")
    keep = set(kept_pairs(consistent, domain_sizes, max_model_mb))
    wider = [tuple(m.attrs) for m in marginals if len(m.attrs) > 2]
    for clique in wider:  # bounded: one size check per released wider marginal
        if model_size_mb(sorted(keep) + [clique], domain_sizes) <= max_model_mb:
            keep.add(clique)
    measurements = [m for m in marginals if len(m.attrs) == 1 or tuple(m.attrs) in keep]
    model = GraphicalModel(domain_sizes)
    model.fit(measurements, iters=iters, total=total)
    return model


def held_out_targets(model: GraphicalModel, consistent: list[NoisyMarginal],
                     domain_sizes: tuple[int, ...],
                     ratio: float = HELD_OUT_RATIO) -> dict[tuple[int, int], np.ndarray]:
    """The released pairs the fitted ``model`` left out (in none of its cliques) whose
    released values it misses by more than their noise explains (step 4 of the module
    docstring): each pair's consistent released counts (clipped at 0), keyed (a, b) with
    a < b, for the sample's search to aim at instead of the model's answer."""
    cliques = [set(c) for c in model.cliques]
    out: dict[tuple[int, int], np.ndarray] = {}
    for m in consistent:
        if len(m.attrs) != 2 or any(set(m.attrs) <= c for c in cliques):
            continue
        a, b = m.attrs
        released = np.maximum(np.asarray(m.counts, dtype=float), 0.0).reshape(
            domain_sizes[a], domain_sizes[b])
        answer = model.answer((a, b)).reshape(domain_sizes[a], domain_sizes[b])
        scale = max(float(released.sum()), 1e-300)
        missed = float(np.abs(answer / max(float(answer.sum()), 1e-300) * scale
                              - released).sum())
        noise = released.size * math.sqrt(m.variance) * math.sqrt(2 / math.pi)
        if missed > ratio * noise:
            out[(a, b) if a < b else (b, a)] = released if a < b else released.T
    return out


def fit_pgm(marginals: list[NoisyMarginal], consistent: list[NoisyMarginal], total: float,
            domain_sizes: tuple[int, ...], rows: int, rng: np.random.Generator,
            max_model_mb: float = DEFAULT_MAX_MODEL_MB,
            iters: int = DEFAULT_ITERS) -> np.ndarray:
    """``rows`` records sampled from :func:`fit_model`'s model and searched toward its pair
    marginals, or toward the released values of the pairs :func:`held_out_targets` names
    (steps 3 and 4 of the module docstring)."""
    model = fit_model(marginals, consistent, total, domain_sizes, max_model_mb, iters)
    return model.sample(rows, rng, targets=held_out_targets(model, consistent, domain_sizes))
