"""The samplers' integer form (``dp.discrete_gaussian``) against CKS20's Algorithms 1-3 written
on ``Fraction``, as the samplers were before: the same draws from the same source, in the same
order, give the same samples, so the distribution tests of ``test_discrete_gaussian.py`` and
every earlier seeded result carry over."""

import math
import random
from fractions import Fraction

import pytest

from feddpsyn.dp.discrete_gaussian import ExactSampler


class _FractionForm:
    """CKS20's Algorithms 1-3 written on Fraction, as the samplers were before they moved to
    integer pairs: the reference the integer form must replay draw for draw."""

    def __init__(self, randbelow):
        self.randbelow = randbelow

    def bernoulli(self, p):
        return int(self.randbelow(p.denominator) < p.numerator)

    def unit(self, gamma):
        k = 1
        while True:
            if not self.bernoulli(gamma / k):
                return k % 2
            k += 1

    def bernoulli_exp(self, gamma):
        gamma = Fraction(gamma)
        for _ in range(math.floor(gamma)):
            if not self.unit(Fraction(1)):
                return 0
        return self.unit(gamma - math.floor(gamma))

    def laplace(self, scale):
        s, t = scale.denominator, scale.numerator
        while True:
            u = self.randbelow(t)
            if not self.bernoulli_exp(Fraction(u, t)):
                continue
            v = 0
            while self.bernoulli_exp(1):
                v += 1
            y = (u + t * v) // s
            negative = self.randbelow(2)
            if negative and y == 0:
                continue
            return -y if negative else y

    def gaussian(self, sigma2):
        t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1
        while True:
            y = self.laplace(Fraction(t))
            if self.bernoulli_exp((abs(y) - sigma2 / t) ** 2 / (2 * sigma2)):
                return y


def _recording(seed: int):
    """A seeded source that also records every bound it was asked for."""
    rng, asked = random.Random(seed), []

    def randbelow(n):
        asked.append(n)
        return rng.randrange(n)
    return randbelow, asked


@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(2), Fraction(25), Fraction(1000, 7),
                                    Fraction(2046), Fraction(164, 3)])
def test_the_integer_form_replays_the_fraction_form_draw_for_draw(sigma2):
    """Same source, same bounds asked in the same order, same samples: the integer form is the
    Fraction form (whose distribution the tests above check), only faster."""
    fast_source, fast_asked = _recording(11)
    slow_source, slow_asked = _recording(11)
    fast, slow = ExactSampler(fast_source), _FractionForm(slow_source)
    assert fast.discrete_gaussian_vector(sigma2, 3_000).tolist() == \
        [slow.gaussian(sigma2) for _ in range(3_000)]
    scale = sigma2 + Fraction(1, 3)
    assert [fast.discrete_laplace(scale) for _ in range(500)] == \
        [slow.laplace(scale) for _ in range(500)]
    gammas = [Fraction(0), Fraction(1), Fraction(5, 2), sigma2 / 7, Fraction(3)]
    assert [fast.bernoulli_exp(g) for g in gammas * 100] == \
        [slow.bernoulli_exp(g) for g in gammas * 100]
    assert fast_asked == slow_asked and len(fast_asked) > 30_000
