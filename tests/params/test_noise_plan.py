"""The session plan's choice of noise per release (``params.noise_rules``, ``params.session_plan``):
the rule, the delta it reserves, the public record, and the end-to-end check that fails
closed."""

from dataclasses import replace
from fractions import Fraction

import pytest

from feddpsyn.dp.binomial_accounting import session_delta_of
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape, orders_for, release_matches
from feddpsyn.dp.privsyn_allocation import allocation_weight
from feddpsyn.params.schema import Schema
from feddpsyn.params.noise_rules import JOINT_MAX_BITS_PER_CALL, JOINT_TAIL, pair_failure_cap
from feddpsyn.params.release_spec import release_count
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.session_plan import SessionPlan

SCHEMA = Schema.from_dict({"name": "plan", "columns": [
    {"name": f"c{i}", "type": "categorical", "i2s": list("abcdef")} for i in range(5)]})


def build(eps=1.0, noise="auto", selection="none", rounds=None, parameter_set="test-small",
          max_rows=1000, calibrated=True):
    return SessionPlan.build(PlanRequest(SCHEMA, eps, 1e-6, max_rows, parameter_set=parameter_set,
                                         selection=selection, rounds=rounds, noise=noise,
                                         calibrated=calibrated))


def test_auto_at_eps_1_gives_every_release_one_joint_noise_of_lower_variance():
    plan = build()
    for r in plan.releases:
        assert r.noise_kind == "joint"
        assert r.per_count_variance == r.joint.variance < 2 * r.sigma2
        assert plan.parameters.chunk_cells * r.joint.ciphertexts <= JOINT_MAX_BITS_PER_CALL
    assert plan.joint_columns == max(r.joint.ciphertexts for r in plan.releases)
    terms = plan.delta_terms()
    assert terms["joint_noise"] == pytest.approx(plan.joint_failure(), rel=1e-12)
    assert 0 < terms["joint_noise"] <= 0.01 * plan.delta_conversion
    assert plan.delta_total() <= plan.delta
    # Two-server is the library default; the servers' default is auto (wire.SessionCreate).
    assert all(r.joint is None for r in build(noise="two-server").releases)


def test_the_public_record_carries_each_releases_noise_and_round_trips():
    plan = build()
    public = plan.to_public("s-1", ["a", "b"])
    assert [r.noise for r in public.releases] == ["joint", "joint"]
    assert public.joint_delta == plan.joint_failure()
    assert public.delivered_delta() == pytest.approx(plan.delta_total(), rel=1e-12)
    again = SessionPlan.from_public(public)
    assert again.releases == plan.releases
    assert again.joint_columns == plan.joint_columns


def test_em_resolves_its_pairs_and_keeps_the_joint_shape():
    plan = build(eps=2.0, selection="em", rounds=2, max_rows=2000)
    two = plan.release("two_way")
    resolved = plan.resolve(two, [(0, 1), (2, 3)])
    assert resolved.joint == two.joint and resolved.sigma2 == two.sigma2
    assert len(resolved.marginal_keys) == 2


# Mixed pair sizes (2 x 3 ... 4 x 6 cells), so PrivSyn's split has several groups.
MIXED = Schema.from_dict({"name": "mixed", "columns": [
    {"name": f"m{i}", "type": "categorical", "i2s": list("abcdef"[:size])}
    for i, size in enumerate((2, 3, 4, 6))]})


# PrivSyn's split: the 2-ways' 80% of rho makes a single kept pair's group large enough at
# eps 2 for the rule to refuse its shape (the fallback tests need that case).
PRIVSYN_SPLIT = {"one_way": 0.1, "selection": 0.1, "two_way": 0.8}


def mixed_plan(eps=1.0, noise="auto", calibrated=False, split=None):
    """noisy-greedy on mixed pair sizes; uncalibrated by default: the split release under its
    Renyi rule (a session planned without calibration, or recorded before it). The Gaussian
    bound's rule is ``tests/dp/test_gaussian_bound.py``'s."""
    return SessionPlan.build(PlanRequest(MIXED, eps, 1e-6, 2000, parameter_set="test-small",
                                         selection="noisy-greedy", noise=noise,
                                         calibrated=calibrated, split=split))


