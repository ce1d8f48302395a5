"""``central-privsyn``: PrivSyn (Zhang, Wang, Li, He, Chen, Chen 2021) on the union, by a
trusted curator, with its marginal selection (Section 5).

* **Budget**: rho calibrated by exact accounting (``fedbench.methods.central_accounting``):
  the composed privacy-loss distribution of the selection's scores and the publication
  (Google's ``dp-accounting``, pessimistic) gives an eps within [0.99, 1] x the eps asked at
  the delta asked, where the zCDP conversion (``budget_rho``) would leave about 14% of rho
  (7% of the noise scale) unspent.
* **Selection, 0.1 rho** (PrivSyn's split): every pair's InDif = sum over cells
  |C_jk - C_j C_k / N| from the data's own counts (PrivSyn's definition), released at once
  with Gaussian noise. One record changes each score by at most 4 (PrivSyn's bound; it also
  holds under add/remove: the C_jk cell moves by 1 and the product term by less than 3). For
  exact integer noise the score is q = floor(S / N) from the integer
  S = sum |N C_jk - C_j C_k| = N InDif (no float), whose sensitivity is exactly 4 (a floor
  moves by at most the ceiling of its argument's move, an integer here); q + N_Z(0, sigma2)
  with sigma2 = 16 m / (2 rho_sel) for the m scores (rho_sel in zCDP terms; accounted as m
  discrete Gaussians of sensitivity 4). The floor costs under one count against a noise
  sigma of hundreds of counts.
* **Greedy rule** (PrivSyn Section 5.2, on the noisy scores): the error of a selected set S
  is sum over unselected pairs of their noisy InDif plus the expected L1 noise of publishing
  S, sum over i in S of sqrt(2/pi) sigma_i c_i (c_i cells); add the pair that most lowers it,
  stop when none does. sigma_i comes from PrivSyn's allocation (next point) of the
  publication budget over the 1-ways and S.
* **Publication, 0.9 rho**: the 1-ways and the selected 2-ways, each marginal i its share
  rho_i proportional to c_i^(2/3) (PrivSyn's optimal allocation for the L1 noise error;
  weights rounded to rationals, so the shares add to exactly 0.9 rho), discrete Gaussian
  noise of variance 1 / (2 rho_i) plus 3/32 (sensitivity 1 per marginal under
  add/remove): the shares depend on the selection, so each noise is checked to be dominated
  by the Gaussian mechanism of its share, and the publication is accounted as one Gaussian
  of 0.9 rho whatever was selected (``central_accounting``, "GaussianBound").
* Then consistency and GUM, as the rest of the bench (``central-privsyn-pgm``: Private-PGM on
  a bounded junction tree instead, ``synthesis.pgm``).

Deviations, stated: PrivSyn's marginal combination (merging selected pairs into larger
marginals when domains are small) is not done; noise is the exact discrete Gaussian. The
every-pair release without selection is ``central-privsyn-all``.

``MethodResult.rho_spent`` adds, part by part, the rho each noise was accounted with (the
scores' 16 m / (2 sigma2), each marginal's share rho_i), so the runner's check that it equals
the calibrated budget is a check of the shares; ``notes`` carry the accounted eps.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from feddpsyn.dp.discrete_gaussian import discrete_gaussian_vector
from feddpsyn.dp.pair_selection import greedy_by_error
from feddpsyn.fedbench.methods.base import MethodResult
from feddpsyn.fedbench.methods.central_accounting import dominated_sigma2, privsyn_budget
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.schema import Schema
from feddpsyn.synthesis.marginals import NoisyMarginal
from feddpsyn.synthesis.synthesize import synthesize_records

INDIF_SENSITIVITY = 4
SCORE_GRID_BITS = 0                # scores on a 2^-g grid (exact integers)
_WEIGHT_GRID = 10 ** 6             # c^(2/3) weights rounded to multiples of 1e-6


def indif_grid_scores(counts: np.ndarray, layout: MarginalLayout, rows: int
                      ) -> dict[tuple[int, int], int]:
    """floor(2^g InDif) per pair, computed exactly from S = sum |N C_jk - C_j C_k| (integers)."""
    n = max(int(rows), 1)
    one_way = [counts[s.offset:s.offset + s.size].astype(object) for s in layout.one_way]
    out = {}
    for slot in layout.two_way:
        a, b = slot.attrs
        joint = counts[slot.offset:slot.offset + slot.size].astype(object).reshape(slot.shape)
        s = int(np.abs(n * joint - np.outer(one_way[a], one_way[b])).sum())
        out[(a, b)] = (s << SCORE_GRID_BITS) // n
    return out


def allocation_weight(cells: int) -> Fraction:
    """PrivSyn's c^(2/3), as a positive rational (any positive weights keep the sum exact)."""
    return Fraction(max(1, round(cells ** (2 / 3) * _WEIGHT_GRID)), _WEIGHT_GRID)


