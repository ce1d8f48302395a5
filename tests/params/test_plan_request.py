"""A plan's request and its typed selection: modes read once, one model per mode, and the
public record read back byte for byte."""

from pathlib import Path

import pytest

from feddpsyn.common import wire
from feddpsyn.params.modes import NoiseMode, SelectionMode
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.schema import Schema
from feddpsyn.params.selection_plan import (
    EmSelection,
    NoisyGreedySelection,
    NoSelection,
    SelectionPlan,
)
from feddpsyn.params.session_plan import SessionPlan

SCHEMA = Schema.load(Path(__file__).resolve().parents[2] / "params" / "schemas"
                     / "fed_heart_disease.schema.json")


def test_a_request_reads_its_modes_once_and_refuses_what_no_mode_means():
    request = PlanRequest(SCHEMA, 1.0, 1e-5, 1143, selection="em", noise="auto")
    assert request.selection is SelectionMode.EM and request.noise is NoiseMode.AUTO
    # The defaults are the servers' (a session request's).
    default = PlanRequest(SCHEMA, 1.0, 1e-5, 1143)
    request = wire.SessionCreate(schema={"columns": [
        {"name": "a", "type": "categorical", "i2s": ["x", "y"]},
        {"name": "b", "type": "categorical", "i2s": ["x", "y"]}]}, clients=["c"],
        budget=wire.BudgetSpec(epsilon=1.0, delta=1e-5))
    assert default.selection == request.selection.mode == SelectionMode.NOISY_GREEDY
    assert default.noise == request.noise == NoiseMode.AUTO
    with pytest.raises(ValueError, match="noise must be one of"):
        PlanRequest(SCHEMA, 1.0, 1e-5, 1143, noise="loud", selection="none")
    with pytest.raises(ValueError, match="selection is one of"):
        PlanRequest(SCHEMA, 1.0, 1e-5, 1143, selection="softmax", noise="two-server")
    with pytest.raises(ValueError, match="rounds are for em"):
        PlanRequest(SCHEMA, 1.0, 1e-5, 1143, selection="noisy-greedy", rounds=3, noise="two-server")


@pytest.mark.parametrize("selection,noise,model", [
    ("em", "two-server", EmSelection),
    ("noisy-greedy", "auto", NoisyGreedySelection),
])
def test_each_mode_has_its_own_model_and_its_record_reads_back_byte_for_byte(selection, noise,
                                                                             model):
    plan = SessionPlan.build(PlanRequest(SCHEMA, 1.0, 1e-5, 1143, selection=selection,
                                         rounds=4 if selection == "em" else None,
                                         noise=noise))
    assert type(plan.selection) is model and plan.selection.mode == selection
    em_only, greedy_only = ("rounds", "step", "shape", "batches"), (
        "pairs", "noise_sigma2", "noise_bits", "score_joint", "joint_failure")
    absent = greedy_only if model is EmSelection else em_only
    assert not any(hasattr(plan.selection, name) for name in absent)
    public = plan.to_public("s", ["a", "b"])
    again = SessionPlan.from_public(public)
    assert again.selection == SelectionPlan.from_public(public.selection,
                                                        len(plan.layout.two_way))
    assert type(again.selection) is model
    text = public.model_dump_json(by_alias=True)
    assert again.to_public("s", ["a", "b"]).model_dump_json(by_alias=True) == text


def test_no_selection_costs_nothing():
    none = SelectionPlan.build("none", 66, 740, 0, None)
    assert isinstance(none, NoSelection)
    assert none.bootstraps([24] * 66) == 0 and none.delta_terms([24] * 66, 1.0, 1e-5) == {}
