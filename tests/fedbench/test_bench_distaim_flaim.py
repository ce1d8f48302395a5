"""The FLAIM-setting bench's own measures: FLAIM's workload rule, its error metric over the
workload's downward closure, and its heterogeneity measure of a split (Table 4)."""

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.distaim.bench_distaim_flaim import errors_of, flaim_workload, heterogeneity  # noqa: E402


def test_flaim_workload_is_the_seeded_choice_over_combinations():
    picked = flaim_workload(14, 64, 123)
    every = list(itertools.combinations(range(14), 3))
    index = np.random.default_rng(123).choice(len(every), 64, replace=False)
    assert picked == [every[i] for i in index]
    assert len(set(picked)) == 64
    assert flaim_workload(5, 0, 123) == list(itertools.combinations(range(5), 3))


def test_errors_average_over_the_downward_closure():
    real = np.array([[0, 0, 0], [1, 1, 1], [1, 0, 1], [0, 1, 0]])
    synth = np.array([[0, 0, 0], [0, 0, 0], [1, 1, 1], [1, 1, 1]])
    sizes = (2, 2, 2)

    def l1(clique):
        def dist(records):
            flat = np.ravel_multi_index(records[:, list(clique)].T, [2] * len(clique))
            return np.bincount(flat, minlength=2 ** len(clique)) / len(records)
        return np.abs(dist(real) - dist(synth)).sum()

    closure = [c for k in (1, 2, 3) for c in itertools.combinations(range(3), k)]
    errors = errors_of(real, synth, sizes, [(0, 1, 2)])
    assert errors["flaim"] == pytest.approx(np.mean([l1(c) for c in closure]))
    assert errors["three_way"] == pytest.approx(l1((0, 1, 2)))


@pytest.mark.parametrize("seed", [0, 1])
def test_heterogeneity_is_the_mean_tv_over_one_to_three_way_marginals(seed):
    rng = np.random.default_rng(seed)
    sizes = (3, 2, 4, 2)
    records = np.stack([rng.integers(0, s, 60) for s in sizes], axis=1)
    owner = rng.permutation(np.arange(60) % 4)
    cliques = [c for k in (1, 2, 3) for c in itertools.combinations(range(4), k)]

    def dist(rows, clique):
        flat = np.ravel_multi_index(rows[:, list(clique)].T, [sizes[a] for a in clique])
        return np.bincount(flat, minlength=int(np.prod([sizes[a] for a in clique]))) / len(rows)

    by_hand = np.mean([np.mean([0.5 * np.abs(dist(records[owner == k], c)
                                             - dist(records, c)).sum() for c in cliques])
                       for k in range(4)])
    assert heterogeneity(records, owner, sizes) == pytest.approx(by_hand)


def test_heterogeneity_is_zero_for_identical_clients():
    block = np.array([[0, 1, 0], [1, 0, 1], [1, 1, 0]])
    records = np.concatenate([block, block])
    assert heterogeneity(records, np.array([0, 0, 0, 1, 1, 1]), (2, 2, 2)) == pytest.approx(0)
