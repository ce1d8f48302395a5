"""The parts FedPrivSyn and AdaFedPrivSyn share (HeteroFedSyn, Li et al., SIGMOD 2026).

Setting (HeteroFedSyn Section 2-3): an honest-but-curious server and K clients, no secure
aggregation. Every client protects its own records by adding its own noise to everything it
sends, so a sum over clients carries K noises (the paper's "participant number times larger"
noise). Neighbouring tables differ by one record (add/remove), which lives at one client.

Stage 1, marginal sharing (Algorithm 1): each client sends all 1-way counts with Gaussian
noise (budget rho_1) and every 2-way count vector *compressed by a random projection* shared
by all clients, with Gaussian noise (budget rho_2).

Stage 2, dependency measurement (Algorithm 2, Theorem 5): the server sums the clients'
messages and estimates InDif2(a, b) = ||C_ab - C_a C_b^T / N||_2^2 without bias from the
noisy 1-ways and the noisy sketches. Derivation (count units; s1 = K * sigma_1^2 is the summed
1-way noise variance per cell, s2 = K * sigma_2^2 the summed sketch noise per coordinate, m the
sketch length, d_a, d_b the domain sizes, and E_R ||R z||^2 = ||z||^2 for the projection):

    T = ||y_ab - R (c^_a (x) c^_b) / N||^2
    E[T] = InDif2 + m s2 + (s1 / N^2) (d_a ||c_b||^2 + d_b ||c_a||^2 + d_a d_b s1)
    E[||c^_a||^2] = ||c_a||^2 + d_a s1
    => InDif2^ = T - m s2 - (s1 / N^2) (d_b ||c^_a||^2 + d_a ||c^_b||^2 - d_a d_b s1)

which is unbiased (the 1-way noises of a and b are independent, so products of their
squared norms never appear). Stage 3 (Algorithm 5): the selected 2-way marginals are measured
with the remaining budget rho_3 and synthesized with GUM (PrivSyn's synthesizer).

Budget split (the authors' released configuration): rho_1 = rho_2 = 0.1 rho, rho_3 = 0.8 rho.

Deviations, stated:
* Noise is the exact discrete Gaussian on integers. The projection is a Rademacher (+-1)
  matrix Q with m rows, R = Q / sqrt(m) (a JL matrix with "Gaussian-like" entries, which the
  paper allows), so a client's sketch Q c is an integer vector and a record moves it by one
  column of Q, of squared norm exactly m: the sensitivity is exact, not a high-probability
  bound. A pair whose 2-way has at most m cells is sent uncompressed (R = identity).
* N (the union's size) is public in the paper; here it is the mean total of the noisy
  1-ways (post-processing), since under add/remove the size is private.
* Estimated InDif2 values can be negative; selection uses max(InDif2^, 0).
* The greedy trade-off (PrivSyn's Eq. 1) compares squared-L2 quantities on both sides:
  InDif2 for a pair left out, and the expected squared L2 noise (cells * K * sigma^2) for a
  pair measured, with rho_3 split evenly over the selected pairs.

Privacy (per client, against the server; the view of the other clients' messages is
independent of this client's records): stage 1 costs rho_1 + rho_2 by zCDP composition
(squared sensitivity d for the 1-ways; sum over pairs of the column norms for the sketches),
stage 3 costs what each method reports; the server's computations are post-processing.
How rho_3 is split over the selected pairs depends on released values, but the split always
adds up to rho_3, fixed in advance, so adaptive composition holds (an RDP/zCDP privacy
filter, Feldman and Zrnic 2021).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from feddpsyn.dp.discrete_gaussian import discrete_gaussian_vector
from feddpsyn.synthesis.marginals import NoisyMarginal

SKETCH_LENGTH = 20  # HeteroFedSyn Fig. 8 explores 5..30 for the projection dimension
BYTES_PER_VALUE = 8  # every sent count or sketch coordinate as a 64-bit integer

Pair = tuple[int, int]


def split_budget(rho: Fraction) -> tuple[Fraction, Fraction, Fraction]:
    """rho_1 (1-ways), rho_2 (sketches), rho_3 (selected 2-ways): 0.1 / 0.1 / 0.8."""
    rho1 = rho / 10
    rho2 = rho / 10
    return rho1, rho2, rho - rho1 - rho2


def client_tables(records: np.ndarray, owner: np.ndarray) -> list[np.ndarray]:
    return [records[owner == c] for c in np.unique(owner)]


def marginal_counts(records: np.ndarray, attrs: tuple[int, ...],
                    sizes: tuple[int, ...]) -> np.ndarray:
    """Flat (row-major) count vector of the marginal over ``attrs``."""
    flat = np.zeros(len(records), dtype=np.int64)
    cells = 1
    for a in attrs:
        flat = flat * sizes[a] + records[:, a]
        cells *= sizes[a]
    return np.bincount(flat, minlength=cells).astype(np.int64)


@dataclass
class SharedMarginals:
    """What the server holds after stage 1 (sums over clients, float for arithmetic)."""

    one_way: list[np.ndarray]  # noisy counts per attribute
    one_way_variance: float  # per cell, summed over clients (s1)
    projections: dict[Pair, np.ndarray | None]  # Rademacher Q (m x cells), None = identity
    sketches: dict[Pair, np.ndarray]  # noisy R c_ab, R = Q / sqrt(m) (or identity)
    sketch_variance: float  # per coordinate in R units, summed over clients (s2)
    total: float  # N^, mean total of the noisy 1-ways
    rho: Fraction  # stage-1 cost per client: rho_1 + rho_2
    values_per_client: int

    def project(self, pair: Pair, counts: np.ndarray) -> np.ndarray:
        q = self.projections[pair]
        flat = np.asarray(counts, dtype=float).ravel()
        return flat if q is None else q @ flat / math.sqrt(q.shape[0])


def share_marginals(parts: list[np.ndarray], sizes: tuple[int, ...], rho1: Fraction,
                    rho2: Fraction, rng: np.random.Generator,
                    sketch_length: int = SKETCH_LENGTH) -> SharedMarginals:
    """Stage 1: every client's noisy 1-ways and noisy 2-way sketches, summed by the server."""
    d = len(sizes)
    pairs: list[Pair] = list(itertools.combinations(range(d), 2))
    # Public projections, drawn by the server and sent to every client (not private).
    projections: dict[Pair, np.ndarray | None] = {}
    for a, b in pairs:
        cells = sizes[a] * sizes[b]
        projections[(a, b)] = (None if cells <= sketch_length else
                               rng.choice(np.array([-1, 1], dtype=np.int64),
                                          size=(sketch_length, cells)))
    sigma2_one = Fraction(d) / (2 * rho1)  # one record moves each of the d 1-ways by 1
    # In R units every pair's sketch moves by a unit-norm column, so one variance for all;
    # in integer (Q) units a compressed pair's column has squared norm m.
    sigma2_sketch = Fraction(len(pairs)) / (2 * rho2)
    one_way = [np.zeros(s) for s in sizes]
    sketches = {p: np.zeros(sketch_length if projections[p] is not None
                            else sizes[p[0]] * sizes[p[1]]) for p in pairs}
    for part in parts:
        for a in range(d):
            noisy = marginal_counts(part, (a,), sizes) + discrete_gaussian_vector(
                sigma2_one, sizes[a])
            one_way[a] += noisy
        for p in pairs:
            counts = marginal_counts(part, p, sizes)
            q = projections[p]
            if q is None:
                sketches[p] += counts + discrete_gaussian_vector(sigma2_sketch, counts.size)
            else:
                m = q.shape[0]
                noisy_q = q @ counts + discrete_gaussian_vector(sigma2_sketch * m, m)
                sketches[p] += noisy_q / math.sqrt(m)
    k = len(parts)
    spent = Fraction(d) / (2 * sigma2_one) + sum(
        (Fraction(1 if projections[p] is None else projections[p].shape[0])
         / (2 * (sigma2_sketch if projections[p] is None
                 else sigma2_sketch * projections[p].shape[0])) for p in pairs),
        start=Fraction(0))
    total = max(float(np.mean([c.sum() for c in one_way])), 1.0)
    values = sum(sizes) + sum(v.size for v in sketches.values())
    return SharedMarginals(one_way, k * float(sigma2_one), projections, sketches,
                           k * float(sigma2_sketch), total, spent, values)