def test_noisy_greedys_two_way_is_split_with_an_envelope_and_the_worst_case_reserve():
    # The Renyi rule's reserve (uncalibrated); the Gaussian bound has none of its own.
    plan = build(eps=1.0, selection="noisy-greedy", max_rows=2000, calibrated=False)
    two = plan.release("two_way")
    assert two.allocation == "privsyn" and two.noise_kind == "joint" and not two.marginal_keys
    assert plan.release("one_way").joint is not None
    # The circuit and the key server's bits are sized for the envelope.
    assert plan.joint_columns == max(r.joint.ciphertexts for r in plan.releases)
    # Every pair kept at the per-marginal cap: JOINT_DELTA_SHARE of the conversion's delta.
    pairs = len(plan.layout.two_way)
    reserve = pairs * pair_failure_cap(plan.delta_conversion, pairs)
    assert plan.joint_failure() == pytest.approx(plan.release("one_way").failure() + reserve,
                                                 rel=1e-12)
    assert plan.delta_total() <= plan.delta
    # Strict joint mode now holds for noisy-greedy too; the fallback's draws stay planned.
    build(eps=1.0, selection="noisy-greedy", max_rows=2000, noise="joint")
    labels = {d.label for d in plan.noise_draws()}
    assert {f"two_way@{m}" for m in range(1, pairs + 1)} <= labels
    again = SessionPlan.from_public(plan.to_public("s-2", ["a"]))
    assert again.releases == plan.releases


def _check_split(plan, chosen):
    """What must hold of a resolved 2-way release for the selection ``chosen``."""
    two = plan.release("two_way")
    resolved = plan.resolve(two, chosen)
    keys = plan.keys_of_pairs(chosen)
    assert resolved.marginal_keys == keys and resolved.rho == two.rho
    _, why = plan.split_release(two, keys)
    if not resolved.parts:  # the even two-server release, and why
        assert why and resolved.joint is None
        assert resolved.sigma2 == Fraction(len(chosen)) / (2 * two.rho)
        assert plan.noise_statement(resolved).startswith("two-server")
        return resolved
    assert why == ""
    cells = {s.attrs: s.size for s in plan.layout.two_way}
    weights = {p: allocation_weight(cells[p]) for p in chosen}
    total = sum(weights.values())
    orders = orders_for(plan.rho_total, plan.delta_conversion)
    cap = pair_failure_cap(plan.delta_conversion, len(plan.layout.two_way))
    assert sum(part.rho for part in resolved.parts) == two.rho  # exactly
    assert sorted(k for part in resolved.parts for k in part.marginal_keys) == sorted(keys)
    curve = {a: 0.0 for a in orders}
    for part in resolved.parts:
        members = [p for p in chosen if plan.layout.slot(p).key in part.marginal_keys]
        assert len({cells[p] for p in members}) == 1  # one group per pair size
        w = weights[members[0]]
        assert part.rho == two.rho * w * len(members) / total
        assert part.sigma2 == total / (2 * two.rho * w)
        # Its M-fold conditioned curve is below a rho_g at the conversion's orders.
        assert release_matches(part.joint, len(members), part.rho, orders, JOINT_TAIL)
        for a, d in part.joint.pair().conditioned_renyi(orders, JOINT_TAIL).items():
            curve[a] += len(members) * d
        assert part.joint.ciphertexts <= plan.joint_columns
        assert part.joint.span <= two.joint.span
        assert part.joint.pair().failure(JOINT_TAIL) <= cap
        assert plan.max_rows + part.joint.span // 2 < 2 ** (plan.parameters.count_bits - 1)
    # What check_joint charges this release for any selection: a rho at each of its orders.
    assert all(d <= a * float(two.rho) for a, d in curve.items())
    assert resolved.failure() <= len(plan.layout.two_way) * cap  # within the reserve
    assert plan.per_count_variance(resolved) < 2 * resolved.sigma2
    # The realised session, composed exactly over every order, is within its delta.
    parts = [(r.joint.pair(), release_count(r), JOINT_TAIL)
             for r in (plan.release("one_way"),) + resolved.parts if r.joint is not None]
    rest = plan.rho_total - sum(r.rho for r in (plan.release("one_way"),) + resolved.parts
                                if r.joint is not None)
    delivered = session_delta_of(parts, rest, plan.epsilon)
    assert delivered <= (plan.delta_conversion + plan.release("one_way").failure()
                         + resolved.failure())
    return resolved


def test_every_selection_gets_privsyns_split_with_matched_shapes_by_enumeration():
    """Every non-empty subset of the 6 pairs (mixed sizes, 63 selections): exact shares, one
    verified shape per pair size within the envelope, the release's curve below a rho at
    every conversion order and its conditioning mass within the reserve (the bound the plan
    charges whatever the selection), the realised session within delta; or the even
    two-server release with the rule's reason (eps 2: a single kept pair's shape would
    exclude too much mass; two: no variance gain within the envelope)."""
    plan = mixed_plan(2.0)
    assert plan.release("two_way").allocation == "privsyn"
    pairs = [s.attrs for s in plan.layout.two_way]
    for mask in range(1, 1 << len(pairs)):
        chosen = [p for i, p in enumerate(pairs) if mask >> i & 1]
        resolved = _check_split(plan, chosen)
        # One or two kept pairs: large budgets, small shapes (too much conditioning mass, or
        # within the envelope no variance gain): those may fall back; three or more never.
        assert resolved.parts or len(chosen) <= 2
    # Both servers compute the same groups from the public record.
    again = SessionPlan.from_public(plan.to_public("s-3", ["a"]))
    chosen = pairs[::2]
    assert again.resolve(again.release("two_way"), chosen) == plan.resolve(
        plan.release("two_way"), chosen)


