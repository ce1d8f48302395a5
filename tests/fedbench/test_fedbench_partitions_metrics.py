"""Partitions and utility metrics of the benchmark harness, against hand-computed values."""

import numpy as np
import pytest

from feddpsyn.fedbench.metrics import random_range_queries, range_query_error, wasserstein_one_way
from feddpsyn.fedbench.partitions import (
    PartitionError,
    dirichlet_label,
    feature_skew,
    natural,
    uniform,
)


def test_uniform_fills_every_client_and_is_roughly_balanced():
    owner = uniform(10_000, 16, np.random.default_rng(0))
    counts = np.bincount(owner, minlength=16)
    assert counts.min() > 0 and counts.max() < 1.2 * counts.mean()


def test_dirichlet_skew_grows_as_beta_shrinks():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 20_000)

    def skew(beta: float) -> float:
        owner = dirichlet_label(labels, 8, beta, np.random.default_rng(2))
        share = np.array([labels[owner == c].mean() for c in range(8)])
        return float(np.abs(share - labels.mean()).mean())

    assert skew(0.1) > 2 * skew(100.0)
    with pytest.raises(PartitionError):
        dirichlet_label(labels[:5], 8, 0.1, rng)


def test_feature_skew_separates_obvious_clusters():
    rng = np.random.default_rng(3)
    a = np.stack([rng.integers(0, 2, 300), rng.integers(0, 2, 300)], 1)
    b = np.stack([rng.integers(2, 4, 300), rng.integers(2, 4, 300)], 1)
    owner = feature_skew(np.concatenate([a, b]), (4, 4), 2, rng)
    assert len(set(owner[:300])) == 1 and len(set(owner[300:])) == 1
    assert owner[0] != owner[-1]


def test_natural_split_by_owner_column():
    assert natural(np.array(["b", "a", "b", "c"])).tolist() == [1, 0, 1, 2]


def test_range_query_by_hand():
    real = np.array([[0, 0], [1, 1], [2, 1], [2, 0]])
    synth = np.array([[0, 0], [0, 0], [2, 1], [2, 1]])
    query = [(0, np.array([False, True, True])), (1, np.array([False, True]))]
    # real: rows 1, 2 satisfy -> 0.5; synth: row 2, 3 -> 0.5; difference 0.
    assert range_query_error(real, synth, [query]) == 0.0
    query2 = [(0, np.array([True, False, False]))]
    # real 0.25, synth 0.5.
    assert range_query_error(real, synth, [query2]) == 0.25


def test_random_queries_are_ranges_on_ordered_and_sets_on_categorical():
    qs = random_range_queries((5, 4), (True, False), dims=2, count=200,
                              rng=np.random.default_rng(0))
    for q in qs:
        (a0, m0), (a1, m1) = q
        assert (a0, a1) == (0, 1) and m0.any() and m1.any()
        idx = np.flatnonzero(m0)
        assert (np.diff(idx) == 1).all()  # contiguous range


def test_wasserstein_by_hand():
    real = np.array([[0], [2]])
    synth = np.array([[2], [2]])
    # Positions 0, 0.5, 1: real mass 1/2 at 0 and 1/2 at 1; synth all at 1 -> W1 = 0.5.
    assert wasserstein_one_way(real, synth, (3,), (True,)) == pytest.approx(0.5)
    # Categorical: total variation 0.5.
    assert wasserstein_one_way(real, synth, (3,), (False,)) == pytest.approx(0.5)


def test_ml_efficacy_rewards_tables_that_keep_the_label_relation():
    from feddpsyn.fedbench.ml_efficacy import ml_efficacy

    rng = np.random.default_rng(0)
    n = 3000
    x = rng.integers(0, 4, (n, 3))
    y = ((x[:, 0] + x[:, 1]) >= 4).astype(int)
    real = np.column_stack([x, y])
    train, test = real[:2000], real[2000:]
    broken = train.copy()
    broken[:, 3] = rng.permutation(broken[:, 3])  # label independent of the features
    sizes = (4, 4, 4, 2)
    good = ml_efficacy(train, test, sizes, target=3)
    bad = ml_efficacy(broken, test, sizes, target=3)
    assert good["gbt"] > 0.95 and good["linear"] > 0.8
    assert bad["gbt"] < good["gbt"] - 0.2
    rmse = ml_efficacy(train, test, sizes, target=0, task="regression")
    assert 0 < rmse["gbt"] < 1.5 and 0 < rmse["linear"] < 1.5
