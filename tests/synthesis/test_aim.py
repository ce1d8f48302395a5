"""AIM engine: exact ledger, shapes, fast model answers against mbi, exact selection."""

import itertools
import random
from fractions import Fraction

import numpy as np
from scipy import stats

from feddpsyn.dp.discrete_gaussian import ExactSampler
from feddpsyn.dp.exponential_mechanism import em_probabilities
from feddpsyn.synthesis.aim import PlainOracle, aim, completion, workload_weights
from feddpsyn.synthesis.graphical_model import (
    GraphicalModel,
    eliminate,
    junction_tree_cells,
    marginal_counts,
    merge_measurements,
)
from feddpsyn.synthesis.marginals import NoisyMarginal
from feddpsyn.synthesis.mirror_descent import MirrorDescentPGM

SIZES = (3, 2, 4, 2)


def table(n=800, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = np.where(rng.random(n) < 0.8, a % 2, rng.integers(0, 2, n))
    c = np.where(rng.random(n) < 0.7, 2 * b + rng.integers(0, 2, n), rng.integers(0, 4, n))
    d = rng.integers(0, 2, n)
    return np.stack([a, b, c, d], axis=1)


def chain_measurements(records, seed=1):
    rng = np.random.default_rng(seed)
    cliques = [(0,), (1,), (2,), (3,), (0, 1), (1, 2), (2, 3)]
    return [NoisyMarginal(c, (marginal_counts(records, c, SIZES) + rng.normal(0, 3, np.prod(
        [SIZES[a] for a in c]))).reshape([SIZES[a] for a in c]), 9.0) for c in cliques]


def test_completion_weights_and_model_size():
    workload = [(0, 1), (1, 2)]
    cands = completion(workload)
    assert cands == [(0,), (1,), (2,), (0, 1), (1, 2)]
    assert workload_weights(cands, workload) == [1, 2, 1, 3, 3]
    assert junction_tree_cells([(0, 1), (1, 2), (2, 3)], SIZES) == 6 + 8 + 8
    assert junction_tree_cells([(0, 1), (1, 2), (0, 2)], SIZES) == 24  # triangle: one clique


def test_merge_is_the_inverse_variance_mean():
    a = NoisyMarginal((0,), np.array([1.0, 2.0, 3.0]), 1.0)
    b = NoisyMarginal((0,), np.array([4.0, 5.0, 6.0]), 3.0)
    (m,) = merge_measurements([a, b])
    assert np.allclose(m.counts, (a.counts / 1 + b.counts / 3) / (1 + 1 / 3))
    assert abs(m.variance - 0.75) < 1e-12


def test_engine_spends_exactly_rho_with_right_shapes():
    records = table()
    rho = Fraction(1, 2)
    workload = list(itertools.combinations(range(4), 2))
    oracle = PlainOracle(records, SIZES, ExactSampler(random.Random(3).randrange))
    result = aim(oracle, SIZES, workload, rho, max_rounds=6)
    assert result.rho_spent == rho and result.delta_spent == 0
    assert 1 <= len(result.selected) <= 6
    assert [m.attrs for m in result.measurements[:4]] == [(0,), (1,), (2,), (3,)]
    for m in result.measurements:
        assert m.counts.shape == tuple(SIZES[a] for a in m.attrs)
    assert set(result.selected) <= set(completion(workload))
    synth = result.synthesize()
    assert synth.shape[1] == 4 and (synth >= 0).all() and (synth < np.array(SIZES)).all()
    # the ledger, re-added from the log: 1/(2 sigma2) per measurement + eps^2/8 per selection
    assert sum(1 / (2 * r.sigma2) + (r.epsilon ** 2 / 8 if r.epsilon else 0)
               for r in result.rounds) == rho


def test_engine_charges_what_the_oracle_says():
    records = table(seed=2)

    class Costly(PlainOracle):
        extra_delta = Fraction(1, 10 ** 9)

        def selection_rho(self, epsilon):
            return epsilon ** 2 / 2  # e.g. a generic pure-DP conversion

    rho = Fraction(1, 3)
    result = aim(Costly(records, SIZES, ExactSampler(random.Random(4).randrange)), SIZES,
                 [(0, 1), (2, 3), (1, 2)], rho, max_rounds=4, rounds=4)
    assert result.rho_spent == rho
    assert result.delta_spent == len(result.selected) * Fraction(1, 10 ** 9)
    assert all(r.epsilon ** 2 / 2 <= rho for r in result.rounds if r.epsilon)


def test_fixed_t_mode_does_not_anneal_and_makes_exactly_t_selections():
    records = table(seed=5)
    rho = Fraction(1, 2)
    workload = list(itertools.combinations(range(4), 2))
    for rounds in (3, 7):
        result = aim(PlainOracle(records, SIZES, ExactSampler(random.Random(rounds).randrange)),
                     SIZES, workload, rho, rounds=rounds)
        assert len(result.selected) == rounds and result.rho_spent == rho
        assert not any(r.annealed for r in result.rounds)
        # every selection round but the last (which spends the exact remainder) is alike
        steps = [r for r in result.rounds if r.epsilon is not None]
        assert len({(r.sigma2, r.epsilon) for r in steps[:-1]}) == 1


def test_each_mode_fits_its_rounds_as_documented(monkeypatch):
    """AIM's mode caps each round's fit at ANNEALING_ROUND_ITERS steps (annealing reads how
    far the fit moved: synthesis.aim's docstring) and lets the final fit converge; FLAIM's
    fixed-T mode converges every round; explicit caps win."""
    from feddpsyn.synthesis import aim as engine
    from feddpsyn.synthesis import mirror_descent

    caps = []
    fit = mirror_descent.MirrorDescentPGM.fit

    def recorded(self, measurements, iters=mirror_descent.MAX_ITERS, **kwargs):
        caps.append(iters)
        return fit(self, measurements, iters, **kwargs)

    monkeypatch.setattr(mirror_descent.MirrorDescentPGM, "fit", recorded)
    records = table(seed=8)
    workload = list(itertools.combinations(range(4), 2))

    def run(**kwargs):
        caps.clear()
        aim(PlainOracle(records, SIZES, ExactSampler(random.Random(9).randrange)), SIZES,
            workload, Fraction(1, 2), **kwargs)
        return list(caps)

    annealing = run(max_rounds=4)
    assert annealing[:-1] == [engine.ANNEALING_ROUND_ITERS] * (len(annealing) - 1)
    assert annealing[-1] == mirror_descent.MAX_ITERS and len(annealing) >= 2
    assert set(run(rounds=3)) == {mirror_descent.MAX_ITERS}
    assert run(max_rounds=3, round_iters=7, final_iters=11) == [7, 7, 7, 11]


def _mbi_table(model, clique):
    factor = model.mbi_model.project(tuple(model.names[a] for a in clique))
    names = list(factor.domain.attributes)
    values = np.asarray(factor.values)
    return np.transpose(values, [names.index(model.names[a]) for a in clique]).ravel()


def test_fast_answers_equal_mbi_projection():
    records = table(seed=5)
    model = GraphicalModel(SIZES, backend="mbi")
    model.fit(chain_measurements(records), 300)
    for q in [(0, 3), (3, 0), (0, 2, 3), (1,), (0, 1), (2, 1)]:
        assert np.allclose(model.answer(q), _mbi_table(model, q), atol=1e-6, rtol=0)


def test_numpy_estimator_matches_mbi_and_brute_force():
    records = table(seed=6)
    measurements = chain_measurements(records, seed=7)
    reference = GraphicalModel(SIZES, backend="mbi")
    reference.fit(measurements, 2000)
    ours = GraphicalModel(SIZES)
    ours.fit(measurements, 2000)
    assert abs(ours.total - reference.total) < 1e-6 * reference.total
    for q in [(0,), (1, 2), (0, 3), (0, 2, 3)]:
        gap = np.abs(ours.answer(q) - reference.answer(q)).sum() / reference.total
        assert gap < 2e-3, (q, gap)
    # variable elimination against the brute-force joint of the same potentials
    joint = np.ones(SIZES)
    for attrs, values in ours.pgm.potentials():
        joint = joint * values.reshape([SIZES[a] if a in attrs else 1 for a in range(4)])
    joint /= joint.sum()
    for q in [(0, 3), (3, 0, 2)]:
        brute = joint.sum(axis=tuple(a for a in range(4) if a not in q))
        brute = np.transpose(brute, [sorted(q).index(a) for a in q])
        assert np.allclose(eliminate(ours.pgm.potentials(), q, SIZES), brute, atol=1e-12)


def test_numpy_sampling_follows_the_model():
    records = table(n=3000, seed=8)
    pgm = MirrorDescentPGM(SIZES)
    pgm.fit(merge_measurements(chain_measurements(records, seed=9)), 500)
    synth = pgm.sample(3000, np.random.default_rng(0))
    for q in [(0, 1), (1, 2), (2, 3)]:
        want = pgm.marginal(q).ravel()
        got = marginal_counts(synth, q, SIZES) / 3000
        assert np.abs(want - got).sum() < 0.02  # randomized rounding: close to exact


def test_plain_oracle_select_matches_the_exponential_mechanism():
    records = table(n=300, seed=10)
    sampler = ExactSampler(random.Random(11).randrange)
    oracle = PlainOracle(records, SIZES, sampler)
    cands = [(0,), (1,), (2,), (0, 1), (1, 2)]
    answers = [np.full(int(np.prod([SIZES[a] for a in c])), 300 / np.prod(
        [SIZES[a] for a in c])) for c in cands]
    weights = [Fraction(w) for w in (1, 2, 1, 3, 3)]
    sigma2 = Fraction(4)
    scores = oracle.scores(cands, answers, weights, sigma2)
    eps = Fraction(1, 20)
    n = 4000
    picks = np.bincount([oracle.select(cands, answers, weights, sigma2, eps)
                         for _ in range(n)], minlength=len(cands))
    probs = np.array(em_probabilities([float(s) for s in scores], float(eps), 3.0))
    keep = probs * n >= 5  # chi-square on the cells it can test; the rest pooled
    observed = np.append(picks[keep], picks[~keep].sum())
    expected = np.append(probs[keep] * n, probs[~keep].sum() * n)
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    assert stats.chisquare(observed, expected).pvalue > 1e-6
