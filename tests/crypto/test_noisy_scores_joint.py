"""noisy-greedy's scores with one joint noise (``crypto.noisy_scores``'s ``joint``):
the circuit decrypts to its plaintext model for random bits of both servers and at the
extremes (the largest score with every xor 1), the multi-bit carries included; the plan's
rule gives the scores a joint shape that matches the selection's rho, round-trips through
the public record, and the end-to-end check counts the score noise."""

import secrets
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest

from feddpsyn.crypto.indif import digits_of, indif_exact, indif_offset
from feddpsyn.crypto.noisy_scores import (
    PASS_LOOKUP_BITS,
    NoisyScoreShape,
    compile_noisy_scores,
    decode_joint_score,
    joint_score_plaintext,
)
from feddpsyn.crypto.private_selection import indif_name
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape, orders_for, release_matches
from feddpsyn.params.noise_rules import JOINT_TAIL, SCORE_LOOKUP_BITS, score_shape_for
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.release_spec import SCORE_NOISE
from feddpsyn.params.schema import Schema
from feddpsyn.params.session_plan import SessionPlan

K, CELLS, N = 6, 6, 6
# 22 2-bit uniforms: one pass would total up to 34 (6-bit lookups), so they are added in
# two passes of 11, each total at most 18 (5-bit lookups), the second on the first's digits.
SHAPE = NoisyScoreShape(count_bits=K, chunk_sizes=(CELLS,), score_bits=N, noise_bits=1,
                        joint=JointNoiseShape(22, 2))


@pytest.fixture(scope="module")
def module():
    m = compile_noisy_scores(SHAPE, 2.0 ** -40)
    m.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    return m


def _value(digits) -> int:
    return sum(int(d) << j for j, d in enumerate(digits))


def test_the_widths_are_what_the_docstring_claims():
    assert SHAPE.out_bits == ((1 << N) - 1 + SHAPE.joint.span).bit_length() == 8
    assert SHAPE.pass_sizes == (11, 11)
    assert [max(m) for m in SHAPE.column_maxima()] == [18, 18] and SHAPE.lookup_bits == 5
    # A carry only where a digit's total can reach 2: the first pass's digit 6 holds at
    # most the carry 1 from below (13 lookups, not 14).
    assert SHAPE.column_maxima()[0][6] == 1
    assert SHAPE.noise_function == "joint"
    assert SHAPE.noise_bootstraps == 2 * (SHAPE.out_bits - 1) - 1
    # One pass where its lookups fit: six uniforms total at most 10 (4-bit lookups).
    one = replace(SHAPE, joint=JointNoiseShape(6, 2))
    assert one.pass_sizes == (6,) and one.lookup_bits == 4
    assert one.noise_bootstraps == one.out_bits - 1
    # The plan's largest score shapes (30 uniforms) take two passes of 5-bit lookups.
    widest = replace(SHAPE, score_bits=17, joint=JointNoiseShape(30, 6))
    assert widest.pass_sizes == (15, 15) and widest.lookup_bits == PASS_LOOKUP_BITS


def test_joint_noise_on_indif_matches_its_model(module):
    """Cost: one 6-cell P2 chunk and 5 calls of ``joint`` on the tiny module."""
    assert module.joint.statistics["programmable_bootstrap_count"] == SHAPE.noise_bootstraps
    # The module's evaluation keys stay small with the joint lookups (measured, not assumed).
    assert len(module.keys.evaluation.serialize()) < 400e6
    rng = np.random.default_rng(17)
    counts, expected = rng.integers(0, 6, CELLS), rng.integers(0, 6, CELLS)
    mask = rng.integers(0, 2 ** K, CELLS)
    indif = getattr(module, indif_name(CELLS))
    masked, _ = indif.encrypt(digits_of((counts + mask) % 2 ** K, K), None)
    score = indif.run(masked, digits_of(indif_offset(mask, expected, K), K))
    clear = int(indif_exact(counts, expected))
    bits = SHAPE.joint.ciphertexts
    for _ in range(2):  # random bits of both servers, from the CSPRNG as the servers draw
        a = np.array([secrets.randbits(1) for _ in range(bits)])
        b = np.array([secrets.randbits(1) for _ in range(bits)])
        _, a_enc, _ = module.joint.encrypt(None, a, None)
        got = module.joint.decrypt(module.joint.run(score, a_enc, b)).tolist()
        assert got == joint_score_plaintext(clear, a, b, SHAPE)
        z = int(np.bitwise_xor(a, b) @ np.array(SHAPE.joint.weights()))
        assert decode_joint_score(got, SHAPE) == clear + z - SHAPE.joint.span // 2
    # The extremes: the largest score with every xor 1 (either server's bits all ones), and
    # with every xor 0 (both all ones).
    ones, zeros = np.ones(bits, dtype=np.int64), np.zeros(bits, dtype=np.int64)
    top, _, _ = module.joint.encrypt(np.ones(N, dtype=np.int64), None, None)
    for a, b, z in ((ones, zeros, SHAPE.joint.span), (zeros, ones, SHAPE.joint.span),
                    (ones, ones, 0)):
        _, a_enc, _ = module.joint.encrypt(None, a, None)
        got = module.joint.decrypt(module.joint.run(top, a_enc, b)).tolist()
        assert _value(got) == (1 << N) - 1 + z
        assert got == joint_score_plaintext((1 << N) - 1, a, b, SHAPE)