def indif2_estimate(shared: SharedMarginals, pair: Pair) -> float:
    """Theorem 5's unbiased estimate of ||C_ab - C_a C_b^T / N||^2 (module docstring)."""
    a, b = pair
    ca, cb = shared.one_way[a], shared.one_way[b]
    n, s1 = shared.total, shared.one_way_variance
    independent = np.outer(ca, cb) / n
    sketch = shared.sketches[pair]
    t = float(np.sum((sketch - shared.project(pair, independent)) ** 2))
    da, db = ca.size, cb.size
    one_way_bias = s1 / n ** 2 * (db * float(ca @ ca) + da * float(cb @ cb) - da * db * s1)
    return t - sketch.size * shared.sketch_variance - one_way_bias


def residual_estimate(shared: SharedMarginals, pair: Pair, model_counts: np.ndarray) -> float:
    """Unbiased estimate of ||C_ab - S_ab||^2 for a 2-way S_ab fixed given the sketch noise.

    AdaFedPrivSyn's update (Algorithm 4): S_ab comes from a synthetic table fitted to other
    measurements, independent of this pair's sketch noise, so only m * s2 is subtracted.
    """
    sketch = shared.sketches[pair]
    t = float(np.sum((sketch - shared.project(pair, model_counts)) ** 2))
    return t - sketch.size * shared.sketch_variance


