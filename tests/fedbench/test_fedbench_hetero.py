"""HeteroFedSyn, DPDSyn and CAPE DP-CDA baselines: budgets, outputs, estimators, noise."""

import math
from fractions import Fraction

import numpy as np
import pytest

from feddpsyn.dp.discrete_gaussian import discrete_gaussian_vector
from feddpsyn.fedbench.methods import METHODS
from feddpsyn.fedbench.methods.cape_dpcda import cape_noise
from feddpsyn.fedbench.methods.exact_dp_sgd import (
    GRID_BITS,
    _rounded_class_vectors,
    predict,
    train_softmax_regression,
)
from feddpsyn.fedbench.methods.fedprivsyn import static_selection
from feddpsyn.fedbench.methods.heterofedsyn_common import (
    indif2_estimate,
    marginal_counts,
    share_marginals,
)
from feddpsyn.params.schema import Schema

SCHEMA = Schema.from_dict({"columns": [
    {"name": "a", "type": "categorical", "i2s": ["x", "y", "z"]},
    {"name": "b", "type": "continuous", "min": 0, "max": 9, "bins": 4},
    {"name": "c", "type": "categorical", "i2s": ["p", "q"]},
    {"name": "label", "type": "categorical", "i2s": ["no", "yes"]}]})
OURS = ["fedprivsyn", "adafedprivsyn", "dpdsyn", "dpdsyn-dp", "cape-dpcda"]