def test_a_group_the_rule_refuses_falls_back_to_the_even_two_server_release():
    # eps 2 on few cells: one kept pair's shape would exclude too much mass.
    plan = mixed_plan(2.0, split=PRIVSYN_SPLIT)
    assert plan.release("two_way").allocation == "privsyn"
    pair = [min(plan.layout.two_way, key=lambda s: s.size).attrs]
    resolved = _check_split(plan, pair)
    assert resolved.joint is None and resolved.noise_kind == "two-server"
    assert plan.noise_label(resolved) == "two_way@1"
    _, why = plan.split_release(plan.release("two_way"), resolved.marginal_keys)
    assert "conditioning mass" in why


def test_the_key_server_decrypts_a_run_time_release_only_if_both_servers_decided_alike():
    from feddpsyn.common import wire
    from feddpsyn.common.serving import ServiceError
    from feddpsyn.keyserver.releases import Releases

    plan = mixed_plan(2.0, split=PRIVSYN_SPLIT)
    pairs = [s.attrs for s in plan.layout.two_way]
    joint = plan.resolve(plan.release("two_way"), pairs)
    even = plan.resolve(plan.release("two_way"), pairs[:1])
    assert joint.parts and not even.parts
    digests = ["00" * 32]
    for spec, other in ((joint, even), (even, joint)):
        mine = plan.noise_statement(spec)
        Releases._check_noise_statement(plan, "two_way", spec, wire.ReleaseManifest(
            chunks=[0], digests=digests, noise=mine))
        for stated in (plan.noise_statement(other), None):
            with pytest.raises(ServiceError) as info:
                Releases._check_noise_statement(plan, "two_way", spec, wire.ReleaseManifest(
                    chunks=[0], digests=digests, noise=stated))
            assert info.value.status == 409
    # A fixed release's manifest may omit it (its noise is in the public plan).
    Releases._check_noise_statement(plan, "one_way", plan.release("one_way"),
                                    wire.ReleaseManifest(chunks=[0], digests=digests))


def test_auto_gives_the_even_two_server_release_where_the_orders_do_not_confirm_the_split(
        monkeypatch):
    checked = SessionPlan.check_joint

    def refuse_split(plan):
        if any(r.split_pending for r in plan.releases):
            raise ValueError("the joint noise's exact curve gives delta above")
        checked(plan)

    monkeypatch.setattr(SessionPlan, "check_joint", refuse_split)
    plan = mixed_plan(1.0)
    two = plan.release("two_way")
    assert two.allocation == "even" and two.joint is None
    assert plan.release("one_way").joint is not None
    with pytest.raises(ValueError, match="exact curve"):
        mixed_plan(1.0, noise="joint")


def test_large_eps_stays_two_server_and_strict_joint_refuses_with_the_reason():
    plan = build(eps=50.0)
    assert [r.joint for r in plan.releases] == [None, None]
    assert plan.joint_columns == 0 and "joint_noise" not in plan.delta_terms()
    with pytest.raises(ValueError, match="cannot carry the joint noise: (its conditioning|the "
                                         "joint shape's variance)"):
        build(eps=50.0, noise="joint")
    with pytest.raises(ValueError, match="noise must be one of"):
        build(noise="one")


def test_row_bound_noise_is_a_sound_sub_gaussian_proxy():
    plan = build()
    one = plan.release("one_way")
    proxy, noises = one.row_bound_noise()
    assert noises == 1
    # Hoeffding: a sum of u uniforms on {0..2^w-1} has proxy u (2^w - 1)^2 / 4 >= variance.
    assert proxy == Fraction(one.joint.uniforms * (2 ** one.joint.bits - 1) ** 2, 4)
    assert proxy >= one.joint.variance
    gaussian = build(noise="two-server").release("one_way")
    assert gaussian.row_bound_noise() == (gaussian.sigma2, 2)


def test_the_end_to_end_check_refuses_a_shape_that_does_not_match():
    plan = build()
    one = plan.release("one_way")
    weak = replace(plan, releases=(replace(one, joint=JointNoiseShape(2, 2)),
                                   plan.release("two_way")))
    with pytest.raises(ValueError, match="composed PLD" if plan.accounting == "pld"
                       else "exact curve"):
        weak.check_privacy()
    plan.check_privacy()  # the plan's own shapes pass


def test_capacity_uses_the_joint_noises_hard_bound():
    plan = build()
    bound = max(r.published_noise_bound for r in plan.releases)
    assert bound == max(r.joint.span // 2 for r in plan.releases)
    room = 2 ** (plan.parameters.count_bits - 1)
    with pytest.raises(ValueError):
        plan.check_capacity(room - int(bound))