def privsyn_greedy(noisy_scores: dict[tuple[int, int], float], cells: dict[tuple[int, int], int],
                   one_way_cells: list[int], rho_publish: Fraction) -> list[tuple[int, int]]:
    """PrivSyn's greedy selection on noisy scores (count units), with the c^(2/3) allocation
    of ``rho_publish`` over the 1-ways and the selected pairs."""
    base = sum(float(allocation_weight(c)) for c in one_way_cells)
    weight = {p: float(allocation_weight(c)) for p, c in cells.items()}
    scale = math.sqrt(2 / math.pi)

    def error(selected: list) -> float:
        total_weight = base + sum(weight[p] for p in selected)
        noise = sum(scale * cells[p] * math.sqrt(total_weight / (2 * float(rho_publish)
                                                                 * weight[p]))
                    for p in selected)
        return sum(v for p, v in noisy_scores.items() if p not in selected) + noise

    return greedy_by_error(list(noisy_scores), error)


def central_privsyn(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
                    delta: float, seed: int, synthesis: str = "gum") -> MethodResult:
    sizes = schema.domain_sizes
    layout = MarginalLayout.build(sizes)
    counts = layout.counts(records)
    pairs = [slot.attrs for slot in layout.two_way]
    grid = 1 << SCORE_GRID_BITS
    budget = privsyn_budget(float(epsilon), float(delta), len(pairs), len(layout.one_way),
                            INDIF_SENSITIVITY * grid)
    rho_publish = budget.rho_publish

    spent = Fraction(0)
    chosen: list[tuple[int, int]] = []
    if pairs:
        sigma2_select = budget.sigma2_select
        assert sigma2_select is not None  # there are pairs to score
        exact = indif_grid_scores(counts, layout, len(records))
        noise = discrete_gaussian_vector(sigma2_select, len(pairs))
        noisy = {p: (exact[p] + int(z)) / grid for p, z in zip(pairs, noise)}
        spent += Fraction((INDIF_SENSITIVITY * grid) ** 2 * len(pairs)) / (2 * sigma2_select)
        chosen = privsyn_greedy(noisy, {s.attrs: s.size for s in layout.two_way},
                                [s.size for s in layout.one_way], rho_publish)

    slots = list(layout.one_way) + [layout.slot(p) for p in chosen]
    weights = [allocation_weight(s.size) for s in slots]
    total_weight = sum(weights)
    measured = []
    for slot, w in zip(slots, weights):
        rho_i = rho_publish * w / total_weight
        # the share depends on the selection: the noise is checked against G_sqrt(2 rho_i)
        sigma2 = dominated_sigma2(rho_i, budget.eta_each)
        noisy_counts = counts[slot.offset:slot.offset + slot.size] + discrete_gaussian_vector(
            sigma2, slot.size)
        measured.append(NoisyMarginal(slot.attrs, noisy_counts.reshape(slot.shape)
                                      .astype(float), float(sigma2)))
        spent += rho_i
    synth = synthesize_records(schema, measured, synthesis, None, np.random.default_rng(seed))
    return MethodResult(synth, spent, budget.rho,
                        notes={"selected_pairs": chosen, "synthesis": synthesis,
                               **budget.notes()})


def central_privsyn_pgm(records: np.ndarray, owner: np.ndarray, schema: Schema,
                        epsilon: float, delta: float, seed: int) -> MethodResult:
    """``central-privsyn-pgm``: the same central release, synthesized with Private-PGM on a
    bounded junction tree (``synthesis.pgm``) instead of GUM: the central counterpart of the
    served ``-pgm`` methods, so that a comparison changes only who computes the release."""
    return central_privsyn(records, owner, schema, epsilon, delta, seed, "pgm")
