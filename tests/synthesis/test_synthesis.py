"""Synthesis from noisy marginals: consistency, GUM, Private-PGM (mbi), evaluation."""

import itertools

import numpy as np
import pytest

from feddpsyn.params.layout import MarginalLayout
from feddpsyn.synthesis.consistency import make_consistent, norm_sub
from feddpsyn.synthesis.evaluate import marginal, workload_error
from feddpsyn.synthesis.marginals import NoisyMarginal
from feddpsyn.synthesis.synthesize import synthesize_records

SIZES = (3, 4, 2, 3)


def correlated_records(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4
    c = (b % 2) ^ (rng.random(n) < 0.1)
    d = np.where(rng.random(n) < 0.8, a, rng.integers(0, 3, n))
    return np.stack([a, b, c.astype(int), d], axis=1)


def noisy_marginals(records: np.ndarray, variance: float, seed: int = 1) -> list[NoisyMarginal]:
    rng = np.random.default_rng(seed)
    layout = MarginalLayout.build(SIZES)
    counts = layout.counts(records)
    return [NoisyMarginal(m.attrs, (counts[m.offset:m.offset + m.size]
                                    + rng.normal(0, np.sqrt(variance), m.size)).reshape(m.shape),
                          variance) for m in layout.marginals]


def independent_error(records: np.ndarray) -> float:
    """Two-way error of a table that keeps every 1-way exactly but no correlation."""
    rng = np.random.default_rng(9)
    shuffled = np.stack([rng.permutation(records[:, j]) for j in range(records.shape[1])], 1)
    return workload_error(records, shuffled, SIZES)["two_way"]


def test_norm_sub_keeps_the_total_and_removes_negatives():
    out = norm_sub(np.array([5.0, -3.0, 2.0, 10.0]), 14.0)
    assert (out >= 0).all() and out.sum() == pytest.approx(14.0)


def test_consistency_makes_totals_and_projections_agree():
    records = correlated_records(2000)
    ms, total = make_consistent(noisy_marginals(records, 400.0), SIZES)
    assert total == pytest.approx(2000, rel=0.1)
    for m in ms:
        assert (m.counts >= 0).all()
        assert m.counts.sum() == pytest.approx(total)
    for attr in range(len(SIZES)):
        projections = [m.counts.sum(axis=tuple(i for i in range(len(m.attrs))
                                                 if m.attrs[i] != attr))
                       for m in ms if attr in m.attrs]
        for p in projections[1:]:
            assert np.abs(p - projections[0]).max() < 0.05 * total


@pytest.mark.parametrize("method", ["gum", "pgm"])
def test_synthesis_recovers_correlations_from_low_noise_marginals(method):
    records = correlated_records(3000)
    ms = noisy_marginals(records, variance=4.0)
    synth = synthesize_records(_schema(), ms, method, 3000, np.random.default_rng(0))
    assert synth.shape == (3000, 4)
    for j, size in enumerate(SIZES):
        assert synth[:, j].min() >= 0 and synth[:, j].max() < size
    error = workload_error(records, synth, SIZES)
    assert error["one_way"] < 0.05
    assert error["two_way"] < 0.3 * independent_error(records)


def _schema():
    from feddpsyn.params.schema import Schema

    return Schema.from_dict({"columns": [
        {"name": f"c{j}", "type": "categorical", "i2s": [str(v) for v in range(s)]}
        for j, s in enumerate(SIZES)]})


def test_workload_error_by_hand():
    real = np.array([[0, 0], [0, 1], [1, 1], [1, 1]])
    synth = np.array([[0, 0], [0, 0], [0, 0], [1, 1]])
    err = workload_error(real, synth, (2, 2))
    # 1-way: attr0 real (.5,.5) vs (.75,.25) -> .5; attr1 real (.25,.75) vs (.75,.25) -> 1.
    assert err["one_way"] == pytest.approx(0.75)
    # 2-way: real (.25,.25,0,.5) vs synth (.75,0,0,.25) -> .5+.25+0+.25 = 1.
    assert err["two_way"] == pytest.approx(1.0)
    assert err["three_way"] == 0.0
    assert marginal(real, (0, 1), (2, 2)).tolist() == [0.25, 0.25, 0.0, 0.5]


def test_three_way_sample_is_fixed():
    sizes = (2,) * 8
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 2, (100, 8)), rng.integers(0, 2, (100, 8))
    assert workload_error(a, b, sizes) == workload_error(a, b, sizes)
    assert len(list(itertools.combinations(range(8), 3))) == 56  # > 50: a sample is drawn


