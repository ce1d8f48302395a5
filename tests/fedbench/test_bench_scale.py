"""The scale bench's plan-only figures add up (pairs, cells, chunks, bootstraps, bytes), a row
count the shipped parameter set refuses is planned at a stated what-if width, and the model's
projection behaves as stated (one core: the work; more cores: never slower; a step never
shorter than its dearest task). Plans only: no circuit is compiled, no key made."""

import math
import sys
from itertools import combinations
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.scale.bench_scale import (  # noqa: E402
    CORES,
    DEFAULT_SET,
    Step,
    Units,
    plan_figures,
    plan_for,
    projection,
    schema_of,
    session_steps,
    step_seconds,
    upload_bytes,
)
from feddpsyn.crypto.indif import chunk_bootstraps  # noqa: E402
from feddpsyn.params.selection_plan import chunk_sizes_for  # noqa: E402

COLUMNS = [("a", 3), ("b", 4), ("c", 5), ("d", 2)]


@pytest.fixture(scope="module")
def planned():
    schema = schema_of(COLUMNS)
    return {selection: plan_for(schema, 1000, selection)
            for selection in ("noisy-greedy", "none")}


def test_pairs_cells_and_chunks_add_up(planned):
    sizes = [size for _, size in COLUMNS]
    for selection, result in planned.items():
        assert result.plan is not None and result.parameter_set == DEFAULT_SET, selection
        f = plan_figures(result.plan)
        c = len(COLUMNS)
        assert f["pairs"] == c * (c - 1) // 2
        assert f["one_way_cells"] == sum(sizes)
        assert f["two_way_cells"] == sum(a * b for a, b in combinations(sizes, 2))
        assert f["total_cells"] == f["one_way_cells"] + f["two_way_cells"]
        assert f["chunks"] == math.ceil(f["total_cells"] / f["chunk_cells"])
        assert f["count_bits"] == 20
        joint = [r for r in f["releases"] if r["noise"] == "joint"]
        assert f["joint_columns"] == max((r["bits_per_count"] for r in joint), default=0)
        inert = bool(f["joint_columns"]) and len(joint) < len(f["releases"])
        assert f["ks_coin_chunks"] == sum(r["chunks"] for r in joint) + inert
        assert f["ks_release_coin_bits"] == (f["ks_coin_chunks"] * f["chunk_cells"]
                                             * f["joint_columns"])
        assert f["upload_bytes_per_client"] == upload_bytes(f["total_cells"], 20)


def test_selection_bootstraps_are_the_chunks_and_adds(planned):
    plan = planned["noisy-greedy"].plan
    f = plan_figures(plan)["selection_figures"]
    k, n = f["indif_bits"], f["score_bits"]
    cuts = [chunk_sizes_for(cells, plan.selection.chunk_sizes) for cells in plan.pair_cells()]
    assert f["p2_chunks"] == sum(len(cut) for cut in cuts)
    assert f["p2_adds"] == sum(len(cut) - 1 for cut in cuts)
    assert f["bootstraps"]["p2"] == (sum(chunk_bootstraps(s, k) for cut in cuts for s in cut)
                                     + f["p2_adds"] * (2 * n - 1))
    assert f["bootstraps"]["scores"] == len(cuts) * f["score_bootstraps_per_call"]
    assert plan_figures(planned["none"].plan)["selection_figures"] is None


def test_upload_bytes_are_the_json_a_client_sends():
    # 1,000 values below 2^4 (1 or 2 digits, 6 of 16 with two), a comma between them.
    expected = round(1000 * (1 * 10 / 16 + 2 * 6 / 16 + 1)) - 1
    assert upload_bytes(1000, 4) == (len('{"commitment":"","values":[]}') + 64 + expected
                                     + len('{"seed_hex":""}') + 64)


def test_rows_beyond_the_shipped_width_get_a_stated_what_if_width():
    result = plan_for(schema_of(COLUMNS), 1_000_000, "none")
    assert result.plan is not None
    assert result.parameter_set != DEFAULT_SET and result.refusals
    assert result.plan.parameters.count_bits == 22
    assert result.plan.max_rows + 1 < 1 << 21


def sample() -> Units:
    p1 = [{"count_bits": 20, "cells": cells, "bits": cells * 100, "keygen_s": 0.1,
           "plain_cs_s": 0.01 + 1e-4 * cells, "plain_ks_s": 1e-5 * cells,
           "joint_cs_s": 0.02 + 2e-4 * cells * 100, "joint_ks_s": 2e-5 * cells,
           "ks_coins_s": 1e-4 * cells * 100, "ks_encrypt_client_chunk_s": 5e-5 * cells}
          for cells in (32, 128)]
    module = {"shape": {"count_bits": 12}, "complexity_per_bootstrap": 7e7, "compile_s": 20.0,
              "bootstrap_key_bytes": 5e8, "keyswitch_key_bytes": 3e8, "keygen_s": 5.0,
              "s_per_bootstrap_p2": 0.02, "s_per_bootstrap_score": 0.04,
              "s_per_bootstrap_add": 0.01, "ks_encrypt_p2_chunk_8_s": 0.005,
              "ks_decrypt_score_s": 0.01}
    return Units(p1, module)


def test_the_projection_is_the_work_on_one_core_and_never_slower_on_more(planned):
    units = sample()
    assert units.p1_chunk("joint_cs_s", 20, 256 * 100, "bits") == pytest.approx(
        0.02 + 2e-4 * 256 * 100)
    for result in planned.values():
        steps = session_steps(plan_figures(result.plan), None, units)
        table = projection(steps)
        assert table["1"]["model"]["session_s"] == pytest.approx(sum(s.work_s for s in steps))
        for case in ("model", "today"):
            times = [table[str(n)][case]["session_s"] for n in CORES]
            assert all(b <= a + 1e-9 for a, b in zip(times, times[1:], strict=False))
        for step in steps:
            dearest = max(step.tasks, default=0.0)
            assert step_seconds(step, 192) >= dearest + step.serial_s - 1e-9


def test_a_step_on_as_many_cores_as_tasks_lasts_its_dearest_task():
    step = Step("x", "online", "cs", [1.0, 2.0, 3.0], serial_s=0.5, levels=[(4, 0.25)])
    assert step.work_s == pytest.approx(7.5)
    assert step_seconds(step, 1) == pytest.approx(7.5)
    assert step_seconds(step, 4, overhead=0.0) == pytest.approx(3.0 + 0.25 + 0.5)
    assert step_seconds(step, 2, overhead=0.0) == pytest.approx(3.0 + 0.5 + 0.5)
    assert step_seconds(step, 4, today=True) == pytest.approx(7.5)  # not on an executor
