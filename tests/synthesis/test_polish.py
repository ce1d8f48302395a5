"""The sample's local search (``synthesis.polish``): it only ever lowers the records' 2-way
distance to the targets, reaches a table's own marginals from its shuffled columns, keeps
the rows and the domains, is reproducible from its generator, and the model's sampler with
it is never further from the model than the draw it starts from."""

import itertools

import numpy as np
import pytest

from synthesis.graphical_model import GraphicalModel, marginal_counts
from synthesis.marginals import NoisyMarginal
from synthesis.polish import distance, polish

SIZES = (3, 4, 2, 5)


def table(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4
    c = ((b % 2) ^ (rng.random(n) < 0.1)).astype(int)
    d = np.where(rng.random(n) < 0.7, a + c, rng.integers(0, 5, n))
    return np.stack([a, b, c, d], axis=1)


def pair_targets(records: np.ndarray) -> dict:
    return {(a, b): marginal_counts(records, (a, b), SIZES).reshape(SIZES[a], SIZES[b])
            .astype(float) for a, b in itertools.combinations(range(len(SIZES)), 2)}


def test_the_search_lowers_the_distance_and_keeps_rows_and_domains():
    truth = table(2000, 0)
    targets = pair_targets(truth)
    rng = np.random.default_rng(1)
    start = np.stack([rng.permutation(truth[:, j]) for j in range(len(SIZES))], axis=1)
    before = distance(start, targets, SIZES)
    out, moves, sweeps = polish(start, targets, SIZES, np.random.default_rng(2))
    after = distance(out, targets, SIZES)
    assert moves > 0 and sweeps >= 1
    # Independent columns are far from the table's pairs; the search closes most of it.
    assert after < 0.1 * before
    assert out.shape == start.shape
    assert all(out[:, j].min() >= 0 and out[:, j].max() < s for j, s in enumerate(SIZES))
    assert not np.shares_memory(out, start)


def test_records_at_a_local_minimum_are_left_alone():
    truth = table(500, 3)
    out, moves, _ = polish(truth, pair_targets(truth), SIZES, np.random.default_rng(4))
    assert moves == 0 and np.array_equal(out, truth)


def test_the_same_generator_gives_the_same_records():
    truth = table(800, 5)
    start = table(800, 6)
    first = polish(start, pair_targets(truth), SIZES, np.random.default_rng(7))[0]
    second = polish(start, pair_targets(truth), SIZES, np.random.default_rng(7))[0]
    assert np.array_equal(first, second)


def test_every_move_is_an_improvement_so_the_cap_only_stops_it_earlier():
    truth = table(1000, 8)
    targets = pair_targets(truth)
    start = table(1000, 9)
    one = distance(polish(start, targets, SIZES, np.random.default_rng(1), max_sweeps=1)[0],
                   targets, SIZES)
    full = distance(polish(start, targets, SIZES, np.random.default_rng(1))[0], targets, SIZES)
    assert full <= one < distance(start, targets, SIZES)


def test_bad_records_are_refused():
    with pytest.raises(ValueError, match="records must be"):
        polish(np.zeros((3, 2), dtype=int), {}, SIZES, np.random.default_rng(0))
    with pytest.raises(ValueError, match="max_sweeps"):
        polish(table(10, 0), pair_targets(table(10, 0)), SIZES, np.random.default_rng(0),
               max_sweeps=0)


def test_the_models_sample_is_no_further_from_the_model_with_the_search():
    truth = table(3000, 10)
    rng = np.random.default_rng(11)
    measurements = [NoisyMarginal((a,), marginal_counts(truth, (a,), SIZES)
                                  + rng.normal(0, 5, SIZES[a]), 25.0) for a in range(4)]
    measurements += [NoisyMarginal(p, (marginal_counts(truth, p, SIZES)
                                       + rng.normal(0, 5, SIZES[p[0]] * SIZES[p[1]]))
                                   .reshape(SIZES[p[0]], SIZES[p[1]]), 25.0)
                     for p in [(0, 1), (1, 2), (0, 3)]]
    model = GraphicalModel(SIZES)
    model.fit(measurements, iters=200)
    rows = 3000
    targets = {}
    for a, b in itertools.combinations(range(4), 2):
        t = model.answer((a, b)).reshape(SIZES[a], SIZES[b])
        targets[a, b] = t / t.sum() * rows
    drawn = model.sample(rows, np.random.default_rng(12), polish=False)
    searched = model.sample(rows, np.random.default_rng(12))
    assert distance(searched, targets, SIZES) < distance(drawn, targets, SIZES)


def test_a_table_too_large_for_one_sweep_keeps_its_draw(monkeypatch):
    import synthesis.polish as module

    truth = table(1000, 12)
    start = table(1000, 13)
    monkeypatch.setattr(module, "MAX_READS", 1000 * 3 * sum(SIZES) - 1)
    out, moves, sweeps = polish(start, pair_targets(truth), SIZES, np.random.default_rng(1))
    assert (moves, sweeps) == (0, 0) and np.array_equal(out, start)
    monkeypatch.setattr(module, "MAX_READS", 2 * 1000 * 3 * sum(SIZES))
    assert polish(start, pair_targets(truth), SIZES, np.random.default_rng(1))[2] <= 2
