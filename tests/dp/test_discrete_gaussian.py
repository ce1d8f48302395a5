"""Statistical tests of the exact samplers (fixed seeds, false-alarm rate alpha = 1e-6)."""

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from feddpsyn.dp.discrete_gaussian import ExactSampler, bernoulli_exp, discrete_gaussian

ALPHA = 1e-6


def seeded(seed: int) -> ExactSampler:
    return ExactSampler(random.Random(seed).randrange)


def gaussian_pmf(sigma2: float, support: np.ndarray) -> np.ndarray:
    weights = np.exp(-support.astype(float) ** 2 / (2 * sigma2))
    full = np.arange(-60 * int(math.sqrt(sigma2) + 1), 60 * int(math.sqrt(sigma2) + 1) + 1)
    return weights / np.exp(-full.astype(float) ** 2 / (2 * sigma2)).sum()


def laplace_pmf(scale: float, support: np.ndarray) -> np.ndarray:
    q = math.exp(-1 / scale)
    return (1 - q) / (1 + q) * q ** np.abs(support)


def chi_square_pvalue(samples: np.ndarray, pmf) -> float:
    """Chi-square goodness of fit, pooling the tails so every expected count is >= 5."""
    n = len(samples)
    lo, hi = int(samples.min()), int(samples.max())
    support = np.arange(lo - 50, hi + 51)
    expected = pmf(support) * n
    keep = expected >= 5
    inner = support[keep]
    observed = np.array([(samples == v).sum() for v in inner], dtype=float)
    exp_inner = expected[keep]
    # Everything outside the kept range forms one pooled cell.
    observed = np.append(observed, n - observed.sum())
    exp_inner = np.append(exp_inner, n - exp_inner.sum())
    if exp_inner[-1] < 5:
        observed[-2] += observed[-1]
        exp_inner[-2] += exp_inner[-1]
        observed, exp_inner = observed[:-1], exp_inner[:-1]
    return float(stats.chisquare(observed, exp_inner).pvalue)


@pytest.mark.parametrize("sigma2", [Fraction(1, 4), Fraction(2), Fraction(25), Fraction(1000, 7)])
def test_discrete_gaussian_matches_its_pmf(sigma2):
    sampler = seeded(int(sigma2 * 1000))
    samples = sampler.discrete_gaussian_vector(sigma2, 20_000)
    p = chi_square_pvalue(samples, lambda s: gaussian_pmf(float(sigma2), s))
    assert p > ALPHA, f"chi-square p={p}"
    # The variance of N_Z(0, s2) is at most s2 (CKS20, Prop. 19) and close to it for s2 >= 1.
    assert abs(samples.mean()) < 5 * math.sqrt(float(sigma2) / len(samples)) + 1e-9


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(3), Fraction(17, 3)])
def test_discrete_laplace_matches_its_pmf(scale):
    sampler = seeded(7 + scale.numerator)
    samples = np.array([sampler.discrete_laplace(scale) for _ in range(20_000)])
    p = chi_square_pvalue(samples, lambda s: laplace_pmf(float(scale), s))
    assert p > ALPHA, f"chi-square p={p}"


def test_discrete_gaussian_ks_against_cdf():
    sigma2 = Fraction(9)
    samples = seeded(3).discrete_gaussian_vector(sigma2, 20_000)
    support = np.arange(-200, 201)
    cdf = np.cumsum(gaussian_pmf(9.0, support))
    empirical = np.array([(samples <= v).mean() for v in support])
    # Dvoretzky-Kiefer-Wolfowitz: P[sup |F_n - F| > e] <= 2 exp(-2 n e^2) = alpha.
    bound = math.sqrt(math.log(2 / ALPHA) / (2 * len(samples)))
    assert np.max(np.abs(empirical - cdf)) < bound


def test_log_ratio_of_neighbouring_outputs_is_the_gaussian_one():
    """ln P[Y=y] - ln P[Y=y+1] = (2y+1)/(2 sigma2): the quantity the zCDP claim rests on."""
    sigma2 = Fraction(4)
    samples = seeded(11).discrete_gaussian_vector(sigma2, 200_000)
    for y in range(-3, 3):
        a, b = (samples == y).sum(), (samples == y + 1).sum()
        observed = math.log(a / b)
        expected = (2 * y + 1) / (2 * float(sigma2))
        # Delta-method standard error of a log count ratio: sqrt(1/a + 1/b); z for alpha=1e-6.
        assert abs(observed - expected) < 4.9 * math.sqrt(1 / a + 1 / b)


def test_bernoulli_exp_frequency():
    sampler = seeded(5)
    for gamma in (Fraction(0), Fraction(1, 3), Fraction(5, 2)):
        n = 20_000
        hits = sum(sampler.bernoulli_exp(gamma) for _ in range(n))
        p = math.exp(-float(gamma))
        assert stats.binomtest(hits, n, p).pvalue > ALPHA


def test_floats_are_refused_and_csprng_default_works():
    with pytest.raises(TypeError):
        discrete_gaussian(2.0)
    with pytest.raises(ValueError):
        bernoulli_exp(Fraction(-1))
    assert isinstance(discrete_gaussian(Fraction(3)), int)


def test_a_broken_random_source_fails_closed():
    from feddpsyn.dp.discrete_gaussian import SamplerExhausted

    stuck = ExactSampler(lambda n: 0)  # always 0: every Bernoulli(p > 0) succeeds forever
    with pytest.raises(SamplerExhausted):
        stuck.discrete_gaussian(Fraction(4))
