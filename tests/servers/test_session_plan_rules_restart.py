"""A session keeps the plan it published across a restart of the key server, even when the
plan rules changed in between (``keyserver.sessions``).

The key server stores each session's request and public record. After a restart it derives
the plan from the record, as the compute server does, never by rebuilding it from the request
with today's rules: a rebuilt plan would match neither the compute server's compiled module
nor the noise drawn at creation. em's candidate batches are stated by the record
(``batch_size``) and survive a rule change. Where today's code would run something the record
does not fix differently (the layout, P2's chunks, the batches of a record written before it
stated them), the session is refused with a 409 that says why, and the other sessions keep
being served.

No circuit is compiled and no server is started: a registry over a temporary SQLite
database, dropped and opened again, is a restart. Cost: two tiny plans built once for the
module (noisy-greedy with the joint noise, em with the two-server noise), ~1 CPU-s in all.
"""

from dataclasses import replace

import pytest

import feddpsyn.params.selection_plan as selection_plan_module
from feddpsyn.common import wire
from feddpsyn.common.credentials import CLIENT_TOKENS_SQL
from feddpsyn.common.serving import Database, ServiceError
from feddpsyn.crypto.selection_batches import BatchLayout
from feddpsyn.keyserver.keys import SessionKeys
from feddpsyn.keyserver.service import KeyServer
from feddpsyn.keyserver.sessions import (SESSIONS_SQL, SessionRegistry, build_plan,
                                         confirm_published, plan_facts)
from feddpsyn.params.schema import Schema
from feddpsyn.params.selection_plan import EmSelection
from feddpsyn.params.session_plan import SessionPlan

TINY = Schema.from_dict({"name": "tiny", "columns": [
    {"name": f"t{i}", "type": "categorical", "i2s": list("abcd"[:size])}
    for i, size in enumerate((2, 3, 4))]})
CLIENTS = ["a", "b"]


def _request(mode: str, noise: str) -> wire.SessionCreate:
    return wire.SessionCreate(
        schema=TINY.to_dict(), clients=CLIENTS,
        budget=wire.BudgetSpec(epsilon=1.0, delta=1e-6), parameter_set="test-small",
        max_rows=2000, noise=noise,
        selection=wire.SelectionRequest(mode=mode, rounds=1 if mode == "em" else None))


@pytest.fixture(scope="module")
def sessions():
    """(request, plan, public record) of a noisy-greedy session with the joint noise (its
    scores' shape is the rule d94e232 introduced) and of an em session (its candidate
    batches are the rule 0188e47 introduced)."""
    out = {}
    for mode, noise in (("noisy-greedy", "auto"), ("em", "two-server")):
        request = _request(mode, noise)
        plan = build_plan(request)
        # The compiled module's count is what creation publishes; the plan's bound stands in.
        public = plan.to_public(f"s-{mode}", CLIENTS, plan.selection.bootstraps(plan.pair_cells()))
        out[mode] = (request, plan, public)
    return out


def _registry(tmp_path) -> SessionRegistry:
    """The key server's registry over its state directory: a new one is a restart."""
    return SessionRegistry(Database(tmp_path / "keyserver.sqlite",
                                    CLIENT_TOKENS_SQL + SESSIONS_SQL), tmp_path)


def _create(registry: SessionRegistry, session) -> str:
    request, plan, public = session
    registry.add(public.session_id, request, public, {c: f"token-{c}" for c in CLIENTS}, plan,
                 SessionKeys(None, len(CLIENTS)))
    return public.session_id


def test_both_derivations_agree_at_creation(sessions):
    for request, plan, public in sessions.values():
        published = confirm_published(plan, public)
        assert published == SessionPlan.from_public(public)
        assert published.releases == plan.releases
        assert published.selection.rho_charged == plan.selection.rho_charged
        assert type(published.selection) is type(plan.selection)
        if isinstance(plan.selection, EmSelection):
            assert published.selection.batches == plan.selection.batches
        else:
            assert published.selection.score_joint == plan.selection.score_joint
        assert published.max_rows == plan.max_rows == request.max_rows
        assert plan_facts(published) == plan_facts(plan)
    request, plan, public = sessions["noisy-greedy"]
    assert plan.selection.score_joint is not None
    assert [r.allocation for r in plan.releases] == ["even", "privsyn"]


