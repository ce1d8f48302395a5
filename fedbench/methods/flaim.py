"""FLAIM (Maddock, Cormode, Maple et al., "FLAIM: AIM-based synthetic data generation in the
federated setting", Algorithm 1), the loop shared by ``naive-flaim`` and ``augflaim-private``.

Per global round t = 1..T: each client joins with probability p; each participant selects one
marginal (s = 1 local step) with the exponential mechanism on ITS OWN data,

    u(q; D_k) = w_q (||M_q(D_k) - c_k M_q(model)||_1 - sqrt(2/pi) sigma n_q - tau_k(q)),

where tau_k = 0 (NaiveFLAIM) or, for AugFLAIM (private), the heterogeneity proxy
tau_k(q) = (1/|q|) sum_{j in q} ||M_j(D_k) - c_k M_j(model)||_1 (the 1-way candidates are then
dropped from the local choices, since every participant sends all 1-ways each round).
Marginals are aggregated by secure aggregation and the server adds the noise: for each chosen
q, sum over the clients that chose q of M_q(D_k), plus one N_Z(0, sigma^2) per cell (the
central-noise model the paper assumes: SecAgg hides each client's marginal, the server sees
the noiseless sum of the clients that chose q and releases it noised). AugFLAIM (private)
also aggregates every 1-way this way each round. The server re-fits the global model
(Private-PGM, ``synthesis.aim.GraphicalModel``) on everything measured so far.

Budget (paper's Lemma 4.1 with s = 1, Gaussian share r = 0.9 as in AIM): T selections of
eps^2 / 8 each (clients' selections in one round touch disjoint records: parallel
composition), and d + T (NaiveFLAIM) or d + T (1 + d) (AugFLAIM private) unit-sensitivity
measurements at one sigma (a record lies in one client, so in one aggregated marginal per
selection). The last round's sigma takes the exact remainder. Sensitivity of the local
scores: max_q w_q (Naive) and 2 max_q w_q (AugFLAIM: M(D_k) enters twice), as in the paper.

Deviations, stated:
* Client sizes. Local scores compare a client's counts with the global model's answers, which
  must be scaled to the client's size (c_k = n_k / N); the paper's weights also use sizes. We
  release the vector of client sizes once with discrete Gaussian noise (L2 sensitivity 1;
  ``SIZE_SHARE`` = 1% of rho) and use the noisy sizes everywhere, so nothing else depends on a
  true size.
* Scale of aggregated marginals. A sum over the clients that chose q covers N_q records, not
  the union's N, while PGM fits the union's marginals; so each aggregate is multiplied by
  N / N_q (noisy sizes) and the paper's weights apply to that union-scale measurement:
  NaiveFLAIM 1 / sigma, AugFLAIM (private) N_q / (N sigma) -- the latter is exactly the
  rescaled measurement's noise level, the former ignores the amplification by N / N_q. That
  is NaiveFLAIM's weakness under size skew, and it shows: on Adult, 16 clients, Dirichlet
  beta = 0.1, eps = 0.5, a clique picked only by a tiny client enters at full weight and
  NaiveFLAIM's 2-way error is 1.61 (AugFLAIM: 0.14). (Reading alpha in each aggregate's own
  scale instead -- Naive then exact, AugFLAIM doubly down-weighting small aggregates -- gave
  Naive 0.12 there but made AugFLAIM ignore single-client pairs with 4 uniform clients:
  2-way 0.112 vs 0.100; we keep the reading where the weights multiply union-scale
  measurements, as PGM's objective does.)
* Fixed T (``ROUNDS`` = 10, the paper's main setting), no annealing (the paper recommends
  against it for FLAIM); 2-way workload (the paper: random 3-way); client sampling uses a
  seeded numpy generator (no amplification by sampling is claimed, so it need not be secret);
  with p < 1 a round nobody joins draws one participant instead.
* Model initialisation: every 1-way, aggregated over all clients, at the round sigma.

Bytes per client: 8 bytes per counted cell sent to secure aggregation (plus the size),
averaged over clients; SecAgg's own overhead and the model download are not counted.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from feddpsyn.dp.discrete_gaussian import CSPRNG, ExactSampler
from feddpsyn.dp.exponential_mechanism import em_rho, exponential_mechanism
from feddpsyn.synthesis.aim import completion, eps_within, exact_scores, workload_weights
from feddpsyn.synthesis.graphical_model import GraphicalModel, marginal_counts
from feddpsyn.synthesis.marginals import NoisyMarginal

ROUNDS = 10
SIZE_SHARE = Fraction(1, 100)
GAUSSIAN_SHARE = Fraction(9, 10)
_GRID = 2 ** 20


@dataclass
class FlaimResult:
    records: np.ndarray
    rho_spent: Fraction
    bytes_per_client: float
    selected: list[list[tuple[int, ...]]] = field(default_factory=list)  # per round


def flaim(records: np.ndarray, owner: np.ndarray, domain_sizes: tuple[int, ...],
          rho: Fraction, variant: str, *, rounds: int = ROUNDS, participation: float = 1.0,
          round_iters: int | None = None, final_iters: int | None = None, seed: int = 0,
          sampler: ExactSampler = CSPRNG, say=lambda _: None) -> FlaimResult:
    if variant not in ("naive", "private"):
        raise ValueError("variant is 'naive' or 'private'")
    if rounds < 1 or not 0 < participation <= 1:
        raise ValueError("rounds >= 1 and 0 < participation <= 1")
    private = variant == "private"
    rng = np.random.default_rng(seed)
    sizes = tuple(int(s) for s in domain_sizes)
    d = len(sizes)
    workload = list(itertools.combinations(range(d), 2))
    candidates = completion(workload)
    weights = workload_weights(candidates, workload)
    one_ways = [c for c in candidates if len(c) == 1]
    local = [(c, w) for c, w in zip(candidates, weights) if not (private and len(c) == 1)]
    sensitivity = (2 if private else 1) * max(w for _, w in local)
    clients = sorted(np.unique(owner).tolist())
    data = {k: np.asarray(records)[np.asarray(owner) == k] for k in clients}
    counts_cache: dict[tuple, np.ndarray] = {}

    def counts(k, clique):
        if (k, clique) not in counts_cache:
            counts_cache[(k, clique)] = marginal_counts(data[k], clique, sizes)
        return counts_cache[(k, clique)]

    sent = {k: 0 for k in clients}
    # 1. Noisy client sizes (the vector has L2 sensitivity 1 under add/remove of a record).
    rho_size = SIZE_SHARE * rho
    sigma2_size = 1 / (2 * rho_size)
    noisy_size = {k: max(1, len(data[k]) + sampler.discrete_gaussian(sigma2_size))
                  for k in clients}
    for k in clients:
        sent[k] += 1
    n_hat = sum(noisy_size.values())
    used = rho_size
    # 2. The plan: n1 + T (naive) or n1 + T (1 + n1) (private) measurements at one sigma.
    rest = rho - rho_size
    per_round = 1 + (len(one_ways) if private else 0)
    sigma2 = Fraction(len(one_ways) + rounds * per_round) / (2 * GAUSSIAN_SHARE * rest)
    eps = eps_within((1 - GAUSSIAN_SHARE) * rest / rounds, em_rho)

    def aggregate(clique, members, var):
        total = sum(counts(k, clique) for k in members)
        for k in members:
            sent[k] += len(total)
        noisy = total + sampler.discrete_gaussian_vector(var, len(total))
        n_q = sum(noisy_size[k] for k in members)
        scale = n_hat / n_q  # the union's marginal, estimated from the members' sum
        # PGM weight alpha = 1/stddev: N_q / (N sigma) (private) or 1 / sigma (naive)
        stddev2 = float(var) * scale ** 2 if private else float(var)
        return NoisyMarginal(clique, (noisy * scale).reshape([sizes[a] for a in clique]),
                             stddev2)

    measurements = [aggregate(c, clients, sigma2) for c in one_ways]
    used += len(one_ways) / (2 * sigma2)
    model = GraphicalModel(sizes)
    model.fit(measurements, round_iters)
    chosen_log = []
    for t in range(1, rounds + 1):
        final = t == rounds
        if final:  # the last round spends exactly what is left
            sigma2 = per_round / (2 * (rho - used - em_rho(eps)))
        members = [k for k in clients if participation >= 1 or rng.random() < participation]
        if not members:
            members = [clients[int(rng.integers(len(clients)))]]
        answers = {c: model.answer(c) for c, _ in local}
        one_way_answers = {c: model.answer(c) for c in one_ways} if private else {}
        picks: dict[tuple, list] = {}
        for k in members:
            c_k = noisy_size[k] / model.total
            extra = None
            if private:
                het = {}
                for (j,) in one_ways:
                    m = np.rint(one_way_answers[(j,)] * c_k * _GRID).astype(np.int64)
                    het[j] = Fraction(int(np.abs(counts(k, (j,)) * _GRID - m).sum()), _GRID)
                extra = [sum((het[j] for j in c), Fraction(0)) / len(c) for c, _ in local]
            scores = exact_scores([counts(k, c) for c, _ in local],
                                  [answers[c] * c_k for c, _ in local],
                                  [w for _, w in local], sigma2, extra)
            pick = local[exponential_mechanism(scores, eps, sensitivity, sampler)][0]
            picks.setdefault(pick, []).append(k)
        used += em_rho(eps)  # one selection per client, clients hold disjoint records
        for clique, who in sorted(picks.items()):
            measurements.append(aggregate(clique, who, sigma2))
        if private:
            for c in one_ways:
                measurements.append(aggregate(c, members, sigma2))
        used += per_round / (2 * sigma2)
        if used > rho:
            raise AssertionError("FLAIM ledger exceeded its budget")  # cannot happen
        chosen_log.append(sorted(picks))
        model.fit(measurements, final_iters if final else round_iters)
        say(f"[{variant}-flaim] round {t}: {sorted(picks)} sigma={math.sqrt(sigma2):.1f}")
    if used != rho:
        raise AssertionError(f"FLAIM ended with {used} of {rho} spent")
    synth = model.sample(int(round(n_hat)), rng)
    return FlaimResult(synth, used, 8 * float(np.mean(list(sent.values()))), chosen_log)
