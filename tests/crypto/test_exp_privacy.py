"""TFHE-EXP's integer model and the privacy-loss numerics (bound vs exact)."""

import itertools
import math

import numpy as np
import pytest

from feddpsyn.crypto.exp_privacy import bernoulli_product_eta, bound, e_num, exact, numerics_row
from feddpsyn.crypto.tfhe_exp import (
    ExpParams,
    fixed_point_weight,
    fixed_point_weights,
    rounding_constants,
)


def test_vector_model_equals_the_scalar_big_integer_model():
    p = ExpParams(eps=0.7, nb=9, kappa=12, kappa_prime=tuple(range(10, 19)), lam=6)
    w = fixed_point_weights(p)
    assert [fixed_point_weight(p, a) for a in range(2 ** 9)] == w.tolist()


def test_weights_approximate_the_exponential_and_clamp():
    p = ExpParams.uniform(1.0, nb=10, kappa=16, lam=6)
    a = np.arange(2 ** 10)
    w = fixed_point_weights(p, a)
    ideal = 2 ** 16 * np.exp(-a / 2 ** 6)
    assert np.all(np.diff(w) <= 0)
    assert np.abs(w - ideal).max() <= 10 * 16  # a few units per rounding step
    assert fixed_point_weights(p, np.array([5000])) == fixed_point_weights(p, np.array([1023]))


def test_rounding_constants_are_platform_independent():
    p = ExpParams.uniform(1.0, nb=3, kappa=13, lam=1)
    assert rounding_constants(p) == [round(2 ** 13 * math.exp(-2 ** (j - 1))) for j in range(3)]


@pytest.mark.parametrize("eps, nb, kappa, lam", [
    (e, nb, k, lam) for e, nb, k, lam in itertools.product(
        [0.1, 0.3, 1.0, 3.0, 10.0], [8, 12, 17], [8, 13, 16], [8, 13, 17, 20])])
def test_exact_never_exceeds_the_theorem_c1_bound(eps, nb, kappa, lam):
    p = ExpParams.uniform(eps, nb, kappa, lam)
    b, x = bound(p), exact(p)
    assert x <= b or (math.isinf(x) and math.isinf(b))
    assert x >= 0
    # The weights our encrypted selection samples (the product taken exactly) stay under the
    # theorem's bound too; they beat SubRoutine 1's own arithmetic only sometimes, because
    # its intermediate roundings can cancel the constants' errors.
    ours = bernoulli_product_eta(p)
    assert 0 <= ours <= b or math.isinf(b)


def test_a_weight_that_rounds_to_zero_is_infinite_loss():
    p = ExpParams.uniform(10.0, nb=12, kappa=8, lam=4)
    assert (fixed_point_weights(p) == 0).any()
    assert math.isinf(exact(p)) and math.isinf(bound(p))
    assert math.isinf(e_num(0.5))


def test_numerics_row_fields():
    row = numerics_row(ExpParams.uniform(1.0, 17, 13, 17), e_prev=0.0)
    assert {"eps", "nb", "kappa", "lambda", "bound", "exact", "total"} <= set(row)
    assert row["total"] == pytest.approx(1.0 + 4 * row["exact"])


def test_numerics_command_prints_json_rows():
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "feddpsyn.cli", "numerics", "--json", "--epsilon",
                          "0.1,1,10", "--nb", "17", "--kappa", "13", "--lambda", "17"],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    rows = json.loads(out)
    assert [r["eps"] for r in rows] == [0.1, 1.0, 10.0]
    assert rows[0]["exact"] <= rows[0]["bound"]
    assert rows[2]["exact"] is None  # eps=10, lambda=17: a weight rounds to 0
