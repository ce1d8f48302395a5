"""In-MPC discrete Gaussian (distaim.secure_noise): exact tables, TV bound, KS and std tests."""

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from feddpsyn.distaim.mpc_runtime import SECINT_BITS, local_runtime
from feddpsyn.distaim.secure_noise import (
    AliasTable,
    GaussianPlan,
    convolution_tv,
    discrete_gaussian_pmf,
    secure_discrete_gaussian,
)

ALPHA = 1e-6


def test_alias_table_realizes_its_weights_exactly():
    weights = [5, 0, 17, 2, 40]
    scale = 64 - sum(weights)
    weights[0] += scale  # total 2^(k+b) with k=2, b=4
    table = AliasTable.from_weights([-2, -1, 0, 1, 2], weights, k=3, b=3)
    dist = table.distribution()
    assert dist == {y: Fraction(w, 64) for y, w in zip([-2, -1, 0, 1, 2], weights) if w}


@pytest.mark.parametrize("sigma2", [Fraction(2), Fraction(400), Fraction(4001, 10),
                                    Fraction(115**2), Fraction(700**2)])
def test_plan_tv_bound_is_tiny_and_levels_compose_to_sigma2(sigma2):
    plan = GaussianPlan.for_sigma2(sigma2)
    assert plan.tv_bound < Fraction(1, 10**17)
    assert sum(level.scale**2 * level.tau2 for level in plan.levels) == sigma2
    assert all(level.table.k <= 9 for level in plan.levels)


def test_convolution_tv_detects_a_wrong_variance():
    # the bound is computed, not assumed: a mismatched target is far away
    assert convolution_tv(6, Fraction(100), Fraction(400), Fraction(5000)) > Fraction(1, 100)


def _jittered_ks(samples, sigma2):
    # X + U(0,1) is continuous with a piecewise-linear CDF, so KS is exact (not conservative)
    y_max = int(np.abs(samples).max()) + 5
    pmf = np.array([float(p) for p in discrete_gaussian_pmf(sigma2, y_max)[0]])
    cdf_left = np.concatenate(([0.0], np.cumsum(pmf)))  # F(y-1) at index y + y_max

    def cdf(x):
        base = np.clip(np.floor(x).astype(int) + y_max, 0, len(pmf) - 1)
        return cdf_left[base] + (x - np.floor(x)) * pmf[base]

    jitter = np.random.default_rng(7).random(len(samples))
    return stats.kstest(samples + jitter, cdf).pvalue


@pytest.mark.parametrize("sigma2,n", [(Fraction(9), 3000), (Fraction(60**2), 1500)])
def test_in_mpc_gaussian_matches_distribution_and_std(sigma2, n):
    rt = local_runtime(prss_seed=b"noise-" + str(sigma2).encode())
    secint = rt.SecInt(SECINT_BITS)
    plan = GaussianPlan.for_sigma2(sigma2)
    samples = np.array(rt.run(rt.output(secure_discrete_gaussian(rt, secint, plan, n))),
                       dtype=np.int64)
    assert _jittered_ks(samples, sigma2) > ALPHA
    var = samples.var(ddof=1)
    z = (var - float(sigma2)) / (float(sigma2) * np.sqrt(2 / (n - 1)))
    assert abs(z) < 5.0  # two-sided alpha ~ 6e-7
    assert abs(samples.mean()) < 5.0 * np.sqrt(float(sigma2) / n)
