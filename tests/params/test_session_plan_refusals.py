"""The key server refuses, at creation, a TFHE session whose failure terms cannot fit its
delta, with a message naming the remedy.

``keyserver.sessions.build_plan`` is what ``KeyServer.create_session`` answers from, with a
422 carrying its message, before any circuit is compiled or key generated; these tests call
it directly (no server, no compile). The bootstrap term itself always fits since the plan
lowers p_error to make room (``SelectionPlan.with_fhe_room``); the refusal that check
replaced is kept for a p_error that cannot be lowered, and shown here with it pinned.
"""

import pytest

from feddpsyn.common import wire
from feddpsyn.keyserver.sessions import build_plan
from feddpsyn.params.schema import Schema
from feddpsyn.params.selection_plan import SelectionPlan

TINY = Schema.from_dict({"name": "tiny", "columns": [
    {"name": f"t{i}", "type": "categorical", "i2s": list("abcd"[:size])}
    for i, size in enumerate((2, 3, 4))]})


def _request(delta: float, noise: str = "two-server") -> wire.SessionCreate:
    return wire.SessionCreate(
        schema=TINY.to_dict(), clients=["a", "b"],
        budget=wire.BudgetSpec(epsilon=1.0, delta=delta), parameter_set="test-small",
        max_rows=2000, noise=noise, selection=wire.SelectionRequest(mode="em", rounds=1))


def test_a_joint_noise_whose_mass_cannot_fit_is_refused_with_the_remedy():
    with pytest.raises(ValueError, match=r"conditioning mass [0-9.e-]+ exceeds its share of "
                                         r"delta .*; use noise 'auto'"):
        build_plan(_request(1e-12, noise="joint"))


def test_bootstrap_terms_that_cannot_fit_are_refused_with_the_remedy(monkeypatch):
    monkeypatch.setattr(SelectionPlan, "with_fhe_room", lambda self, *args: self)
    with pytest.raises(ValueError, match=r"failure terms need delta >= [0-9.e-]+ .*: raise "
                                         r"delta or select fewer rounds"):
        build_plan(_request(1e-12))


def test_where_p_error_can_be_lowered_the_terms_fit_in_half_of_delta():
    plan = build_plan(_request(1e-12))
    assert plan.selection.p_error < 2.0 ** -40
    assert sum(plan.delta_terms().values()) <= 1e-12 / 2