def test_a_record_that_does_not_describe_its_plan_is_not_created(sessions, tmp_path):
    request, plan, public = sessions["noisy-greedy"]
    shape = public.releases[0].joint
    wider = wire.JointNoisePublic(uniforms=shape.uniforms + 2, bits=shape.bits)
    one_way = public.releases[0].model_copy(update={"joint": wider})
    scores = public.selection.model_copy(update={"joint": wider})
    registry = _registry(tmp_path)
    # The record's own variance no longer follows from a wider one-way shape; a wider score
    # shape changes the privacy record derived from it (or, where none is kept, the facts).
    for wrong, where in ((public.model_copy(update={"releases": [one_way, *public.releases[1:]]}),
                          ("releases",)),
                         (public.model_copy(update={"selection": scores}),
                          ("selection", "privacy.mechanisms"))):
        with pytest.raises(ServiceError) as refused:
            _create(registry, (request, plan, wrong))
        assert refused.value.status == 500
        assert any(place in refused.value.message for place in where)
    assert registry.session_ids() == []


def test_an_unchanged_session_loads_after_a_restart(sessions, tmp_path):
    ids = [_create(_registry(tmp_path), session) for session in sessions.values()]
    restarted = _registry(tmp_path)
    assert restarted.runnable_session_ids() == ids
    for session_id, (request, plan, public) in zip(ids, sessions.values()):
        again = restarted.plan(session_id)
        assert again.releases == plan.releases
        assert again.to_public(session_id, CLIENTS, public.selection.bootstraps) == public
        assert again.max_rows == request.max_rows
        assert [(d.label, d.sigma2, d.positions.tolist()) for d in again.noise_draws()] == \
            [(d.label, d.sigma2, d.positions.tolist()) for d in plan.noise_draws()]
    # A session created before the facts were stored loads from its record alone.
    with restarted.db.transaction() as conn:
        conn.execute("DELETE FROM session_plan_facts WHERE id = ?", (ids[0],))
    assert _registry(tmp_path).plan(ids[0]).releases == sessions["noisy-greedy"][1].releases


def test_a_rule_change_does_not_change_a_stored_sessions_plan(sessions, tmp_path,
                                                              monkeypatch):
    """noisy-greedy's score noise, the way d94e232 changed it (in reverse): were the plan
    rebuilt from the request, the key server would run two-server scores against the
    compute server's joint module and decode them without the noise it would then expect."""
    request, plan, public = sessions["noisy-greedy"]
    session_id = _create(_registry(tmp_path), sessions["noisy-greedy"])
    # The rule's other answer, without building again: the plan with two-server scores.
    two_server = replace(plan, selection=replace(plan.selection, score_joint=None,
                                                 joint_failure=0.0))
    monkeypatch.setattr(SessionPlan, "build", staticmethod(lambda *args, **kwargs: two_server))
    rebuilt = build_plan(request)
    assert rebuilt.selection.score_joint is None  # the rebuild now differs from the record
    assert rebuilt.to_public(session_id, CLIENTS, public.selection.bootstraps) != public
    again = _registry(tmp_path).plan(session_id)
    assert again.selection.score_joint == plan.selection.score_joint is not None
    assert again.selection.joint_failure == plan.selection.joint_failure
    assert again.releases == plan.releases
    assert again == SessionPlan.from_public(public)


