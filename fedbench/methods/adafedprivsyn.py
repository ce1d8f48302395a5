"""``adafedprivsyn``: HeteroFedSyn's AdaFedPrivSyn (Li et al., SIGMOD 2026), adaptive selection.

Stages 1-2 as FedPrivSyn (:mod:`fedbench.methods.heterofedsyn_common`). Selection follows
Algorithms 3-5: the number of selected pairs is bounded by B = ceil(P / 3) (the paper's
one-third assumption), so each selected 2-way is measured at once with rho_3 / B and carries
the known per-cell noise K * B / (2 rho_3). Each round takes the pair whose InDif2 most
exceeds that noise error (stop when none does, or at B). After every ``UPDATE_EVERY`` new
pairs (the paper's experiments use 10) GUM is re-run on what has been measured, and for every
unselected pair sharing an attribute with a newly selected one, InDif2 is replaced by the
unbiased estimate of ||C_ab - S_ab||^2 against the synthetic table's 2-way S_ab, computed from
the same stage-1 sketch, when that is smaller (Algorithm 4, lines 5-9).

Deviations, stated: the budget of the pairs not selected (B - |S| of them) re-measures the
selected pairs, combined by inverse variance (the paper leaves it unspent); the
intermediate GUM runs use fewer rounds than the final one (they only steer selection).
Privacy: rho_1 + rho_2 + rho_3 = rho per client against the server; every adaptive choice
is post-processing of released values, so zCDP composes adaptively.
"""

from __future__ import annotations

import math

import numpy as np

from feddpsyn.fedbench.methods.base import MethodResult, budget_rho
from feddpsyn.fedbench.methods.heterofedsyn_common import (
    BYTES_PER_VALUE,
    client_tables,
    indif2_estimate,
    marginal_counts,
    measure,
    one_way_marginals,
    residual_estimate,
    share_marginals,
    spend_remainder,
    split_budget,
)
from feddpsyn.params.schema import Schema
from feddpsyn.synthesis.consistency import make_consistent
from feddpsyn.synthesis.gum import fit_gum
from feddpsyn.synthesis.synthesize import synthesize_records

UPDATE_EVERY = 10
SELECTION_FRACTION = 3  # at most one pair in three is selected
INTERMEDIATE_GUM_ROUNDS = 10


def adafedprivsyn(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                  delta: float, seed: int) -> MethodResult:
    rho = budget_rho(epsilon, delta)
    rho1, rho2, rho3 = split_budget(rho)
    sizes = schema.domain_sizes
    rng = np.random.default_rng(seed)
    parts = client_tables(records, owner)
    shared = share_marginals(parts, sizes, rho1, rho2, rng)
    scores = {p: indif2_estimate(shared, p) for p in shared.sketches}
    cells = {p: sizes[p[0]] * sizes[p[1]] for p in scores}
    bound = max(1, math.ceil(len(scores) / SELECTION_FRACTION))
    rho_each = rho3 / bound
    noise_per_cell = len(parts) / (2 * float(rho_each))
    one_way = one_way_marginals(shared)
    measured, spent3, fresh = [], rho3 * 0, []
    for _ in range(bound):
        gains = {p: s - cells[p] * noise_per_cell for p, s in scores.items()
                 if p not in {m.attrs for m in measured}}
        if not gains:
            break
        pick = max(gains, key=gains.get)
        if gains[pick] <= 0:
            break
        new, cost = measure(parts, sizes, [pick], rho_each)
        measured += new
        spent3 += cost
        fresh.append(pick)
        if len(fresh) == UPDATE_EVERY and len(measured) < bound:
            _update_scores(shared, scores, measured, one_way, fresh, sizes, rng)
            fresh = []
    selected = [m.attrs for m in measured]
    measured, one_way, extra = spend_remainder(parts, sizes, measured, one_way, rho3 - spent3)
    synth = synthesize_records(schema, one_way + measured, "gum", None, rng)
    values = shared.values_per_client + sum(cells[p] for p in selected) * (
        2 if extra and selected else 1) + (sum(sizes) if extra and not selected else 0)
    return MethodResult(synth, shared.rho + spent3 + extra, rho,
                        bytes_per_client=float(values * BYTES_PER_VALUE),
                        notes={"selected": selected})


def _update_scores(shared, scores, measured, one_way, fresh, sizes, rng) -> None:
    """Algorithm 4: lower InDif2 of pairs touching the new ones, using a GUM fit."""
    consistent, total = make_consistent(one_way + measured, sizes)
    rows = max(1, int(round(total)))
    synth = fit_gum(consistent, sizes, rows, rng, rounds=INTERMEDIATE_GUM_ROUNDS)
    touched = {a for p in fresh for a in p}
    chosen = {m.attrs for m in measured}
    for p in scores:
        if p in chosen or not (set(p) & touched):
            continue
        model = marginal_counts(synth, p, sizes) * (total / rows)
        updated = residual_estimate(shared, p, model)
        if updated < scores[p]:
            scores[p] = updated
