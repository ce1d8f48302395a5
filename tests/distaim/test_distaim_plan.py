"""DistAIM's typed plan digests as the plan dict did: a session's digest, ``session.json`` and
what the MPC parties compare did not change with the types."""

import json

import pytest

from feddpsyn.distaim.plan import (
    LEGACY_SCHEDULE,
    AnnealingPlan,
    FixedRoundsPlan,
    SessionRequest,
    build_plan,
    derive_plan,
    parse_plan,
    plan_digest,
    schedule_of,
)
from feddpsyn.distaim.wire import DistSessionCreated

SCHEMA = {"name": "t", "columns": [
    {"name": "a", "type": "categorical", "i2s": ["x", "y", "z"]},
    {"name": "b", "type": "categorical", "i2s": ["u", "v"]},
    {"name": "c", "type": "continuous", "min": 0, "max": 10, "bins": 4}]}
BASE = {"session_id": "ref", "schema": SCHEMA, "clients": ["h1", "h0"], "epsilon": 1.0,
        "delta": 1e-5, "mpc_parties": ["127.0.0.1:9101", "127.0.0.1:9102", "127.0.0.1:9103"]}
MODULUS = 2**127 - 1

# name: (request changes, the plan's model, the digest of the plan dict that derive_plan
# returned before the plan was typed: recorded at revision b123721)
MODES = {
    "fixed-rounds": ({}, FixedRoundsPlan,
                     "90593ae6a1f29f34a9c638cebb8bc972efb09c316af93be2644aa1de482b1f71"),
    "annealing": ({"rounds": None, "max_rounds": 40}, AnnealingPlan,
                  "89b21a8c41a6bb4d2b9005eb22665e20ee3d8f11e871cba05bb19a18e4e9928a"),
    # at p < 1 plans of that revision ran FLAIM's interleaved schedule (the only one then)
    "fixed-rounds, sampled, 3-way": (
        {"workload": [[0, 1, 2], [1]], "participation": "1/2", "rounds": 3,
         "score_grid_bits": 2, "round_iters": 50, "final_iters": 200,
         "schedule": "interleaved"}, FixedRoundsPlan,
        "a141d094c605be02bd4afbb51f5164e8239538c132862df93e7d2810e1a7e558"),
    "annealing, TLS, timeouts": (
        {"rounds": None, "mpc_channel_tls": True, "mpc_timeout": 30, "mpc_deadline": 600.5,
         "rows_bound": 5000, "epsilon": 3}, AnnealingPlan,
        "43c74420df11cd86321ebf0da8c28d9e75c772b1f932f9418e42d8274b16899b"),
}


def _plan(changes):
    return build_plan(SessionRequest.model_validate({**BASE, **changes}), MODULUS)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_typed_plan_digests_as_the_plan_dict_did(mode):
    changes, model, reference = MODES[mode]
    plan = _plan(changes)
    assert type(plan) is model
    assert plan.digest() == reference
    assert plan_digest(derive_plan(SessionRequest.model_validate({**BASE, **changes}),
                                   MODULUS)) == reference


@pytest.mark.parametrize("mode", sorted(MODES))
def test_session_json_reads_back_as_the_same_plan(mode):
    changes, model, reference = MODES[mode]
    plan = _plan(changes)
    local = json.loads(json.dumps(plan.mapping() | {"pid": 2, "plan_digest": reference,
                                                    "mpc_tls": {"ca": "ca.pem"}}))
    again = parse_plan(local)
    assert again == plan and type(again) is model
    assert plan_digest(local) == reference  # what a party computes from its session.json
    # the intake's answer carries the same mapping
    created = DistSessionCreated(session_id="ref", party=1, created=True,
                                 plan_digest=reference, plan=plan, client_tokens={})
    assert json.loads(created.model_dump_json(by_alias=True))["plan"] == plan.mapping()


def test_a_plan_reads_as_its_json_reads():
    plan = _plan({})
    assert plan["cells"] == plan.cells and plan.get("rounds") == 10
    assert plan.mapping()["mpc_parties"] == [["127.0.0.1", 9101], ["127.0.0.1", 9102],
                                             ["127.0.0.1", 9103]]


def test_a_fixed_rounds_plan_runs_exactly_its_rounds():
    mapping = _plan({}).mapping()
    with pytest.raises(ValueError, match="max_rounds = rounds"):
        parse_plan(mapping | {"max_rounds": 20})


def test_a_sampled_plan_from_before_the_schedule_runs_as_it_did():
    """A p < 1 session created before the schedule was a plan field (its mapping has no
    ``schedule``) keeps its digest and is read as interleaved, what it ran; the same request
    today runs deferred, so its plan names the schedule and digests differently."""
    changes, _, reference = MODES["fixed-rounds, sampled, 3-way"]
    old = {k: v for k, v in changes.items() if k != "schedule"}
    legacy = _plan(changes).mapping()
    assert "schedule" not in legacy and plan_digest(legacy) == reference
    assert schedule_of(legacy) == LEGACY_SCHEDULE == "interleaved"
    assert parse_plan(legacy).schedule == "interleaved"
    assert parse_plan(legacy).digest() == reference
    today = _plan(old)
    assert today.schedule == "deferred" and today.mapping()["schedule"] == "deferred"
    assert schedule_of(today.mapping()) == "deferred"
    assert today.digest() != reference
    assert parse_plan(json.loads(json.dumps(today.mapping()))) == today


@pytest.mark.parametrize("schedule", ["deferred", "interleaved"])
def test_at_rate_one_the_schedule_leaves_the_digest_alone(schedule):
    """At p = 1 every schedule is central AIM: the plan records none and digests as before."""
    for mode in ("fixed-rounds", "annealing"):
        changes, _, reference = MODES[mode]
        plan = _plan(changes | {"schedule": schedule})
        assert "schedule" not in plan.mapping() and plan.digest() == reference
        assert plan.schedule == "deferred" and schedule_of(plan.mapping()) == "deferred"
