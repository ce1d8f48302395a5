import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from feddpsyn.dp.discrete_gaussian import ExactSampler
from feddpsyn.dp.permute_and_flip import permute_and_flip, pf_probabilities


@pytest.mark.parametrize("scores, eps", [([0.0, 1.0, 2.5, 0.5], "1"), ([3.0, 3.0, 0.0], "2/3"),
                                         ([0.0, -4.0, -1.0, -2.0, -0.5], "3")])
def test_frequencies_match_the_exact_pf_distribution(scores, eps):
    sampler = ExactSampler(random.Random(len(scores)).randrange)
    n = 20_000
    picks = np.bincount([permute_and_flip(scores, eps, 1, sampler) for _ in range(n)],
                        minlength=len(scores))
    expected = np.array(pf_probabilities(scores, float(Fraction(eps)), 1.0)) * n
    assert abs(expected.sum() - n) < 1e-6
    assert stats.chisquare(picks, expected).pvalue > 1e-6


def test_log_ratio_between_neighbouring_score_vectors_is_within_eps():
    """Scores of neighbours differ by at most Delta = 1 each: the output ratio <= e^eps."""
    import math

    eps = 1.0
    a, b = [0.0, 1.0, 2.0], [1.0, 0.0, 2.0]
    pa, pb = pf_probabilities(a, eps, 1.0), pf_probabilities(b, eps, 1.0)
    assert max(abs(math.log(x / y)) for x, y in zip(pa, pb)) <= eps + 1e-12


def test_exactness_guards():
    with pytest.raises(TypeError):
        permute_and_flip([0.0, 1.0], 1.0, 1)
    with pytest.raises(ValueError):
        permute_and_flip([], 1, 1)
