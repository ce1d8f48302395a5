"""The joint-noise cost bench measures real releases: each variant's chunk decrypts to the true
counts plus exactly its noise (a split chunk's cells each with their own shape), and a
release's totals scale its measured chunks by the chunks the servers run and prepare."""

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.scale.bench_scale import (  # noqa: E402
    CLIENTS,
    COUNT_BOUND,
    JointVariant,
    TwoNoiseVariant,
    chunk_inputs,
    keyed,
)
from experiments.joint_noise.bench_joint_noise import ReleaseBench, summarise  # noqa: E402
from feddpsyn.crypto.aggregation import compile_aggregation  # noqa: E402
from feddpsyn.crypto.joint_noise import JointNoiseShape, compile_joint_release  # noqa: E402
from feddpsyn.params.release_chunks import ReleaseChunk  # noqa: E402
from feddpsyn.params.release_spec import ReleaseSpec  # noqa: E402

K_BITS, CELLS = 12, 8
SHAPES = [JointNoiseShape(4, 2), JointNoiseShape(6, 1)]


@pytest.fixture(scope="module")
def variants():
    assert COUNT_BOUND + max(s.span for s in SHAPES) < 1 << (K_BITS - 1)
    p1 = compile_aggregation(CLIENTS, CELLS, K_BITS, 2.0 ** -40)
    joint = compile_joint_release(CLIENTS, CELLS, K_BITS, SHAPES, 2.0 ** -40)
    columns = max(s.ciphertexts for s in SHAPES)
    # Positions 8..15 are chunk 1: five selected cells, two groups of shapes.
    shapes = {8: SHAPES[0], 9: SHAPES[0], 11: SHAPES[1], 12: SHAPES[1], 15: SHAPES[1]}
    return (TwoNoiseVariant(p1, keyed(p1), K_BITS, Fraction(4)),
            JointVariant(joint, keyed(joint), K_BITS, columns, shapes), shapes)


def test_each_variant_decrypts_to_the_counts_plus_its_noise(variants):
    two, joint, shapes = variants
    selected = np.array(sorted(shapes))
    # Layout chunk 1 as a fixed release runs it: each cell at its own place.
    inputs = chunk_inputs(ReleaseChunk(1, selected, selected - CELLS, False), CELLS, K_BITS)
    assert inputs.select.tolist() == [1, 1, 0, 1, 1, 0, 0, 1]
    # measure() raises unless published - true is, cell by cell, the noise both servers made.
    costs, noise = joint.measure(inputs)
    assert noise.size == 5 and costs["ks_cs_bytes"] > 0 and costs["cs_s"] > 0
    bound = [shapes[p].span // 2 for p in selected]
    assert np.all(np.abs(noise) <= bound)
    costs, noise = two.measure(inputs)
    assert noise.size == 5 and costs["ks_cs_bytes"] == 0 and costs["draw_s_per_value"] > 0
    # The same cells packed, as a selected release runs them: places 0..4, each its shape.
    packed = chunk_inputs(ReleaseChunk(0, selected, np.arange(5), True), CELLS, K_BITS)
    assert packed.select.tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    costs, noise = joint.measure(packed)
    assert noise.size == 5 and np.all(np.abs(noise) <= bound)


def test_release_totals_scale_the_measured_chunks():
    spec = ReleaseSpec("two_way", ("a", "b"), Fraction(1), Fraction(1), SHAPES[0])
    bench = ReleaseBench("s", "two_way", spec, spec, np.arange(1000), touched=[0, 1, 2, 3],
                         measured=[0, 2], prepared=6, values_joint=10, values_two=50,
                         variance_joint=Fraction(3), variance_two=Fraction(8), groups=[])
    bench.variants = [type("V", (), {"name": "two-noise"}), type("V", (), {"name": "joint"})]

    def chunk(ks_bits_s, cs_s, draw):
        return {"draw_s_per_value": draw, "ks_bits_s": ks_bits_s, "ks_cs_bytes": 100 * ks_bits_s,
                "cs_s": cs_s, "ks_s": 1.0, "cs_ks_bytes": 7}

    # Two repeats of two chunks each; the least repeat's sum counts.
    bench.times = {"two-noise": [[chunk(0, 2, 1e-3), chunk(0, 2, 1e-3)],
                                 [chunk(0, 1, 2e-3), chunk(0, 1, 2e-3)]],
                   "joint": [[chunk(4, 6, 0), chunk(4, 6, 0)], [chunk(5, 9, 0), chunk(5, 9, 0)]]}
    bench.noises = {"two-noise": [np.array([1, -1])], "joint": [np.array([2, -2])]}
    row = summarise(bench, 2)
    joint, two = row["variants"]["joint"], row["variants"]["two-noise"]
    assert row["scaled"] and row["chunks_touched"] == 4 and row["chunks_prepared"] == 6
    assert joint["offline_ks_bits_s"] == pytest.approx(4 * 6)
    assert joint["offline_draws_s"] == pytest.approx(2 * 10 * 1e-3)
    assert two["offline_draws_s"] == pytest.approx(2 * 50 * 1e-3)
    assert joint["ks_cs_bytes"] == pytest.approx(400 * 6)
    assert joint["online_s"] == pytest.approx((6 + 1) * 4)
    assert two["online_s"] == pytest.approx((1 + 1) * 4)
    assert joint["per_cell"]["online_s"] == pytest.approx(28 / 1000)
    assert row["ratios_joint_over_two_noise"]["online"] == pytest.approx(28 / 8)
    assert row["ratios_joint_over_two_noise"]["variance"] == pytest.approx(3 / 8)
