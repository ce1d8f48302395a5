"""Exponential mechanism in MPC (distaim.secure_selection): frequencies vs the ideal softmax."""

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from feddpsyn.distaim.mpc_runtime import EM_SECINT_BITS, SECINT_BITS, local_runtime
from feddpsyn.distaim.secure_selection import SelectionPlan, secure_exponential_mechanism

ALPHA = 1e-6


def test_plan_bounds():
    plan = SelectionPlan.build(Fraction(1, 100), sensitivity=3000, candidates=120)
    assert plan.tv_bound < Fraction(1, 10**12)
    assert plan.factors[0] < 1 << 56 and list(plan.factors) == sorted(plan.factors, reverse=True)
    with pytest.raises(ValueError):
        SelectionPlan.build(0, 1, 5)


@pytest.mark.parametrize("scores,epsilon,sensitivity", [
    ([0, 5, 10, -4, -100000], Fraction(1), 5),
    ([7, 7, 7], Fraction(1, 3), 2),
])
def test_em_frequencies_match_softmax(scores, epsilon, sensitivity):
    draws = 800
    rt = local_runtime(prss_seed=b"em-" + str(scores).encode())
    secint, em = rt.SecInt(SECINT_BITS), rt.SecInt(EM_SECINT_BITS)
    plan = SelectionPlan.build(epsilon, sensitivity, len(scores))
    index = secure_exponential_mechanism(rt, secint.array(np.array(scores)), plan, em,
                                         draws=draws)
    picks = np.array(rt.run(rt.output(index)), dtype=int)
    counts = np.bincount(picks, minlength=len(scores))
    logits = float(epsilon) * np.array(scores, dtype=float) / (2 * sensitivity)
    ideal = np.exp(logits - logits.max())
    ideal /= ideal.sum()
    live = ideal > 1e-12
    assert counts[~live].sum() == 0
    assert stats.chisquare(counts[live], ideal[live] * draws).pvalue > ALPHA