def measure(parts: list[np.ndarray], sizes: tuple[int, ...], marginals: list[tuple[int, ...]],
            rho: Fraction) -> tuple[list[NoisyMarginal], Fraction]:
    """Each client releases the listed marginals with N_Z(0, M / (2 rho)); the server sums.

    One record moves each listed marginal by one cell: squared sensitivity M = len(list).
    """
    sigma2 = Fraction(len(marginals)) / (2 * rho)
    out = []
    for attrs in marginals:
        shape = tuple(sizes[a] for a in attrs)
        total = np.zeros(int(np.prod(shape)))
        for part in parts:
            total += marginal_counts(part, attrs, sizes) + discrete_gaussian_vector(
                sigma2, total.size)
        out.append(NoisyMarginal(tuple(attrs), total.reshape(shape),
                                 len(parts) * float(sigma2)))
    return out, Fraction(len(marginals)) / (2 * sigma2)


def combine(first: NoisyMarginal, second: NoisyMarginal) -> NoisyMarginal:
    """Inverse-variance weighted mean of two independent measurements of one marginal."""
    w1, w2 = 1 / first.variance, 1 / second.variance
    counts = (w1 * first.counts + w2 * second.counts) / (w1 + w2)
    return NoisyMarginal(first.attrs, counts, 1 / (w1 + w2))


def one_way_marginals(shared: SharedMarginals) -> list[NoisyMarginal]:
    return [NoisyMarginal((a,), c.copy(), shared.one_way_variance)
            for a, c in enumerate(shared.one_way)]


def spend_remainder(parts: list[np.ndarray], sizes: tuple[int, ...],
                    measured: list[NoisyMarginal], one_way: list[NoisyMarginal],
                    rho_left: Fraction) -> tuple[list[NoisyMarginal], list[NoisyMarginal],
                                                 Fraction]:
    """Re-measure the selected 2-ways (or the 1-ways if none) with budget the selection left.

    Not in the paper, which leaves unselected budget unspent; spending it keeps every
    method at exactly its budget and only lowers the noise of what was already chosen.
    """
    if rho_left <= 0:
        return measured, one_way, Fraction(0)
    if measured:
        again, spent = measure(parts, sizes, [m.attrs for m in measured], rho_left)
        return [combine(m, g) for m, g in zip(measured, again)], one_way, spent
    again, spent = measure(parts, sizes, [m.attrs for m in one_way], rho_left)
    return measured, [combine(m, g) for m, g in zip(one_way, again)], spent
