"""noisy-greedy's split 2-way release under its Gaussian bound (``dp.gaussian_domination``,
``docs/privacy-plan.md``, "The split 2-way release").

The domination test is checked against the hockey-stick curve computed directly from the
exact pmf on a dense grid of eps; the split release is checked for every selection of a
small schema (every group's shape dominated at its own budget, the budgets adding up to the
release's, within the envelope's circuit), and the plan accounted with its bound spends
the eps asked.
"""

import math
from fractions import Fraction

import numpy as np
import pytest

from feddpsyn.dp.gaussian_domination import bound_delta, dominated, mu_at_most, shape_dominated
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape
from feddpsyn.dp.privsyn_allocation import allocation_weight
from feddpsyn.params.noise_rules import GAUSSIAN_BOUND_SHARE, bound_eta, dominated_shape
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.privacy_record import accounted_epsilon, plan_mechanisms
from feddpsyn.params.schema import Schema
from feddpsyn.params.session_plan import SessionPlan

MIXED = Schema.from_dict({"name": "mixed", "columns": [
    {"name": f"m{i}", "type": "categorical", "i2s": list("abcdef"[:size])}
    for i, size in enumerate((2, 3, 4, 6))]})


def _hockey_stick(shape: JointNoiseShape, eps: np.ndarray) -> np.ndarray:
    """delta_Z(eps) of (Z, Z + 1), straight from the exact integer pmf."""
    counts = shape.counts()
    total = float(2 ** (shape.uniforms * shape.bits))
    p = np.array(counts + [0], dtype=float) / total
    q = np.array([0] + counts, dtype=float) / total
    return np.array([np.maximum(p - math.exp(e) * q, 0).sum() for e in eps])


@pytest.mark.parametrize("uniforms,bits", [(16, 6), (52, 4), (86, 2), (40, 1)])
def test_domination_agrees_with_the_hockey_stick_curve(uniforms, bits):
    shape = JointNoiseShape(uniforms, bits)
    sigma = math.sqrt(shape.variance)
    eta = 1e-8
    # The most private Gaussian it is dominated by, found by bisection on the test.
    lo, hi = 0.3 * sigma, 1.2 * sigma
    assert dominated(shape.pair(), 1 / lo, eta) and not dominated(shape.pair(), 1 / hi, eta)
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if dominated(shape.pair(), 1 / mid, eta) else (lo, mid)
    grid = np.linspace(0, 12 / lo + 2, 4001)
    curve = _hockey_stick(shape, grid)
    # Dominated: the curve is below the bound everywhere on the grid ...
    assert np.all(curve <= bound_delta(1 / lo, eta, grid) * (1 + 1e-9))
    # ... and just past the edge of domination it is not (the test is tight).
    assert np.any(curve > bound_delta(1 / (hi * 1.001), eta, grid))


def test_two_widths_fill_the_bits_a_one_width_shape_cannot():
    """At a budget between two widths the cap on bits per count leaves a one-width shape too
    few uniforms; the search's two-width answer is dominated by the exact test, has less
    variance, and stays within the caps."""
    rho, eta = Fraction(1, 2 * 15030), 1e-8
    one = dominated_shape(rho, eta, 256, 8160, 128, mixed=False)
    two = dominated_shape(rho, eta, 256, 8160, 128)
    assert one is not None and two is not None and two.wider > 0
    assert two.variance < one.variance * Fraction(9, 10)
    assert dominated(two.pair(), mu_at_most(rho), eta)
    assert two.ciphertexts <= 256 and two.span <= 8160 and max(two.weights()) <= 128
    # Fewer narrower uniforms beside the same wider ones are not dominated (the fewest).
    fewer = JointNoiseShape(two.uniforms - 2, two.bits, two.wider)
    assert not dominated(fewer.pair(), mu_at_most(rho), eta)


def test_a_shape_with_more_uniforms_stays_dominated():
    """The bisections rely on it: one more uniform is independent noise added."""
    mu = mu_at_most(Fraction(1, 2000))
    found = [n for n in range(2, 80, 2) if shape_dominated(n, 4, mu, 1e-8)]
    assert found and found == list(range(found[0], 80, 2))


def _plan(eps: float) -> SessionPlan:
    # Without the 1-way top-up: its groups are PrivSyn's over the pairs alone (the top-up's
    # own enumeration is tests/params/test_one_way_topup.py's).
    return SessionPlan.build(PlanRequest(MIXED, eps, 1e-6, 2000, parameter_set="test-small",
                                         selection="noisy-greedy", noise="auto",
                                         one_way_topup=False))


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_every_selection_is_within_the_bound_by_enumeration(eps):
    plan = _plan(eps)
    two = plan.release("two_way")
    assert plan.accounting == "pld" and two.split_pending
    eta = bound_eta(plan.delta_conversion, len(plan.layout.two_way))
    cells = {s.attrs: s.size for s in plan.layout.two_way}
    pairs = list(cells)
    again = SessionPlan.from_public(plan.to_public("s", ["a"]))
    for mask in range(1, 1 << len(pairs)):
        chosen = [p for i, p in enumerate(pairs) if mask >> i & 1]
        resolved = plan.resolve(two, chosen)
        assert resolved.parts, "the bound covers the split release only"
        assert sum(part.rho for part in resolved.parts) == two.rho  # exactly
        total = sum(allocation_weight(cells[p]) for p in chosen)
        for part in resolved.parts:
            members = [p for p in chosen if plan.layout.slot(p).key in part.marginal_keys]
            per_marginal = part.rho / len(members)
            assert per_marginal == two.rho * allocation_weight(cells[members[0]]) / total
            shape = part.joint
            assert dominated(shape.pair(), mu_at_most(per_marginal), eta)
            assert shape.ciphertexts <= plan.joint_columns and shape.span <= two.joint.span
            assert plan.max_rows + shape.span // 2 < 2 ** (plan.parameters.count_bits - 1)
        # The servers resolve it alike from the public record.
        assert again.resolve(again.release("two_way"), chosen) == resolved
    # eta over every pair is the bound's.
    assert len(pairs) * eta == pytest.approx(GAUSSIAN_BOUND_SHARE * plan.delta_conversion)


@pytest.mark.parametrize("eps", [0.3, 1.0, 4.0])
def test_the_bounded_plan_spends_the_eps_asked(eps):
    plan = _plan(eps)
    names = [m.name for m in plan_mechanisms(plan)]
    assert "two_way" in names
    assert 0.97 * eps <= accounted_epsilon(plan) <= eps