def test_pgm_keeps_the_most_dependent_pairs_within_its_model_size():
    from feddpsyn.synthesis.graphical_model import model_size_mb
    from feddpsyn.synthesis.pgm import dependence, kept_pairs

    records = correlated_records(3000)
    consistent, _ = make_consistent(noisy_marginals(records, variance=4.0), SIZES)
    pairs = [m for m in consistent if len(m.attrs) == 2]
    # Every pair of a 4-attribute table fits a roomy model.
    assert sorted(kept_pairs(consistent, SIZES, 1.0)) == sorted(m.attrs for m in pairs)
    # The full joint is 3 x 4 x 2 x 3 = 72 cells; room for 40 keeps the most dependent pair
    # first, not every pair, and whatever it keeps fits.
    limit = 40 * 8 / 2 ** 20
    kept = kept_pairs(consistent, SIZES, limit)
    strongest = max(pairs, key=dependence).attrs
    assert kept[0] == strongest and len(kept) < len(pairs)
    assert model_size_mb(kept, SIZES) <= limit


def test_pgm_refuses_a_non_positive_model_size():
    from feddpsyn.synthesis.pgm import fit_pgm

    released = noisy_marginals(correlated_records(100), 4.0)
    consistent, total = make_consistent(released, SIZES)
    with pytest.raises(ValueError, match="max_model_mb"):
        fit_pgm(released, consistent, total, SIZES, 100, np.random.default_rng(0),
                max_model_mb=0)


def test_auto_synthesis_is_gum_for_every_pair_at_one_scale_and_pgm_otherwise():
    from feddpsyn.synthesis.synthesize import resolve_method

    every = noisy_marginals(correlated_records(200), 4.0)
    assert resolve_method("auto", every, SIZES) == "gum"
    some = [m for m in every if len(m.attrs) == 1 or m.attrs in {(0, 1), (2, 3)}]
    assert resolve_method("auto", some, SIZES) == "pgm"
    assert resolve_method("gum", some, SIZES) == "gum"
    # Every pair kept by a selection, at budgets that differ by pair: Private-PGM weighs them.
    uneven = [NoisyMarginal(m.attrs, m.counts, m.variance * (2 if m.attrs == (0, 1) else 1))
              for m in every]
    assert resolve_method("auto", uneven, SIZES) == "pgm"
    with pytest.raises(ValueError, match="unknown synthesis method 'mst'"):
        resolve_method("mst", some, SIZES)


def test_gum_from_records_that_already_fit_leaves_them_and_refuses_a_bad_start():
    """Started from records whose exact marginals it is given, GUM has nothing to move: the
    records come back as they were (and the start is not modified); a start of the wrong
    width is refused."""
    from feddpsyn.synthesis.gum import fit_gum

    rng = np.random.default_rng(4)
    sizes = (3, 2, 4)
    start = np.column_stack([rng.integers(0, s, 200) for s in sizes])
    kept = start.copy()
    exact = [NoisyMarginal(c, marginal(start, c, sizes).reshape([sizes[a] for a in c]), 1.0)
             for c in [(0,), (1,), (2,), *itertools.combinations(range(3), 2)]]
    out = fit_gum(exact, sizes, len(start), np.random.default_rng(0), start=start)
    assert (out == kept).all() and (start == kept).all()
    resampled = fit_gum(exact, sizes, 50, np.random.default_rng(0), start=start)
    assert resampled.shape == (50, 3)
    with pytest.raises(ValueError, match="start must be"):
        fit_gum(exact, sizes, 10, np.random.default_rng(0), start=start[:, :2])
