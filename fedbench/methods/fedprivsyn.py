"""``fedprivsyn``: HeteroFedSyn's FedPrivSyn (Li et al., SIGMOD 2026), static selection.

Stages 1-2 (noisy 1-ways and 2-way sketches from every client, unbiased InDif2 at the server)
are :mod:`fedbench.methods.heterofedsyn_common`. Selection is PrivSyn's one-round greedy
(its Eq. 1): starting from nothing, add the pair that lowers

    sum over unselected pairs of InDif2  +  sum over selected pairs of cells * K * sigma_3^2

the most, where sigma_3^2 = |S| / (2 rho_3) is each client's noise when rho_3 is split evenly
over the |S| selected pairs; stop when no pair lowers it. The selected 2-ways are then
measured by every client (squared sensitivity |S|, exact discrete Gaussian) and GUM
synthesizes from them and the stage-1 1-ways (the paper uses the stage-1 1-ways for
attributes no selected pair covers; PrivSyn's consistency step weights each source by its
variance, so passing all of them does that and more).

If nothing is selected, rho_3 re-measures the 1-ways (not in the paper; keeps the spend exact).
Privacy: rho_1 + rho_2 + rho_3 = rho per client, against the server (see the common module).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from feddpsyn.fedbench.methods.base import MethodResult, budget_rho
from feddpsyn.fedbench.methods.heterofedsyn_common import (
    BYTES_PER_VALUE,
    Pair,
    client_tables,
    indif2_estimate,
    measure,
    one_way_marginals,
    share_marginals,
    spend_remainder,
    split_budget,
)
from feddpsyn.params.schema import Schema
from feddpsyn.synthesis.synthesize import synthesize_records


def static_selection(scores: dict[Pair, float], cells: dict[Pair, int], clients: int,
                     rho3: Fraction) -> list[Pair]:
    """PrivSyn's greedy over squared-L2 errors, with the federated (K-fold) noise."""
    dependency = {p: max(s, 0.0) for p, s in scores.items()}
    selected: list[Pair] = []
    selected_cells = 0
    error = sum(dependency.values())
    for _ in range(len(scores)):
        k = len(selected) + 1
        per_cell = clients * k / (2 * float(rho3))
        best, best_error = None, error
        for p in scores:
            if p in selected:
                continue
            candidate = error - dependency[p] + (
                per_cell * (selected_cells + cells[p])
                - clients * (k - 1) / (2 * float(rho3)) * selected_cells)
            if candidate < best_error:
                best, best_error = p, candidate
        if best is None:
            break
        selected.append(best)
        selected_cells += cells[best]
        error = best_error
    return selected


def fedprivsyn(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
               delta: float, seed: int) -> MethodResult:
    rho = budget_rho(epsilon, delta)
    rho1, rho2, rho3 = split_budget(rho)
    sizes = schema.domain_sizes
    rng = np.random.default_rng(seed)
    parts = client_tables(records, owner)
    shared = share_marginals(parts, sizes, rho1, rho2, rng)
    scores = {p: indif2_estimate(shared, p) for p in shared.sketches}
    cells = {p: sizes[p[0]] * sizes[p[1]] for p in scores}
    selected = static_selection(scores, cells, len(parts), rho3)
    measured, spent3 = measure(parts, sizes, list(selected), rho3) if selected else ([], 0)
    measured, one_way, extra = spend_remainder(parts, sizes, measured, one_way_marginals(shared),
                                               rho3 - spent3)
    synth = synthesize_records(schema, one_way + measured, "gum", None, rng)
    values = shared.values_per_client + sum(cells[p] for p in selected)
    if not selected:
        values += sum(sizes)
    return MethodResult(synth, shared.rho + spent3 + extra, rho,
                        bytes_per_client=float(values * BYTES_PER_VALUE),
                        notes={"selected": selected})
