"""P2's widths per chunk (``params.indif_widths``): the circular distance a narrow chunk
computes is 1-Lipschitz at every width (the score's sensitivity stays 1); the chunks
partition each pair's cells in the plan's chunk sizes; each chunk's width holds its cells'
bound: the worst-case one, under which every score on a real table equals the full-width
InDif, or the typical one B_z, under which a wrapped cell only lowers its pair's score;
the widths and z are in the public record, and a record without them runs every chunk at
the full width (without z: the worst-case bound)."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from feddpsyn.crypto.indif import chunk_bootstraps, indif_at_width, indif_exact
from feddpsyn.demo import dataset
from feddpsyn.dp.pair_selection import expected_counts_for_pairs
from feddpsyn.params.indif_widths import (
    TYPICAL_MULTIPLE,
    Typical,
    cell_bounds,
    narrow_widths,
    width_for,
)
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.schema import Schema
from feddpsyn.params.session_plan import SessionPlan
from feddpsyn.params.table_codec import encode_csv

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = Schema.load(ROOT / "params" / "schemas" / "fed_heart_disease.schema.json")
CSV = dataset("fed_heart_disease").csv
MAX_ROWS = 995
WIDE_ROWS = 2000


def test_the_circular_distance_is_one_lipschitz_and_never_above_the_distance():
    """Adding or removing a record moves one cell's d by 1: the chunk's score moves by at
    most 1, whatever the width, inside the bound or past it (enumerated)."""
    for width in range(2, 10):
        ds = range(-3 * 2 ** width, 3 * 2 ** width + 1)
        values = [indif_at_width(np.array([d]), np.array([0]), width) for d in ds]
        assert max(abs(a - b) for a, b in zip(values, values[1:], strict=False)) == 1
        assert all(v <= abs(d) for v, d in zip(values, ds, strict=True))
        assert all(v == abs(d) for v, d in zip(values, ds, strict=True)
                   if abs(d) <= 2 ** (width - 1))


def test_widths_cover_their_bounds_and_the_module_holds_at_most_four():
    for bound in [0, 1, 2, 3, 4, 5, 100, 128, 129, 1023, 1024, 1025]:
        w = width_for(bound)
        assert bound <= 2 ** (w - 1) and (w == 2 or bound > 2 ** (w - 2))
    assert narrow_widths(12, 80.0, 2000) == (8, 9, 10, 11)
    assert narrow_widths(17, 426.0, 35827) == (10, 12, 14, 16)
    assert narrow_widths(11, 214.0, 995) == ()  # 2 bits at most: not worth the compile
    assert narrow_widths(11, 80.0, 995) == ()  # 3 bits: neither
    assert narrow_widths(11, 5000.0, 995) == ()  # the tail alone needs the full width
    # The typical bound starts the widths lower, only where the worst case compiles some.
    assert narrow_widths(17, 426.0, 35827, 12) == (5, 8, 11, 14)
    assert narrow_widths(12, 80.0, 2000, 12) == (5, 7, 9, 11)
    assert narrow_widths(11, 214.0, 995, 12) == ()
    for k in range(3, 26):
        for margin in (1.0, 30.0, 400.0, 5000.0):
            for typical in (None, 8.0, 12.0):
                widths = narrow_widths(k, margin, 2 ** (k - 2), typical)
                assert len(widths) <= 4 and all(2 <= w < k for w in widths)
                assert not widths or k - widths[0] >= 4
                assert bool(widths) == bool(narrow_widths(k, margin, 2 ** (k - 2)))


def worst_case(plan: SessionPlan) -> SessionPlan:
    """The plan with the worst-case bound alone (a record without ``indif_typical``)."""
    selection = plan.selection
    widths = narrow_widths(selection.indif_bits, plan.wrap_margin(), selection.max_rows)
    return dataclasses.replace(plan, selection=dataclasses.replace(
        selection, indif_widths=widths, indif_typical=None))


@pytest.fixture(scope="module")
def fed_heart():
    """Fed-Heart-Disease at eps 4 with max_rows 2000 (k = 12), where the 1-ways' tail (about
    80) leaves widths 8 to 11."""
    plan = SessionPlan.build(PlanRequest(SCHEMA, 4.0, 1e-5, WIDE_ROWS,
                                         selection="noisy-greedy", noise="auto"))
    records = encode_csv(CSV, SCHEMA).records
    counts = plan.layout.counts(records)
    rng = np.random.default_rng(3)
    # Published 1-ways: the true ones plus a noise of the release's own scale.
    margin = plan.wrap_margin()
    one_way = [counts[s.offset:s.offset + s.size] + rng.normal(0, margin / 6, s.size)
               for s in plan.layout.one_way]
    return plan, counts, one_way


def test_the_chunks_partition_every_pair_in_the_plans_sizes(fed_heart):
    plan, _, one_way = fed_heart
    assert plan.selection.indif_widths == (5, 7, 9, 11)
    assert plan.selection.indif_typical == TYPICAL_MULTIPLE
    assert worst_case(plan).selection.indif_widths == (8, 9, 10, 11)
    chunks = plan.indif_chunks_by_width(one_way)
    static = plan.indif_chunks()
    assert [(i, size) for i, _, size in static] == [(i, size) for i, _, size, _ in chunks]
    for index, slot in enumerate(plan.layout.two_way):
        cells = np.concatenate([c for i, c, _, _ in chunks if i == index])
        assert sorted(cells.tolist()) == list(range(slot.offset, slot.offset + slot.size))
    widths = {w for *_, w in chunks}
    assert widths <= {*plan.selection.indif_widths, plan.selection.indif_bits}
    full = sum(chunk_bootstraps(size, plan.selection.indif_bits) for *_, size in static)
    narrow = sum(chunk_bootstraps(size, w) for _, _, size, w in chunks)
    assert narrow < 0.9 * full


def test_without_narrower_widths_the_chunks_are_the_layouts():
    """At eps 1 on Fed-Heart-Disease the narrowest width would save 2 bits: none is
    compiled, and P2's chunks are exactly ``indif_chunks``' at the full width."""
    plan = SessionPlan.build(PlanRequest(SCHEMA, 1.0, 1e-5, MAX_ROWS,
                                         selection="noisy-greedy", noise="auto"))
    assert plan.selection.indif_widths == ()
    one_way = [np.full(s.size, 50.0) for s in plan.layout.one_way]
    k = plan.selection.indif_bits
    assert [(i, c.tolist(), s, w) for i, c, s, w in plan.indif_chunks_by_width(one_way)] == \
        [(i, c.tolist(), s, k) for i, c, s in plan.indif_chunks()]


def test_each_chunks_width_holds_its_worst_case_bound_so_the_scores_are_exact(fed_heart):
    plan, counts, one_way = fed_heart
    plan = worst_case(plan)
    expected = expected_counts_for_pairs(one_way, plan.layout.pairs, WIDE_ROWS)
    scores = dict.fromkeys(plan.layout.pairs, 0)
    margin = plan.wrap_margin()
    for index, cells, _, width in plan.indif_chunks_by_width(one_way):
        slot = plan.layout.two_way[index]
        local = cells - slot.offset
        bounds = cell_bounds(one_way, slot.attrs, expected[slot.attrs], margin, WIDE_ROWS)
        assert bounds[local].max() <= 2 ** (width - 1)
        true = counts[cells]
        assert np.abs(true - expected[slot.attrs][local]).max() <= 2 ** (width - 1)
        scores[slot.attrs] += indif_at_width(true, expected[slot.attrs][local], width)
    for slot in plan.layout.two_way:
        true = counts[slot.offset:slot.offset + slot.size]
        assert scores[slot.attrs] == indif_exact(true, expected[slot.attrs])


def test_the_typical_bound_narrows_chunks_and_a_wrapped_cell_only_lowers_a_score(fed_heart):
    """Each chunk's width holds B_z, which is never above the worst-case bound; the chunks
    cost fewer lookups; a pair's score equals InDif unless one of its cells passed its
    width, and then it is lower."""
    plan, counts, one_way = fed_heart
    expected = expected_counts_for_pairs(one_way, plan.layout.pairs, WIDE_ROWS)
    margin = plan.wrap_margin()
    variance = float(plan.per_count_variance(plan.release("one_way")))
    typical = Typical.of(TYPICAL_MULTIPLE, variance, one_way)
    scores = dict.fromkeys(plan.layout.pairs, 0)
    wrapped: set = set()
    for index, cells, _, width in plan.indif_chunks_by_width(one_way):
        slot = plan.layout.two_way[index]
        local = cells - slot.offset
        k = expected[slot.attrs]
        narrow = cell_bounds(one_way, slot.attrs, k, margin, WIDE_ROWS, typical)
        worst = cell_bounds(one_way, slot.attrs, k, margin, WIDE_ROWS)
        assert (narrow <= worst).all()
        assert narrow[local].max() <= 2 ** (width - 1)
        true = counts[cells]
        if np.abs(true - k[local]).max() > 2 ** (width - 1):
            wrapped.add(slot.attrs)
        scores[slot.attrs] += indif_at_width(true, k[local], width)
    for slot in plan.layout.two_way:
        exact = indif_exact(counts[slot.offset:slot.offset + slot.size], expected[slot.attrs])
        if slot.attrs in wrapped:
            assert scores[slot.attrs] < exact
        else:
            assert scores[slot.attrs] == exact
    assert len(wrapped) < len(plan.layout.two_way)
    cost = sum(chunk_bootstraps(size, w) for *_, size, w in plan.indif_chunks_by_width(one_way))
    worst_cost = sum(chunk_bootstraps(size, w) for *_, size, w in
                     worst_case(plan).indif_chunks_by_width(one_way))
    assert cost < worst_cost


def test_the_widths_are_public_and_an_older_record_runs_at_full_width(fed_heart):
    plan, _, one_way = fed_heart
    public = plan.to_public("s-w", ["h0", "h1"])
    assert public.selection.indif_widths == [5, 7, 9, 11]
    assert public.selection.indif_typical == TYPICAL_MULTIPLE
    again = SessionPlan.from_public(public)
    assert again.indif_chunks_by_width(one_way) is not None
    assert [(i, c.tolist(), s, w) for i, c, s, w in again.indif_chunks_by_width(one_way)] == \
        [(i, c.tolist(), s, w) for i, c, s, w in plan.indif_chunks_by_width(one_way)]
    older = public.model_copy(update={"selection": public.selection.model_copy(
        update={"indif_widths": None})})
    old_plan = SessionPlan.from_public(older)
    assert old_plan.selection.indif_widths == ()
    assert {w for *_, w in old_plan.indif_chunks_by_width(one_way)} == \
        {plan.selection.indif_bits}
    # A record with widths but no z (before the typical bound): the worst-case bound alone.
    untyped = public.model_copy(update={"selection": public.selection.model_copy(
        update={"indif_typical": None})})
    assert SessionPlan.from_public(untyped).selection.indif_typical is None
    worst = dataclasses.replace(plan, selection=dataclasses.replace(plan.selection,
                                                                    indif_typical=None))
    assert [(i, c.tolist(), s, w) for i, c, s, w in
            SessionPlan.from_public(untyped).indif_chunks_by_width(one_way)] == \
        [(i, c.tolist(), s, w) for i, c, s, w in worst.indif_chunks_by_width(one_way)]


def test_the_bootstrap_count_takes_each_chunks_dearest_width(fed_heart):
    plan, _, _ = fed_heart
    sizes = plan.used_chunk_sizes()
    per_function = {f"indif_{s}": 100 for s in sizes} | {"add": 1, "noise": 1, "joint": 1}
    base = plan.selection.compiled_bootstraps(plan.pair_cells(), per_function)
    dearer = per_function | {f"indif_{sizes[0]}_w9": 150}
    assert plan.selection.indif_widths
    assert plan.selection.compiled_bootstraps(plan.pair_cells(), dearer) > base
