"""One mapping between a session's plan and its public record, for both servers.

The key server publishes ``SessionPlan.to_public``; the compute server derives its plan with
``SessionPlan.from_public``: the round trip must give back every release, the selection's
widths and budget, and every noise draw, or the two servers would noise or decrypt
different cells.
"""

from pathlib import Path

import pytest

from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.schema import Schema
from feddpsyn.params.session_plan import SessionPlan

SCHEMA = Schema.load(Path(__file__).resolve().parents[2] / "params" / "schemas"
                     / "fed_heart_disease.schema.json")


@pytest.mark.parametrize("selection", ["none", "em", "noisy-greedy"])
def test_public_record_gives_back_the_plan(selection):
    plan = SessionPlan.build(PlanRequest(SCHEMA, 1.0, 1e-5, 1143, selection=selection,
                                         rounds=4 if selection == "em" else None,
                                         noise="two-server"))
    public = plan.to_public("s-test", ["h0", "h1"])
    again = SessionPlan.from_public(public)
    assert again.releases == plan.releases
    assert again.layout == plan.layout and again.parameters == plan.parameters
    assert again.rho_total == plan.rho_total
    assert again.delta_conversion == plan.delta_conversion
    assert again.delta_terms() == plan.delta_terms()
    assert [(d.label, d.sigma2, d.positions.tolist()) for d in again.noise_draws()] == \
        [(d.label, d.sigma2, d.positions.tolist()) for d in plan.noise_draws()]
    assert again.to_public("s-test", ["h0", "h1"]) == public
    if selection != "none":
        assert again.selection.rho_charged == plan.selection.rho_charged
        assert type(again.selection) is type(plan.selection)
        if selection == "em":
            assert again.selection.shape == plan.selection.shape
            assert again.selection.step == plan.selection.step
            assert again.selection.batches == plan.selection.batches
            # stated, so a later rule for them does not change the session's
            assert public.selection.batch_size == plan.selection.batches.size == 5
        assert again.used_chunk_sizes() == plan.used_chunk_sizes()
        pairs = plan.layout.pairs[:4]
        two_way = plan.release("two_way")
        assert again.resolve(two_way, pairs) == plan.resolve(two_way, pairs)
        assert again.noise_label(plan.resolve(two_way, pairs)) == \
            plan.noise_label(plan.resolve(two_way, pairs))
