"""``dpdsyn`` and ``dpdsyn-dp``: DPDSyn (Jia et al. 2026), a DP classifier labels records.

DPDSyn (Algorithm 2): train a classifier for the downstream task with DP-SGD on the private
table; build synthetic features by shuffling every feature column of the *raw* table
independently; label them with the classifier's prediction. The paper claims the shuffle
"breaks correlations" and so leaks nothing, but each shuffled column is the exact multiset
of the real values (every 1-way marginal released with no noise, including outliers and
rare values): that stage is **not differentially private**. ``dpdsyn`` implements it as
published and says so in ``notes["dp"]``; its ``rho_spent`` covers only the classifier and
the record count.

``dpdsyn-dp`` is the DP repair: features are drawn independently from DP 1-way marginals
(exact discrete Gaussian, squared sensitivity d - 1), which is what column-wise shuffling
approximates anyway.

Both run as a trusted curator on the union (DPDSyn is a centralized method; ``owner`` is
ignored). Classifier: :mod:`fedbench.methods.exact_dp_sgd` (full-batch, exact zCDP, softmax
regression instead of the paper's MLP/SVM/FT-Transformer, to keep a run within seconds).
Budget: ``dpdsyn`` 2% for the noisy record count the optimiser divides by (the paper takes
N as public), 98% classifier; ``dpdsyn-dp`` 20% feature 1-ways (their totals give N^), 80%
classifier.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from feddpsyn.dp.discrete_gaussian import discrete_gaussian_vector
from feddpsyn.fedbench.methods.base import MethodResult, budget_rho
from feddpsyn.fedbench.methods.exact_dp_sgd import predict, train_softmax_regression
from feddpsyn.fedbench.methods.target import target_column
from feddpsyn.params.schema import Schema

NOT_DP = "not DP (features)"


def dpdsyn(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
           delta: float, seed: int) -> MethodResult:
    rho = budget_rho(epsilon, delta)
    rho_count = rho / 50
    sizes = schema.domain_sizes
    target = target_column(schema)
    noisy_total = len(records) + int(discrete_gaussian_vector(1 / (2 * rho_count), 1)[0])
    weights, spent = train_softmax_regression(records, sizes, target, rho - rho_count,
                                              float(noisy_total))
    rng = np.random.default_rng(seed)
    synth = np.stack([rng.permutation(records[:, j]) for j in range(len(sizes))], axis=1)
    synth[:, target] = predict(weights, synth, sizes, target)
    return MethodResult(synth, rho_count + spent, rho, notes={"dp": NOT_DP})


def dpdsyn_dp(records: np.ndarray, owner: np.ndarray, schema: Schema, epsilon: float,
              delta: float, seed: int) -> MethodResult:
    rho = budget_rho(epsilon, delta)
    rho_features = rho / 5
    sizes = schema.domain_sizes
    target = target_column(schema)
    features = [j for j in range(len(sizes)) if j != target]
    sigma2 = Fraction(len(features)) / (2 * rho_features)
    rng = np.random.default_rng(seed)
    one_way = {}
    for j in features:
        counts = np.bincount(records[:, j], minlength=sizes[j])
        one_way[j] = np.maximum(counts + discrete_gaussian_vector(sigma2, sizes[j]), 0)
    total = max(float(np.mean([c.sum() for c in one_way.values()])), 1.0)
    weights, spent = train_softmax_regression(records, sizes, target, rho - rho_features, total)
    rows = max(1, int(round(total)))
    synth = np.zeros((rows, len(sizes)), dtype=np.int64)
    for j, counts in one_way.items():
        p = counts / counts.sum() if counts.sum() > 0 else np.full(sizes[j], 1 / sizes[j])
        synth[:, j] = rng.choice(sizes[j], size=rows, p=p)
    synth[:, target] = predict(weights, synth, sizes, target)
    return MethodResult(synth, Fraction(len(features)) / (2 * sigma2) + spent, rho,
                        notes={"dp": "zCDP"})
