"""The joint-scores bench measures real calls: on a tiny score module each variant's call
decrypts to its plaintext model (a wrong model is caught, not timed), the first call takes
the plan's bound, and the table's ratios are joint over two-server of the same run's medians."""

import sys
from fractions import Fraction
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import bench.scale.bench_scale as checked  # noqa: E402
import experiments.joint_scores.bench_joint_scores as bench  # noqa: E402
from bench.scale.bench_scale import ScoreMismatch  # noqa: E402
from experiments.joint_scores.bench_joint_scores import (  # noqa: E402
    QUICK_SESSIONS,
    SESSIONS,
    ScoreSession,
    compile_variants,
    measure,
    parse_args,
    summarise,
    table,
)
from feddpsyn.crypto.noisy_scores import NoisyScoreShape  # noqa: E402
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape  # noqa: E402

# A smaller cut of tests/crypto/test_noisy_scores_joint.py's tiny module: 2-bit counts, one 2-cell
# chunk, 3-bit scores (the bound 2 max_rows = 6); four 1-bit uniforms (3-bit lookups); the
# two-server noise N_Z(0, 1/4) within +-2^3 (a draw outside fails closed: P < 1e-50).
TINY = ScoreSession(dataset="tiny", epsilon=1.0, rows=3, max_rows=3, pairs=1, p_error=2.0 ** -40,
                    sigma2=Fraction(1, 4), shape=NoisyScoreShape(
                        count_bits=2, chunk_sizes=(2,), score_bits=3, noise_bits=3,
                        joint=JointNoiseShape(4, 1)))


@pytest.fixture(scope="module")
def measured():
    """Both tiny modules; one repeat, two calls of each (keygen, run, decrypt, check)."""
    variants = compile_variants(TINY, log=lambda line: None)
    return measure(TINY, variants, repeats=1, calls=2, log=lambda line: None), variants


def test_every_call_is_decrypted_and_matches_its_model(measured, monkeypatch):
    result, variants = measured
    two, joint = result.variants["two-server"], result.variants["joint"]
    assert two["function"] == "noise" and joint["function"] == "joint"
    assert len(two["calls"]) == len(joint["calls"]) == 2
    assert two["lookup_bits"] == 2 and joint["lookup_bits"] == TINY.shape.lookup_bits == 3
    # concrete's count: one carry lookup per digit but the last, for both functions.
    assert two["bootstraps_per_call"] == TINY.variant_shape("two-server").noise_bootstraps
    assert joint["bootstraps_per_call"] == TINY.shape.noise_bootstraps
    assert all(k["evaluation_key_bytes"] > 0 for k in two["keygen"] + joint["keygen"])
    assert all(c["ks_bits_bytes"] > 0 for c in joint["calls"])
    # A model that disagrees with the circuit stops the bench instead of yielding a timing.
    variant = variants[1]
    assert variant.name == "joint"
    variant.call(2 * TINY.max_rows)
    monkeypatch.setattr(checked, "joint_score_plaintext",
                        lambda score, a, b, shape: [0] * shape.out_bits)
    with pytest.raises(ScoreMismatch):
        variant.call(2 * TINY.max_rows)


def test_the_table_divides_the_same_runs_medians():
    def variant(keys, keygen, calls, pbs):
        return {"keygen": [{"evaluation_key_bytes": b, "keygen_s": s} for b, s in keys],
                "calls": [{"call_s": c, "call_cpu_s": 2 * c, "first_after_keygen": i == 0}
                          for i, c in enumerate(calls)],
                "bootstraps_per_call": pbs, "lookup_bits": keygen}

    # The first call after a key generation is summarised apart from the later ones.
    variants = {"two-server": variant([(100e6, 4.0), (100e6, 6.0), (100e6, 5.0)], 2,
                                      [9.0, 1.0, 3.0, 2.0], 17),
                "joint": variant([(300e6, 12.0), (300e6, 10.0), (300e6, 11.0)], 6,
                                 [27.0, 6.0, 4.0, 5.0, 100.0], 17)}
    summary = summarise(variants)
    assert summary["two-server"]["call_s"] == 2.0 and summary["joint"]["call_s"] == 5.5
    assert summary["joint"]["first_call_s"] == 27.0
    ratio = summary["ratio_joint_over_two_server"]
    assert ratio == {"evaluation_key_mb": 3.0, "keygen_s": 11.0 / 5.0, "call_s": 2.75,
                     "call_cpu_s": 2.75, "first_call_s": 3.0, "bootstraps_per_call": 1.0}
    result = bench.SessionResult(TINY, variants)
    lines = table([result]).splitlines()
    assert lines[-1].split()[1:] == ["1.00", "3.00", "2.20", "2.75", "2.75", "3.00"]


def test_a_two_pass_shape_is_also_divided_by_its_one_pass_baseline():
    """Where the joint shape takes two passes, the same uniforms in one wide carry chain are
    the baseline of the same run (its own row and a joint/1pass ratio)."""
    two_pass = bench.replace(TINY, shape=bench.replace(TINY.shape, score_bits=6,
                                                       joint=JointNoiseShape(22, 2)))
    assert two_pass.shape.pass_sizes == (11, 11) and two_pass.variants() == bench.VARIANTS
    assert TINY.variants() == ("two-server", "joint")
    assert two_pass.variant_shape("one-pass").pass_sizes == (22,)
    assert two_pass.variant_shape("one-pass").lookup_bits == 6

    def variant(seconds, bits, pbs):
        return {"keygen": [{"evaluation_key_bytes": 1e8 * bits, "keygen_s": float(bits)}],
                "calls": [{"call_s": seconds, "call_cpu_s": seconds, "first_after_keygen": False}],
                "bootstraps_per_call": pbs, "lookup_bits": bits}

    summary = summarise({"two-server": variant(0.4, 2, 7), "joint": variant(0.9, 5, 14),
                         "one-pass": variant(1.2, 6, 7)})
    assert summary["ratio_joint_over_one_pass"]["call_s"] == pytest.approx(0.75)
    assert summary["ratio_joint_over_one_pass"]["bootstraps_per_call"] == 2.0
    lines = table([bench.SessionResult(two_pass, {
        "two-server": variant(0.4, 2, 7), "joint": variant(0.9, 5, 14),
        "one-pass": variant(1.2, 6, 7)})]).splitlines()
    assert lines[-1].split()[0] == "joint/1pass" and lines[-2].split()[0] == "joint/two"


def test_arguments_are_bounded_and_quick_is_one_fed_heart_repeat():
    args = parse_args(["--quick"])
    assert args.repeats == 1 and args.sessions == QUICK_SESSIONS
    args = parse_args([])
    assert args.repeats == 3 and args.sessions == SESSIONS
    assert parse_args(["--session", "adult:2", "--session", "fed_heart_disease:1"]).sessions == (
        ("adult", 2.0), ("fed_heart_disease", 1.0))
    for bad in (["--repeats", "0"], ["--calls", "1000"], ["--session", "adult:x"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
