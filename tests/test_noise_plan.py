"""The session plan's choice of noise per release (params.session_plan, issue 14): the rule,
the delta it reserves, the public record, and the end-to-end check that fails closed."""

from dataclasses import replace
from fractions import Fraction

import pytest

from dp.joint_noise_accounting import JointNoiseShape
from params.schema import Schema
from params.session_plan import JOINT_MAX_BITS_PER_CALL, SessionPlan

SCHEMA = Schema.from_dict({"name": "plan", "columns": [
    {"name": f"c{i}", "type": "categorical", "i2s": list("abcdef")} for i in range(5)]})


def build(eps=1.0, noise="auto", selection="none", rounds=None, parameter_set="test-small",
          max_rows=1000):
    return SessionPlan.build(SCHEMA, None, eps, 1e-6, None, parameter_set, max_rows,
                             selection=selection, rounds=rounds, noise=noise)


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


def test_noisy_greedys_two_way_stays_two_server_and_the_one_way_may_be_joint():
    plan = build(eps=1.0, selection="noisy-greedy", max_rows=2000)
    assert plan.release("two_way").joint is None
    assert plan.release("one_way").joint is not None
    with pytest.raises(ValueError, match="known only at run time"):
        build(eps=1.0, selection="noisy-greedy", max_rows=2000, noise="joint")


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
    with pytest.raises(ValueError, match="exact curve"):
        weak.check_joint()
    plan.check_joint()  # the plan's own shapes pass


def test_capacity_uses_the_joint_noises_hard_bound():
    plan = build()
    bound = max(r.published_noise_bound for r in plan.releases)
    assert bound == max(r.joint.span // 2 for r in plan.releases)
    room = 2 ** (plan.parameters.count_bits - 1)
    with pytest.raises(ValueError):
        plan.check_capacity(room - int(bound))