def test_em_batches_the_record_states_survive_a_rule_change(sessions, tmp_path, monkeypatch):
    """em's candidate batches, the way 0188e47 changed them: the record states the batch
    size, so a key server whose rule now gives one call a round still runs the batches the
    session's module was compiled for, and so does the compute server (``from_public``)."""
    request, plan, public = sessions["em"]
    assert public.selection.batch_size == 2
    em_id = _create(_registry(tmp_path), sessions["em"])
    monkeypatch.setattr(selection_plan_module, "candidate_batches", lambda candidates: None)
    assert build_plan(request).selection.batches is None  # a rebuild would now differ
    again = KeyServer(tmp_path).plan(em_id)
    assert again.selection.batches == BatchLayout(candidates=3, size=2)
    assert SessionPlan.from_public(public).selection.batches == again.selection.batches
    # A record whose size does not cut the candidates as it says is refused as unreadable.
    for wrong in (1, 3):
        selection = public.selection.model_copy(update={"batch_size": wrong})
        with pytest.raises(ValueError, match="inconsistent: batches of"):
            SessionPlan.from_public(public.model_copy(update={"selection": selection}))


def test_a_record_written_before_the_privacy_record_still_loads(sessions, tmp_path):
    """A session created before records carried ``privacy`` (its rho is the zCDP
    conversion's) is read back after an upgrade, accounted as it was planned."""
    ids = []
    for request, plan, public in sessions.values():
        old = replace(plan, accounting="rdp")  # as the record's fields describe it then
        legacy = old.to_public(public.session_id, CLIENTS, plan.selection.bootstraps(
            plan.pair_cells())).model_copy(update={"privacy": None})
        ids.append(_create(_registry(tmp_path), (request, old, legacy)))
    restarted = KeyServer(tmp_path)
    assert restarted.sessions.runnable_session_ids() == ids
    for session_id in ids:
        assert restarted.plan(session_id).accounting == "rdp"


def test_a_rule_the_record_does_not_state_refuses_the_session(sessions, tmp_path,
                                                            monkeypatch):
    """em's candidate batches in a record written before it stated their size: derived from
    the candidate count by a rule. A key server whose rule differs from the compiled module's
    refuses the session with a 409 that says so, once, and keeps serving the others."""
    request, plan, public = sessions["em"]
    legacy = public.model_copy(update={"selection": public.selection.model_copy(
        update={"batch_size": None})})
    registry = _registry(tmp_path)
    em_id = _create(registry, (request, plan, legacy))
    other_id = _create(registry, sessions["noisy-greedy"])
    assert sessions["em"][1].selection.batches == BatchLayout(candidates=3, size=2)
    monkeypatch.setattr(selection_plan_module, "candidate_batches", lambda candidates: None)
    restarted = KeyServer(tmp_path)  # the key server on the same state directory
    with pytest.raises(ServiceError) as refused:
        restarted.plan(em_id)
    message = refused.value.message
    assert refused.value.status == 409
    assert "planned under other rules" in message and "batches" in message
    assert "create a new session" in message
    with pytest.raises(ServiceError) as again:
        restarted.plan(em_id)
    assert again.value.status == 409 and again.value.message == message
    # The offline job (``run_encryption_job``) serves the other sessions; what is published
    # stays readable.
    assert restarted.sessions.runnable_session_ids() == [other_id]
    assert restarted.ledger(em_id).rho_total == sessions["em"][2].rho_total
    assert restarted.status(em_id).state == "collecting"
    assert restarted.selection.selected_pairs(em_id) is None
    # The same server before the restart keeps the plan it confirmed at creation.
    assert registry.plan(em_id).selection.batches == BatchLayout(candidates=3, size=2)


def test_a_record_read_otherwise_refuses_the_session(sessions, tmp_path, monkeypatch):
    """A rule that the record's derived values depend on (here the selection's row-bound
    delta term): the record no longer publishes as stored, so the session is refused."""
    session_id = _create(_registry(tmp_path), sessions["em"])
    monkeypatch.setattr(selection_plan_module, "ROW_BOUND_SHARE",
                        selection_plan_module.ROW_BOUND_SHARE / 2)
    with pytest.raises(ServiceError) as refused:
        _registry(tmp_path).plan(session_id)
    assert refused.value.status == 409
    assert "selection.row_bound_delta" in refused.value.message
