"""The central PrivSyn references spend the eps asked: re-accounted with dp-accounting alone.

Each test rebuilds the privacy-loss distribution of a calibrated budget from the noises it
states (the library's own constructors, not ``fedbench.methods.central_accounting``'s) and
checks the eps at delta lies in [0.97, 1] x the eps asked; and that the run-time publication
of central PrivSyn is covered by the Gaussian bound it is accounted with, whatever the
selection keeps.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld.common import DifferentialPrivacyParameters

from feddpsyn.dp.gaussian_domination import dominated, mu_at_most
from feddpsyn.dp.privsyn_allocation import allocation_weight
from feddpsyn.fedbench.methods.central_accounting import (
    discrete_gaussian_pair,
    dominated_sigma2,
    fixed_budget,
    privsyn_budget,
)
from feddpsyn.fedbench.methods.central_privsyn_all import marginal_weights

DELTA = 1e-5


def _sigma(sigma2: Fraction) -> float:
    sigma = math.sqrt(float(sigma2))
    while Fraction(sigma) ** 2 > sigma2:
        sigma = math.nextafter(sigma, 0.0)
    return sigma


def _discrete(sigma2: Fraction, sensitivity: int, count: int):
    one = pld_lib.from_discrete_gaussian_mechanism(
        _sigma(sigma2), sensitivity=sensitivity, pessimistic_estimate=True,
        value_discretization_interval=1e-4, use_connect_dots=True)
    return one.self_compose(count) if count > 1 else one


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0])
def test_central_privsyn_budget_reaccounts_within_the_band(epsilon):
    pairs, one_ways = 15, 6
    budget = privsyn_budget(epsilon, DELTA, pairs, one_ways)
    assert budget.rho_select + budget.rho_publish == budget.rho
    assert budget.rho > budget.rho_zcdp  # the zCDP conversion left budget unspent
    # the scores: m discrete Gaussians of integer sensitivity 4, the rho_select they stand for
    assert budget.sigma2_select == Fraction(16 * pairs) / (2 * budget.rho_select)
    scores = _discrete(budget.sigma2_select, 4, pairs)
    publication = pld_lib.from_gaussian_mechanism(
        _sigma(1 / (2 * budget.rho_publish)), sensitivity=1, pessimistic_estimate=True,
        value_discretization_interval=1e-4, use_connect_dots=True).compose(
        pld_lib.from_privacy_parameters(DifferentialPrivacyParameters(0.0, budget.eta),
                                        value_discretization_interval=1e-4))
    eps = scores.compose(publication).get_epsilon_for_delta(DELTA)
    assert 0.97 * epsilon <= eps <= epsilon
    assert budget.epsilon == pytest.approx(eps, rel=1e-6)


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0])
def test_central_privsyn_all_budget_reaccounts_within_the_band(epsilon):
    weights = marginal_weights([2, 10, 10, 4], [20, 20, 8, 100, 40, 40])
    budget = fixed_budget(epsilon, DELTA, weights)
    assert sum(1 / (2 * s) for s in budget.sigma2s) == budget.rho
    total = None
    for sigma2 in sorted(set(budget.sigma2s)):
        part = _discrete(sigma2, 1, budget.sigma2s.count(sigma2))
        total = part if total is None else total.compose(part)
    eps = total.get_epsilon_for_delta(DELTA)
    assert 0.97 * epsilon <= eps <= epsilon


@pytest.mark.parametrize("selected", [0, 1, 7, 15])
def test_publication_is_covered_by_its_bound_whatever_is_selected(selected):
    """The 1-ways and any number of selected pairs share rho_publish exactly; each noise is
    dominated by the Gaussian of its share at eta_each, and the etas add to at most eta."""
    one_way_cells, pair_cells = [2, 10, 10, 4, 9, 10], [100, 20, 40, 8, 90, 18, 36, 100, 20,
                                                         40, 100, 90, 9, 4, 100]
    budget = privsyn_budget(1.0, DELTA, len(pair_cells), len(one_way_cells))
    cells = one_way_cells + pair_cells[:selected]
    weights = [allocation_weight(c) for c in cells]
    shares = [budget.rho_publish * w / sum(weights) for w in weights]
    assert sum(shares) == budget.rho_publish
    assert len(cells) * budget.eta_each <= budget.eta * (1 + 1e-12)
    for rho_i in shares:
        sigma2 = dominated_sigma2(rho_i, budget.eta_each)
        assert sigma2 >= 1 / (2 * rho_i)
        assert dominated(discrete_gaussian_pair(sigma2), mu_at_most(rho_i), budget.eta_each)


@pytest.mark.parametrize("rho", [2.0, 0.5, 0.1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6])
def test_a_little_more_variance_makes_the_discrete_gaussian_gaussian_dominated(rho):
    """N_Z(0, 1/(2 rho) + 3/32) is (sqrt(2 rho), eta)-dominated at every rho tried (the least
    extra variance that passes is about Sheppard's 1/12, just above it for sigma2 below a few
    thousand); without it a small sigma is not (the discrete Gaussian's steps cost)."""
    rho = Fraction(rho).limit_denominator(10 ** 12)
    assert dominated_sigma2(rho, 1e-11) == 1 / (2 * rho) + Fraction(3, 32)
    if rho >= Fraction(1, 100):
        assert not dominated(discrete_gaussian_pair(1 / (2 * rho)), mu_at_most(rho), 1e-11)


def test_central_privsyn_spends_its_calibrated_budget_on_a_small_table():
    from feddpsyn.fedbench.methods import METHODS
    from feddpsyn.fedbench.runner import check_budget
    from feddpsyn.params.schema import Schema

    rng = np.random.default_rng(5)
    a = rng.integers(0, 3, 600)
    records = np.stack([a, (a + rng.integers(0, 2, 600)) % 3, rng.integers(0, 2, 600)], axis=1)
    schema = Schema.from_dict({"columns": [
        {"name": "a", "type": "categorical", "i2s": ["x", "y", "z"]},
        {"name": "b", "type": "categorical", "i2s": ["x", "y", "z"]},
        {"name": "c", "type": "categorical", "i2s": ["u", "v"]}]})
    for method in ("central-privsyn", "central-privsyn-all"):
        result = METHODS[method](records, np.zeros(600, dtype=int), schema, 1.0, DELTA, 0)
        check_budget(method, result)
        assert result.rho_spent == result.rho_budget
        assert 0.97 <= result.notes["epsilon_accounted"] <= 1.0
        assert result.notes["accounting"] == "pld"
