"""Named, versioned parameter sets: the selection's widths follow its set's rules."""

from dataclasses import replace
from fractions import Fraction

import pytest

from feddpsyn.dp.accounting import eps_delta_to_rho
from feddpsyn.params.parameter_sets import (
    DEFAULT_SELECTION_SET,
    SELECTION_SETS,
    get_parameter_set,
    get_selection_set,
)
from feddpsyn.params.selection_plan import SelectionPlan

RHO = eps_delta_to_rho(1.0, 1e-5) / 10


@pytest.mark.parametrize("name", sorted(SELECTION_SETS))
@pytest.mark.parametrize("pairs,max_rows,rounds", [(66, 740, 4), (105, 45_222, 15), (6, 50, 2)])
def test_every_set_keeps_its_stated_numerical_loss(name, pairs, max_rows, rounds):
    chosen = get_selection_set(name)
    plan = SelectionPlan.build("em", pairs, max_rows, RHO, rounds, parameters=name)
    assert plan.parameters == chosen and plan.chunk_sizes == chosen.chunk_sizes
    assert plan.p_error == chosen.p_error
    # 4 eta within the set's share of each round's epsilon; the whole charge within budget.
    assert 4 * plan.step.eta <= float(chosen.relative_loss) * float(plan.step.epsilon)
    assert plan.rho_charged <= RHO
    # the clamp only cuts weights below e^-clamp_exponent
    assert float(plan.step.epsilon) / 2 * (2 ** plan.shape.nb - 1) >= chosen.clamp_exponent \
        or plan.shape.nb == plan.score_bits
    report = plan.report([100] * pairs)
    assert report["parameter_set"]["name"] == name
    assert report["parameter_set"]["version"] == chosen.version


def test_lean_needs_fewer_random_bits_than_precise():
    lean = SelectionPlan.build("em", 66, 740, RHO, 4, parameters="lean")
    precise = SelectionPlan.build("em", 66, 740, RHO, 4, parameters="precise")
    assert lean.shape.random_bits < precise.shape.random_bits
    assert lean.bootstraps([24] * 66) < precise.bootstraps([24] * 66)


def test_default_and_refusals():
    assert SelectionPlan.build("em", 66, 740, RHO, 4).parameters.name == DEFAULT_SELECTION_SET
    with pytest.raises(ValueError, match="unknown selection parameter set"):
        get_selection_set("fast-and-loose")
    with pytest.raises(ValueError, match="unknown parameter set"):
        get_parameter_set("fast-and-loose")
    # lambda is fixed by InDif's sensitivity: any other value would not be eps-DP.
    bad = replace(get_selection_set("precise"), name="bad", lam=2)
    with pytest.raises(ValueError, match="lambda"):
        SelectionPlan.build("em", 66, 740, Fraction(1, 100), 4, parameters=bad)
