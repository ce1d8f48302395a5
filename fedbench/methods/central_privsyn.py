"""``central-privsyn``: PrivSyn (Zhang, Wang, Li, He, Chen, Chen 2021) on the union, by a
trusted curator, with its marginal selection (Section 5).

* **Selection, 0.1 rho** (PrivSyn's split): every pair's InDif = sum over cells
  |C_jk - C_j C_k / N| from the data's own counts (PrivSyn's definition), released at once
  with Gaussian noise. One record changes each score by at most 4 (PrivSyn's bound; it also
  holds under add/remove: the C_jk cell moves by 1 and the product term by less than 3), so
  the m scores have L2 sensitivity 4 sqrt(m). For exact integer noise the score is taken on
  a 2^-10 grid, q = floor(2^10 S / N) from the integer
  S = sum |N C_jk - C_j C_k| = N InDif (no float), whose sensitivity is exactly 4 * 2^10 (a floor
  moves by at most the ceiling of its argument's move, an integer here); q + N_Z(0, sigma2)
  with sigma2 = 16 * 4^10 m / (2 rho_sel) is rho_sel-zCDP.
* **Greedy rule** (PrivSyn Section 5.2, on the noisy scores): the error of a selected set S
  is sum over unselected pairs of their noisy InDif plus the expected L1 noise of publishing
  S, sum over i in S of sqrt(2/pi) sigma_i c_i (c_i cells); add the pair that most lowers it,
  stop when none does. sigma_i comes from PrivSyn's allocation (next point) of the
  publication budget over the 1-ways and S.
* **Publication, 0.9 rho**: the 1-ways and the selected 2-ways, each marginal i its share
  rho_i proportional to c_i^(2/3) (PrivSyn's optimal allocation for the L1 noise error;
  weights rounded to rationals, so the shares add to exactly 0.9 rho), discrete Gaussian
  noise sigma_i^2 = 1 / (2 rho_i) (sensitivity 1 per marginal under add/remove).
* Then consistency and GUM, as the rest of the bench (``central-privsyn-pgm``: Private-PGM on
  a bounded junction tree instead, ``synthesis.pgm``).

Deviations, stated: PrivSyn's marginal combination (merging selected pairs into larger
marginals when domains are small) is not done; noise is the exact discrete Gaussian. The
all-pairs release without selection is ``central-privsyn-all``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dp.discrete_gaussian import discrete_gaussian_vector
from dp.pair_selection import greedy_by_error
from fedbench.methods.base import MethodResult, budget_rho
from params.layout import MarginalLayout
from params.schema import Schema
from synthesis.marginals import NoisyMarginal
from synthesis.synthesize import synthesize_records

SELECTION_SHARE = Fraction(1, 10)  # PrivSyn: 0.1 rho to select, 0.9 rho to publish
INDIF_SENSITIVITY = 4
SCORE_GRID_BITS = 10               # scores on a 2^-10 grid (exact integers)
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
    rho = budget_rho(epsilon, delta)
    rho_select = rho * SELECTION_SHARE
    rho_publish = rho - rho_select
    sizes = schema.domain_sizes
    layout = MarginalLayout.build(sizes)
    counts = layout.counts(records)

    pairs = [slot.attrs for slot in layout.two_way]
    spent = Fraction(0)
    chosen: list[tuple[int, int]] = []
    if pairs:
        grid = 1 << SCORE_GRID_BITS
        sensitivity2 = (INDIF_SENSITIVITY * grid) ** 2 * len(pairs)
        sigma2_select = Fraction(sensitivity2) / (2 * rho_select)
        exact = indif_grid_scores(counts, layout, len(records))
        noise = discrete_gaussian_vector(sigma2_select, len(pairs))
        noisy = {p: (exact[p] + int(z)) / grid for p, z in zip(pairs, noise)}
        spent += Fraction(sensitivity2) / (2 * sigma2_select)
        chosen = privsyn_greedy(noisy, {s.attrs: s.size for s in layout.two_way},
                                [s.size for s in layout.one_way], rho_publish)
    else:
        rho_publish = rho

    slots = list(layout.one_way) + [layout.slot(p) for p in chosen]
    weights = [allocation_weight(s.size) for s in slots]
    total_weight = sum(weights)
    measured = []
    for slot, w in zip(slots, weights):
        rho_i = rho_publish * w / total_weight
        sigma2 = 1 / (2 * rho_i)
        noisy_counts = counts[slot.offset:slot.offset + slot.size] + discrete_gaussian_vector(
            sigma2, slot.size)
        measured.append(NoisyMarginal(slot.attrs, noisy_counts.reshape(slot.shape)
                                      .astype(float), float(sigma2)))
        spent += 1 / (2 * sigma2)
    synth = synthesize_records(schema, measured, synthesis, None, np.random.default_rng(seed))
    return MethodResult(synth, spent, rho, notes={"selected_pairs": chosen,
                                                  "synthesis": synthesis})


def central_privsyn_pgm(records: np.ndarray, owner: np.ndarray, schema: Schema,
                        epsilon: float, delta: float, seed: int) -> MethodResult:
    """``central-privsyn-pgm``: the same central release, synthesized with Private-PGM on a
    bounded junction tree (``synthesis.pgm``) instead of GUM: the central counterpart of the
    served ``-pgm`` methods, so that a comparison changes only who computes the release."""
    return central_privsyn(records, owner, schema, epsilon, delta, seed, "pgm")
