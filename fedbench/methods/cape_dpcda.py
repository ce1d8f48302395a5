"""``cape-dpcda``: CAPE-assisted federated DP-CDA (Saha, Tonoy, Imtiaz), adapted to tables.

The published method synthesizes *images*: each client mixes (averages) l random same-class
samples, adds CAPE noise, and the server averages the S clients' vectors for each synthetic
sample (the features stay averages) and decodes the label by argmax. This is our adaptation
of it to a table of binned attributes (the paper evaluates only MNIST / FashionMNIST; there
are no tabular figures):

* Encoding: every feature attribute one-hot (a record is a 0/1 vector with d - 1 ones), so
  mixtures are integer count vectors and the fixed-point grid is the integers. Decoding
  follows the paper's averaging (:func:`decode_mixtures`): a mixture's attribute block,
  averaged, is a distribution over the attribute's values, and the mixture stands for as
  many records, drawn from those averages, as it mixes (an argmax per attribute, our former
  decoding, kept only each mixture's mode: 1-way error 0.35 on Adult). The label needs no
  noise: synthetic sample t of class k mixes only class-k records, so its label is k.
* Mixing: instead of drawing l records per sample with replacement (whose accounting needs
  an RDP subsampling bound), each client assigns each of its class-k records to one of B_k
  blocks uniformly at random, and block b of every client feeds synthetic sample b of class
  k. A record then enters exactly one released vector, so no amplification is needed.
  B_k = floor(N^_k / (S l)) from a noisy class histogram, and l is chosen so that the S l
  records of a sample outweigh the aggregate noise (S l ~ 4 sigma_Z), or larger so that the
  S * T * width exact noise draws stay within a time budget: a function of public values
  and the noisy histogram only.
* Class sizes: T_k follows the noisy class histogram (DP-CDA uses T / K per class, which on a
  table would rewrite the label's distribution).

CAPE noise, exact (Imtiaz et al. 2021, as used by the paper): for every released coordinate
one client s* (public, rotating) adds the aggregate noise Z ~ N_Z(0, sigma_Z^2), and every
client adds a share e_s of zero-sum correlated noise: e_s ~ N_Z(0, sigma_e^2) i.i.d. for
s != s*, e_{s*} = -sum of the others, so sum_s e_s = 0 exactly and the server's sum carries
only Z. (CAPE draws an independent small noise at every client; a sum of discrete Gaussians
is not a discrete Gaussian, so we let the joint noise step emit the aggregate noise as one
draw, which keeps the accounting exact.)

Privacy accounting (zCDP, add/remove, against the aggregator that sees every message; the
released table is post-processing): the messages are a bijection of (their sum, the messages
of the clients s != s*). The sum is F + Z (sensitivity Delta) and the others are v_s + e_s
with noise independent of Z (a record moves one of them by at most Delta), so each release
costs Delta^2 / (2 sigma_Z^2) + Delta^2 / (2 sigma_e^2). The random block of an added record
is a mixture over blocks, each within that bound (Renyi divergence is quasi-convex).
Assumptions (CAPE's): honest-but-curious parties; clients do not collude with the aggregator
(a colluding client reveals its e_s; if all but one collude, that client's message is
protected by Z alone, i.e. the central-level noise). Budget: 5% class histogram, 95% block
mixtures; inside each release 90% of rho goes to Z (aggregate noise 1.11x the central one).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from feddpsyn.dp.discrete_gaussian import discrete_gaussian_vector
from feddpsyn.fedbench.methods.base import MethodResult, budget_rho
from feddpsyn.fedbench.methods.target import target_column
from feddpsyn.fedbench.partitions import one_hot
from feddpsyn.params.schema import Schema

AGGREGATE_SHARE = Fraction(9, 10)  # of each release's rho spent on Z
SIGNAL_TO_NOISE = 4  # S * l ~ SIGNAL_TO_NOISE * sigma_Z records per synthetic sample
MAX_NOISE_DRAWS = 120_000  # S * T * width exact draws, ~10 s; beyond it l grows (fewer T)
BYTES_PER_VALUE = 8


def cape_noise(clients: int, size: int, sigma2_aggregate: Fraction,
               sigma2_correlated: Fraction, holder: int) -> tuple[np.ndarray, np.ndarray]:
    """(noise per client, its zero-sum part), each clients x size, integers.

    Row ``holder`` carries Z plus -(sum of the other shares); every column of the zero-sum
    part adds to exactly 0 and every column of the noise to Z.
    """
    correlated = np.zeros((clients, size), dtype=np.int64)
    for s in range(clients):
        if s != holder:
            correlated[s] = discrete_gaussian_vector(sigma2_correlated, size)
    correlated[holder] = -correlated.sum(axis=0)
    noise = correlated.copy()
    noise[holder] += discrete_gaussian_vector(sigma2_aggregate, size)
    return noise, correlated


def _cape_release(vectors: np.ndarray, sensitivity2: int, rho: Fraction,
                  holder: int) -> tuple[np.ndarray, Fraction]:
    """Sum over clients of their CAPE-noised vectors (clients x size), and its rho."""
    rho_z = rho * AGGREGATE_SHARE
    sigma2_z = Fraction(sensitivity2) / (2 * rho_z)
    sigma2_e = Fraction(sensitivity2) / (2 * (rho - rho_z))
    noise, _ = cape_noise(len(vectors), vectors.shape[1], sigma2_z, sigma2_e, holder)
    messages = vectors + noise
    spent = Fraction(sensitivity2) / (2 * sigma2_z) + Fraction(sensitivity2) / (2 * sigma2_e)
    return messages.sum(axis=0), spent


def decode_mixtures(mixtures: np.ndarray, feature_sizes: tuple[int, ...], labels: np.ndarray,
                    records_per_mixture: list[int], rng: np.random.Generator) -> np.ndarray:
    """Records from the aggregated mixtures, by the paper's averaging (post-processing).

    The server's synthetic sample is the average of the S l mixed records (DP-CDA's
    x_bar = (1/S) sum_s (1/l) sum_j x); for one-hot attributes an attribute's block of that
    average is the mixed records' distribution over its values (noisy: clipped at 0 and
    renormalised, uniform if nothing is left). Each mixture stands for ``records_per_mixture``
    records (its noisy class size over its blocks), drawn attribute by attribute from its
    averages, so the released 1-ways and the class-conditional distributions are kept in
    expectation, where an argmax per attribute keeps only each mixture's mode. Returns the
    feature columns followed by the label.
    """
    starts = np.concatenate([[0], np.cumsum(feature_sizes)])
    counts = np.asarray(records_per_mixture, dtype=np.int64)
    rows = np.repeat(np.arange(len(mixtures)), counts)
    out = np.zeros((len(rows), len(feature_sizes) + 1), dtype=np.int64)
    for i, size in enumerate(feature_sizes):
        block = np.maximum(mixtures[:, starts[i]:starts[i + 1]].astype(float), 0)
        sums = block.sum(axis=1, keepdims=True)
        averages = np.where(sums > 0, block / np.where(sums > 0, sums, 1), 1 / size)
        cumulative = np.cumsum(averages, axis=1)[rows]
        draws = rng.random(len(rows))[:, None] * cumulative[:, -1:]
        out[:, i] = np.minimum((cumulative <= draws).sum(axis=1), size - 1)
    out[:, -1] = np.asarray(labels)[rows]
    return out


def cape_dpcda(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
               delta: float, seed: int) -> MethodResult:
    rho = budget_rho(epsilon, delta)
    rho_classes = rho / 20
    rho_mix = rho - rho_classes
    sizes = schema.domain_sizes
    target = target_column(schema)
    features = [j for j in range(len(sizes)) if j != target]
    feature_sizes = tuple(sizes[j] for j in features)
    rng = np.random.default_rng(seed)
    client_ids = np.unique(owner)
    clients = len(client_ids)
    parts = [records[owner == c] for c in client_ids]
    classes = sizes[target]

    histograms = np.stack([np.bincount(p[:, target], minlength=classes) for p in parts])
    class_counts, spent = _cape_release(histograms, 1, rho_classes,
                                        int(rng.integers(clients)))
    sigma_z = math.sqrt(len(features) / (2 * float(rho_mix * AGGREGATE_SHARE)))
    width = int(sum(feature_sizes))
    max_samples = max(classes, MAX_NOISE_DRAWS // (clients * width))
    noisy_total = max(int(class_counts.sum()), 1)
    mix = max(1, math.ceil(SIGNAL_TO_NOISE * sigma_z / clients),  # l, per client
              math.ceil(noisy_total / (clients * max_samples)))
    blocks = [max(1, int(c) // (clients * mix)) for c in class_counts]

    # One release: every class's blocks side by side, one vector per client.
    offsets = np.concatenate([[0], np.cumsum(blocks)])
    vectors = np.zeros((clients, int(offsets[-1]) * width), dtype=np.int64)
    for s, part in enumerate(parts):
        encoded = one_hot(part[:, features], feature_sizes).astype(np.int64)
        for k in range(classes):
            rows = encoded[part[:, target] == k]
            assigned = rng.integers(blocks[k], size=len(rows))
            sums = np.zeros((blocks[k], width), dtype=np.int64)
            np.add.at(sums, assigned, rows)
            vectors[s, offsets[k] * width:offsets[k + 1] * width] = sums.ravel()
    # A record adds a 0/1 vector with len(features) ones to one block of its client.
    aggregate, cost = _cape_release(vectors, len(features), rho_mix, int(rng.integers(clients)))
    spent += cost

    labels = np.repeat(np.arange(classes), blocks)
    per_mixture = [max(1, round(max(int(class_counts[k]), 0) / blocks[k]))
                   for k in range(classes)]
    decoded = decode_mixtures(aggregate.reshape(-1, width), feature_sizes, labels,
                              [per_mixture[k] for k in labels], rng)
    synth = np.zeros((len(decoded), len(sizes)), dtype=np.int64)
    synth[:, features] = decoded[:, :-1]
    synth[:, target] = decoded[:, -1]
    values = classes + vectors.shape[1]
    return MethodResult(synth, spent, rho, bytes_per_client=float(values * BYTES_PER_VALUE),
                        notes={"mix_per_client": mix, "blocks": blocks})
