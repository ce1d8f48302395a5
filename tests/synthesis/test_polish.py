"""The sample's local search (``synthesis.polish``): it only ever lowers the records' 2-way
distance to the targets, reaches a table's own marginals from its shuffled columns, keeps
the rows and the domains, is reproducible from its generator, and the model's sampler with
it is never further from the model than the draw it starts from."""

import itertools

import numpy as np
import pytest

from feddpsyn.synthesis.graphical_model import GraphicalModel, marginal_counts
from feddpsyn.synthesis.marginals import NoisyMarginal
from feddpsyn.synthesis.polish import distance, polish

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
    import feddpsyn.synthesis.polish as module

    truth = table(1000, 12)
    start = table(1000, 13)
    monkeypatch.setattr(module, "MAX_READS", 1000 * 3 * sum(SIZES) - 1)
    out, moves, sweeps = polish(start, pair_targets(truth), SIZES, np.random.default_rng(1))
    assert (moves, sweeps) == (0, 0) and np.array_equal(out, start)
    monkeypatch.setattr(module, "MAX_READS", 2 * 1000 * 3 * sum(SIZES))
    assert polish(start, pair_targets(truth), SIZES, np.random.default_rng(1))[2] <= 2


def _released(truth: np.ndarray, pairs, sd: float, seed: int) -> list[NoisyMarginal]:
    rng = np.random.default_rng(seed)
    out = [NoisyMarginal((a,), marginal_counts(truth, (a,), SIZES) + rng.normal(0, sd, SIZES[a]),
                         sd ** 2) for a in range(len(SIZES))]
    out += [NoisyMarginal(p, (marginal_counts(truth, p, SIZES)
                              + rng.normal(0, sd, SIZES[p[0]] * SIZES[p[1]]))
                          .reshape(SIZES[p[0]], SIZES[p[1]]), sd ** 2) for p in pairs]
    return out


def test_left_out_pairs_the_model_misses_become_the_searchs_targets():
    from feddpsyn.synthesis.consistency import make_consistent
    from feddpsyn.synthesis.pgm import fit_model, fit_pgm, held_out_targets

    rng = np.random.default_rng(20)
    truth = table(4000, 21)
    truth[:, 2] = rng.integers(0, 2, len(truth))  # column 2 independent of the others
    released = _released(truth, [(0, 1), (1, 2)], 40.0, 22)
    consistent, total = make_consistent(released, SIZES)
    # A cap no pair fits: the model is the product of the 1-ways, every pair left out.
    tiny = 1e-12
    model = fit_model(released, consistent, total, SIZES, max_model_mb=tiny)
    named = held_out_targets(model, consistent, SIZES)
    # (0, 1) is far from independent: the model misses it by much more than its noise;
    # (1, 2) is independent: the model's product answers it within its noise (the
    # sample's own departure from independence is below it at this sd).
    assert set(named) == {(0, 1)}
    expected = next(m for m in consistent if m.attrs == (0, 1)).counts
    assert np.array_equal(named[0, 1], np.maximum(expected, 0).reshape(3, 4))
    # The sample follows the released (0, 1), not the model's product.
    rows = len(truth)
    records = fit_pgm(released, consistent, total, SIZES, rows, np.random.default_rng(23),
                      max_model_mb=tiny)
    plain = model.sample(rows, np.random.default_rng(23))
    want = marginal_counts(truth, (0, 1), SIZES)
    got = np.abs(marginal_counts(records, (0, 1), SIZES) - want).sum()
    before = np.abs(marginal_counts(plain, (0, 1), SIZES) - want).sum()
    assert got < 0.25 * before


def test_a_target_of_the_wrong_shape_is_refused():
    truth = table(500, 30)
    model = GraphicalModel(SIZES)
    model.fit(_released(truth, [(0, 1)], 2.0, 31), iters=50)
    with pytest.raises(ValueError, match="shape"):
        model.sample(100, np.random.default_rng(1), targets={(0, 1): np.ones((4, 3))})
