"""Selection in clear: the plan's accounting, PrivSyn's greedy rule, the rounds' model."""

import random
from fractions import Fraction

import numpy as np
import pytest

from feddpsyn.crypto.tfhe_permute_and_flip import em_rounds_model, thresholds
from feddpsyn.dp.pair_selection import expected_counts_for_pairs, greedy_select, indif_scores
from feddpsyn.params.selection_plan import SelectionPlan


def test_plan_charges_at_most_its_budget_and_counts_the_numerical_loss():
    rho = Fraction(1, 1000)
    plan = SelectionPlan.build("em", pairs=66, max_rows=740, rho=rho, rounds=12)
    assert plan.rho_charged <= rho
    assert plan.rho_charged > Fraction(99, 100) * rho
    report = plan.report([24] * 66)
    assert report["numerical_extra_epsilon"] == pytest.approx(4 * plan.step.eta * 12)
    assert 0 < report["fhe_delta"] < 1e-6
    assert plan.score_bits == (2 * 740).bit_length() and 2 ** (plan.indif_bits - 1) > 740
    greedy = SelectionPlan.build("noisy-greedy", pairs=66, max_rows=740, rho=rho, rounds=None)
    assert greedy.rho_charged == rho and greedy.noise_sigma2 == Fraction(66) / (2 * rho)
    assert SelectionPlan.build("none", 66, 740, Fraction(0), None).rho_charged == 0
    with pytest.raises(ValueError, match="selection is one of"):
        SelectionPlan.build("softmax", 66, 740, rho, None)
    with pytest.raises(ValueError, match="between 1 and 65"):
        SelectionPlan.build("em", 66, 740, rho, rounds=66)


def test_greedy_keeps_strong_pairs_and_drops_weak_ones():
    scores = {(0, 1): 5000.0, (0, 2): 4000.0, (1, 2): 3.0}
    cells = {p: 100 for p in scores}
    assert greedy_select(scores, cells, Fraction(1, 10)) == [(0, 1), (0, 2)]
    assert greedy_select({p: 1.0 for p in scores}, cells, Fraction(1, 10)) == []


def test_expected_counts_keep_indif_within_the_compiled_width():
    one_way = [np.array([600.0, 500.0]), np.array([700.0, 400.0])]
    expected = expected_counts_for_pairs(one_way, [(0, 1)], max_rows=1000)
    assert expected[(0, 1)].sum() <= 1000
    counts = {(0, 1): np.array([[400, 100], [300, 200]])}
    score = indif_scores(counts, expected)[(0, 1)]
    assert 0 <= score <= 2 * 1000


def test_em_rounds_choose_without_replacement_and_prefer_high_scores():
    plan = SelectionPlan.build("em", pairs=6, max_rows=1000, rho=Fraction(1, 2), rounds=3)
    c = thresholds(plan.shape, plan.step.epsilon)
    source = random.Random(3)
    firsts = []
    for _ in range(60):
        picks = em_rounds_model([10, 1900, 30, 1800, 20, 1700], plan.shape, c, 3,
                                source.getrandbits)
        assert len(set(picks)) == 3
        firsts.append(picks)
    assert sum(sorted(p) == [1, 3, 5] for p in firsts) > 50  # eps per round ~0.58, gaps ~1700