def _tiny(n=600, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = np.clip(a + rng.integers(0, 2, n), 0, 3)  # b depends on a
    c = rng.integers(0, 2, n)
    label = (b >= 2).astype(np.int64) ^ (rng.random(n) < 0.1)
    return np.stack([a, b, c, label], axis=1), rng.integers(0, 3, n)


@pytest.mark.parametrize("method", OURS)
def test_each_method_is_in_domain_and_spends_exactly_its_budget(method):
    records, owner = _tiny()
    result = METHODS[method](records, owner, SCHEMA, 2.0, 1e-6, seed=0)
    # Every method's accounting is a sum of exact rationals: equality, not approximation.
    assert result.rho_spent == result.rho_budget
    synth = result.records
    assert synth.ndim == 2 and synth.shape[1] == 4 and len(synth) > 0
    assert (synth >= 0).all() and (synth < np.array(SCHEMA.domain_sizes)).all()


def test_dpdsyn_is_marked_not_dp_and_the_repair_is_not():
    records, owner = _tiny()
    assert METHODS["dpdsyn"](records, owner, SCHEMA, 1.0, 1e-6, 0).notes["dp"] == \
        "not DP (features)"
    assert METHODS["dpdsyn-dp"](records, owner, SCHEMA, 1.0, 1e-6, 0).notes["dp"] == "zCDP"
    # As published, each feature column is a permutation of the real one: the 1-ways leak.
    synth = METHODS["dpdsyn"](records, owner, SCHEMA, 1.0, 1e-6, 0).records
    for j in range(3):
        assert (np.sort(synth[:, j]) == np.sort(records[:, j])).all()


def test_adaptive_selection_stays_within_one_third_of_the_pairs():
    records, owner = _tiny()
    result = METHODS["adafedprivsyn"](records, owner, SCHEMA, 8.0, 1e-6, 0)
    assert len(result.notes["selected"]) <= math.ceil(6 / 3)


def test_static_selection_is_privsyns_greedy():
    # Noise per cell of a selected pair: K * k / (2 rho_3) = k for K = 2, rho_3 = 1.
    scores = {(0, 1): 1e6, (0, 2): 10.0, (1, 2): -5.0}
    cells = {p: 4 for p in scores}
    # {(0,1)}: 10 + 0 + 1*4 = 14 < 1e6 + 10; adding (0,2): 0 + 2*8 = 16 > 14: stop.
    assert static_selection(scores, cells, 2, Fraction(1)) == [(0, 1)]
    assert static_selection({(0, 1): 1.0}, {(0, 1): 4}, 2, Fraction(1)) == []


def test_indif2_estimate_is_unbiased_and_the_plug_in_is_not():
    sizes = (3, 4)  # 12 cells, sketched to 5 coordinates: the projection is exercised
    records, owner = _tiny(400, seed=3)
    records = records[:, :2]
    parts = [records[owner == c] for c in range(3)]
    counts = marginal_counts(records, (0, 1), sizes).reshape(3, 4).astype(float)
    n = len(records)
    truth = float(np.sum((counts - np.outer(counts.sum(1), counts.sum(0)) / n) ** 2))
    estimates, plug_in = [], []
    trials = 200
    for t in range(trials):
        # Loud sketches (rho_2 = 1/1000) so the plug-in's bias m * s2 shows; quiet 1-ways so
        # the noisy N^ (a stated deviation from the paper's public N) stays negligible.
        shared = share_marginals(parts, sizes, Fraction(1), Fraction(1, 1000),
                                 np.random.default_rng(t), sketch_length=5)
        estimates.append(indif2_estimate(shared, (0, 1)))
        ind = np.outer(shared.one_way[0], shared.one_way[1]) / shared.total
        plug_in.append(float(np.sum((shared.sketches[(0, 1)]
                                     - shared.project((0, 1), ind)) ** 2)))
    for values, unbiased in ((np.array(estimates), True), (np.array(plug_in), False)):
        half_width = 4.9 * values.std(ddof=1) / math.sqrt(trials)  # alpha ~ 1e-6
        assert (abs(values.mean() - truth) < half_width) == unbiased


def test_cape_correlated_noise_sums_to_exactly_zero_and_the_aggregate_keeps_only_z():
    clients, size = 4, 3000
    sigma2_z, sigma2_e = Fraction(25), Fraction(400)
    noise, correlated = cape_noise(clients, size, sigma2_z, sigma2_e, holder=2)
    assert noise.dtype == np.int64 and correlated.dtype == np.int64
    assert (correlated.sum(axis=0) == 0).all()
    aggregate = noise.sum(axis=0)
    assert (aggregate == noise[2] - correlated[2]).all()
    # Sample variances at alpha ~ 1e-6 (relative sd sqrt(2 / 3000) = 0.026, z = 4.9).
    assert abs(np.var(aggregate) / 25 - 1) < 0.13
    assert abs(np.var(noise[0]) / 400 - 1) < 0.13
    assert abs(np.var(noise[2]) / (25 + 3 * 400) - 1) < 0.13


def test_dp_sgd_rounded_gradients_never_exceed_the_integer_bound():
    rng = np.random.default_rng(4)
    active = 5
    bound = active * 4 ** GRID_BITS
    residual = rng.uniform(-1, 1, (2000, 3))
    residual[:10] = [1.0, -1.0, 0.0]  # the largest possible softmax residual
    u = _rounded_class_vectors(residual, active, bound, float(active))
    assert u.dtype == np.int64
    assert (active * np.sum(u * u, axis=1) <= bound).all()
    # Clipping leaves small residuals (norm < 1) alone, up to the grid rounding.
    small = np.linalg.norm(residual, axis=1) < 0.9
    assert np.abs(u[small] - residual[small] * 2 ** GRID_BITS).max() <= 0.5


def test_dp_sgd_learns_a_clear_rule_and_charges_exactly():
    rng = np.random.default_rng(5)
    n = 3000
    x = rng.integers(0, 3, n)
    y = (x == 2).astype(np.int64)
    records = np.stack([x, y], axis=1)
    sizes = (3, 2)
    noise_draw = int(discrete_gaussian_vector(Fraction(1), 1)[0])  # the caller's noisy count
    weights, spent = train_softmax_regression(records, sizes, 1, Fraction(1), n + noise_draw)
    assert spent == Fraction(1)
    assert (predict(weights, records, sizes, 1) == y).mean() > 0.99