def _plan(noise: str, epsilon: float = 1.0) -> SessionPlan:
    from tests.servers.test_servers import SCHEMA

    return SessionPlan.build(PlanRequest(Schema.from_dict(SCHEMA), epsilon, 1e-6, 1000,
                                         parameter_set="test-small", selection="noisy-greedy",
                                         noise=noise))


def test_the_plan_gives_the_scores_a_matching_joint_shape_and_publishes_it():
    plan = _plan("auto")
    chosen = plan.selection
    shape = chosen.score_joint
    assert shape is not None
    # Matched to the selection's rho over ``pairs`` sensitivity-1 scores at the conversion's
    # orders, below the two-server scores' variance, within the lookup cap.
    orders = orders_for(plan.rho_total, plan.delta_conversion)
    assert release_matches(shape, chosen.pairs, chosen.rho, orders, JOINT_TAIL)
    assert chosen.noise_sigma2 == Fraction(chosen.pairs) / (2 * chosen.rho)
    assert shape.variance < 2 * chosen.noise_sigma2
    assert chosen.noisy_shape().lookup_bits <= SCORE_LOOKUP_BITS
    assert score_shape_for(chosen.pairs, chosen.rho, plan.rho_total,
                           plan.delta_conversion) == (shape, "")
    # The conditioning mass is a reserved delta term; no tail term, no pool draw.
    assert chosen.joint_failure == chosen.pairs * shape.pair().failure(JOINT_TAIL) > 0
    terms = plan.delta_terms()
    assert terms["joint_scores"] >= chosen.joint_failure and "noise_tail" not in terms
    assert plan.delta_total() <= plan.delta
    assert SCORE_NOISE not in {d.label for d in plan.noise_draws()}
    # The public record carries it; both servers derive the same plan from it.
    public = plan.to_public("s-0123456789abcdef", ["a"])
    assert public.selection.score_noise == "joint"
    assert (public.selection.joint.uniforms, public.selection.joint.bits) == (
        shape.uniforms, shape.bits)
    again = SessionPlan.from_public(public)
    assert again.selection == chosen
    assert again.selection.noisy_shape(again.used_chunk_sizes()) == chosen.noisy_shape(
        plan.used_chunk_sizes())
    # "two-server" keeps the Gaussians (and their pool draw); "joint" carries the same shape.
    two_server = _plan("two-server")
    two = two_server.selection
    assert two.score_joint is None and SCORE_NOISE in {d.label for d in two_server.noise_draws()}
    assert two.to_public([1], (16,), 1.0, 1e-6, {}, None).score_noise == "two-server"
    assert _plan("joint").selection.score_joint == shape


def test_the_end_to_end_check_counts_the_score_noise():
    from tests.servers.test_servers import SCHEMA

    # The Renyi check of an uncalibrated plan (a calibrated one is confirmed by its PLD).
    plan = SessionPlan.build(PlanRequest(Schema.from_dict(SCHEMA), 1.0, 1e-6, 1000,
                                         parameter_set="test-small", selection="noisy-greedy",
                                         noise="auto", calibrated=False))
    plan.check_joint()
    # A score noise far too small for the selection's rho: the session is refused.
    small = replace(plan, selection=replace(plan.selection, score_joint=JointNoiseShape(2, 1)))
    with pytest.raises(ValueError, match="exact curve"):
        small.check_joint()


def test_each_servers_view_of_a_score_is_the_shapes_law_given_its_own_bits():
    """Exact, on the tiny shape: with one server's bits fixed (any of a few sets, extremes
    included), every bit set of the other server (4^6 of them, equally likely) is
    enumerated through ``joint``'s model, which the circuit equals (tests above); the
    decoded score minus InDif takes each value exactly as often as the shape's pmf says. So
    what the key server decrypts is InDif + Z with Z of the shape given its a, and the pick
    the compute server sees is a function of that value with Z of the shape given its b."""
    small = replace(SHAPE, joint=JointNoiseShape(6, 2))  # the model does not depend on passes
    joint = small.joint
    bits = joint.uniforms * joint.bits
    every = ((np.arange(1 << bits)[:, None] >> np.arange(bits)) & 1).astype(np.int64)
    expected = joint.counts()
    score = 37
    for fixed in (np.zeros(bits, np.int64), np.ones(bits, np.int64),
                  np.array([secrets.randbits(1) for _ in range(bits)], np.int64)):
        for ks, cs in ((lambda o, fixed=fixed: fixed, lambda o: o),
                       (lambda o: o, lambda o, fixed=fixed: fixed)):
            z = [decode_joint_score(joint_score_plaintext(score, ks(o), cs(o), small), small)
                 - score for o in every]
            observed = np.bincount(np.asarray(z) + joint.span // 2, minlength=len(expected))
            assert observed.tolist() == expected
