import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from feddpsyn.dp.discrete_gaussian import ExactSampler, SamplerExhausted
from feddpsyn.dp.exponential_mechanism import em_probabilities, em_rho, exponential_mechanism


@pytest.mark.parametrize("scores, eps, sens", [
    ([0.0, 1.0, 2.5, 0.5], "1", 1),
    ([3.0, 3.0, 0.0], "2/3", 1),
    ([0.0, -4.0, -1.0, -2.0, -0.5], "3", 2),
    ([10.0, 0.0, 5.0, 9.5, 7.25, 1.0, 0.0, 2.0], "1/2", "1/3"),
])
def test_frequencies_match_the_ideal_softmax(scores, eps, sens):
    sampler = ExactSampler(random.Random(7 + len(scores)).randrange)
    n = 20_000
    picks = np.bincount([exponential_mechanism(scores, eps, sens, sampler) for _ in range(n)],
                        minlength=len(scores))
    expected = np.array(em_probabilities(scores, float(Fraction(eps)),
                                         float(Fraction(sens)))) * n
    assert stats.chisquare(picks, expected).pvalue > 1e-6


def test_neighbouring_scores_change_probabilities_by_at_most_e_eps():
    eps = 1.0
    a, b = [0.0, 1.0, 2.0], [1.0, 0.0, 2.0]  # each score moved by at most Delta = 1
    pa, pb = em_probabilities(a, eps, 1.0), em_probabilities(b, eps, 1.0)
    assert max(abs(math.log(x / y)) for x, y in zip(pa, pb)) <= eps + 1e-12


def test_guards_and_charge():
    with pytest.raises(TypeError):
        exponential_mechanism([0.0, 1.0], 1.0, 1)
    with pytest.raises(ValueError):
        exponential_mechanism([], 1, 1)
    assert em_rho(Fraction(2)) == Fraction(1, 2)

    class Broken:  # a source that never accepts: the bounded loop must raise, not return
        def __call__(self, n):
            return n - 1

    with pytest.raises(SamplerExhausted):
        exponential_mechanism([1000, 0], 1, 1, ExactSampler(Broken()))
