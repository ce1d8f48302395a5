"""The 1-way top-up of noisy-greedy's split 2-way release (``PlanRequest.one_way_topup``,
``docs/privacy-plan.md``, "The 1-way top-up").

The water-fill with floors is checked in exact rationals against its definition; the
resolution for every selection of a small schema (each group dominated at its own budget at
the eta of every marginal the release may hold, the budgets adding up to the release's
rho, the top-ups' keys and slots 1-ways, the servers resolving alike from the public
record); the privacy record keeps its form and its numbers; synthesis reads the two
measurements of a topped-up 1-way as one.
"""

import itertools
import random
from fractions import Fraction

import numpy as np
import pytest

from feddpsyn.common import wire
from feddpsyn.dp.gaussian_domination import dominated, mu_at_most
from feddpsyn.dp.pld_accounting import GaussianBound
from feddpsyn.dp.privsyn_allocation import (
    allocation_weight,
    allocation_with_floors,
    floored_groups,
    greedy_select_with_one_ways,
)
from feddpsyn.keyserver.coins import release_chunks
from feddpsyn.params.noise_rules import (
    GAUSSIAN_BOUND_SHARE,
    bound_eta,
    bound_marginals,
    smallest_pair_budget,
)
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.privacy_record import accounted_epsilon, plan_mechanisms
from feddpsyn.params.run_time import variance_ratio
from feddpsyn.params.schema import Schema
from feddpsyn.params.session_plan import SessionPlan
from feddpsyn.synthesis.marginals import NoisyMarginal, combine_repeated, marginals_from_release

# One 8-valued column and two binary ones: the 1-way of 8 cells is topped up by most
# selections, the binary ones by few.
SCHEMA = Schema.from_dict({"name": "topup", "columns": [
    {"name": "grade", "type": "categorical", "i2s": list("abcdefgh")},
    {"name": "sex", "type": "categorical", "i2s": ["F", "M"]},
    {"name": "smoker", "type": "categorical", "i2s": ["no", "yes"]}]})


def _plan(eps: float, topup: bool = True, **kw) -> SessionPlan:
    return SessionPlan.build(PlanRequest(SCHEMA, eps, 1e-6, 1000, parameter_set="test-small",
                                         selection="noisy-greedy", noise="auto",
                                         one_way_topup=topup, **kw))


# --- the water-fill -----------------------------------------------------------------------

def _case(seed: int) -> tuple[dict, dict, Fraction]:
    rng = random.Random(seed)
    weights = {k: Fraction(rng.randint(1, 50), rng.randint(1, 9)) for k in range(rng.randint(1, 9))}
    floors = {k: Fraction(rng.randint(0, 30), rng.randint(1, 20)) for k in weights
              if rng.random() < 0.6}
    return weights, floors, Fraction(rng.randint(0, 40), rng.randint(1, 7))


@pytest.mark.parametrize("seed", range(40))
def test_the_water_fill_spends_its_budget_exactly_above_the_floors(seed):
    weights, floors, budget = _case(seed)
    extra = allocation_with_floors(weights, floors, budget)
    assert sum(extra.values()) == budget  # exactly: rationals throughout
    assert all(e >= 0 for e in extra.values())
    final = {k: Fraction(floors.get(k, 0)) + extra[k] for k in weights}
    # One water level lam: f_i = max(floor_i, lam w_i) for every marginal.
    raised = [k for k in weights if extra[k] > 0]
    if raised:
        lam = final[raised[0]] / weights[raised[0]]
        assert all(final[k] == max(Fraction(floors.get(k, 0)), lam * weights[k])
                   for k in weights)


def test_with_no_floors_it_is_privsyns_allocation():
    cells = {(0, 1): 8, (0, 2): 27, (1, 2): 64}
    weights = {p: allocation_weight(c) for p, c in cells.items()}
    extra = allocation_with_floors(weights, {}, Fraction(3, 7))
    total = sum(weights.values())
    assert extra == {p: Fraction(3, 7) * w / total for p, w in weights.items()}


def test_groups_keep_the_kinds_apart_and_add_up():
    # A 1-way and a pair of the same cell count, both raised: two groups, not one.
    cells = {(0,): 4, (1,): 4, (0, 1): 4, (0, 2): 16}
    floors = {(0,): Fraction(1, 1000), (1,): Fraction(1, 1000)}
    groups = floored_groups(cells, floors, [(0,), (1,), (0, 1), (0, 2)], Fraction(1))
    assert [(held, keys) for held, keys, _ in groups] == [
        (False, [(0, 1)]), (False, [(0, 2)]), (True, [(0,), (1,)])]
    assert sum(rho for _, _, rho in groups) == 1


def test_the_greedy_rule_with_the_one_ways_prices_a_higher_noise():
    """The 1-ways' weights in the allocation lower each pair's budget: a pair whose score
    beats its noise at the pairs' share alone (expected L1 noise 9.0 at rho 1) does not
    beat it next to the 1-ways (13.2); a shape's variance above its Gaussian's raises the
    price the same way."""
    cells = {(0, 1): 16, (0, 2): 16, (1, 2): 4}
    scores = {(0, 1): 11.0, (0, 2): 0.0, (1, 2): 0.0}
    assert greedy_select_with_one_ways(scores, cells, [], Fraction(1), lambda r: 1.0) == [
        (0, 1)]
    assert greedy_select_with_one_ways(scores, cells, [8, 2, 2], Fraction(1),
                                       lambda r: 1.0) == []
    assert greedy_select_with_one_ways(scores, cells, [], Fraction(1), lambda r: 2.0) == []


# --- the resolution -----------------------------------------------------------------------

@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_every_selection_is_within_the_bound_with_its_top_ups(eps):
    plan = _plan(eps)
    two, one = plan.release("two_way"), plan.release("one_way")
    assert plan.one_way_topup and plan.accounting == "pld" and two.split_pending
    layout = plan.layout
    eta = bound_eta(plan.delta_conversion, bound_marginals(layout, True))
    assert eta == GAUSSIAN_BOUND_SHARE * plan.delta_conversion / (len(layout.two_way)
                                                                  + len(layout.one_way))
    floor = one.rho / len(layout.one_way)
    smallest = smallest_pair_budget(layout, two.rho, one.rho)
    again = SessionPlan.from_public(plan.to_public("s", ["a"]))
    assert again == plan
    pairs = [slot.attrs for slot in layout.two_way]
    topped = 0
    for k in range(1, len(pairs) + 1):
        for chosen in itertools.combinations(pairs, k):
            resolved = plan.resolve(two, list(chosen))
            assert sum(part.rho for part in resolved.parts) == two.rho  # exactly
            assert set(resolved.marginal_keys) == {
                key for part in resolved.parts for key in part.marginal_keys}
            level = set()
            for part in resolved.parts:
                slots = plan.slots_of(part)
                is_topup = part.name.startswith("two_way/one_way/")
                assert all(len(s.attrs) == (1 if is_topup else 2) for s in slots)
                per_marginal = part.rho / len(slots)
                # The pairs never fall below the envelope's budget; every group is dominated
                # at its own budget, within the circuit and the count width.
                if not is_topup:
                    assert per_marginal >= smallest
                    level.add(per_marginal / allocation_weight(slots[0].size))
                else:
                    level.add((floor + per_marginal) / allocation_weight(slots[0].size))
                    topped += 1
                shape = part.joint
                assert dominated(shape.pair(), mu_at_most(per_marginal), eta)
                assert shape.ciphertexts <= plan.joint_columns
                assert max(shape.weights()) <= max(max(s.weights()) for s in plan.joint_shapes())
                assert plan.max_rows + shape.span // 2 < 2 ** (plan.parameters.count_bits - 1)
                assert resolved.key_server_noise_bound >= shape.span // 2
            # One water level for the pairs and the top-ups (f = lam w).
            assert len(level) == 1
            # The marginals it may hold bound its etas.
            assert len(resolved.marginal_keys) * eta <= (
                GAUSSIAN_BOUND_SHARE * plan.delta_conversion * (1 + 1e-12))
            # The servers resolve it alike from the public record, and say so alike.
            twin = again.resolve(again.release("two_way"), list(chosen))
            assert twin == resolved
            assert again.noise_statement(twin) == plan.noise_statement(resolved)
            positions = np.concatenate([p for p, _ in plan.cell_noises(resolved)])
            assert sorted(positions.tolist()) == plan.layout.cells_of(
                plan.slots_of(resolved)).tolist()
            assert plan.per_count_variance(resolved) > 0
    assert topped, "some selection tops up a 1-way"


def test_the_privacy_record_keeps_its_form_and_numbers():
    on, off = _plan(1.0), _plan(1.0, topup=False)
    assert not off.one_way_topup
    assert on.rho_total == off.rho_total
    assert [type(m) for m in plan_mechanisms(on)] == [type(m) for m in plan_mechanisms(off)]
    bound = next(m for m in plan_mechanisms(on) if isinstance(m, GaussianBound))
    assert bound.rho == on.release("two_way").rho
    assert bound.eta == GAUSSIAN_BOUND_SHARE * on.delta_conversion
    assert accounted_epsilon(on) == accounted_epsilon(off) <= 1.0
    public = on.to_public("s", ["a"])
    assert public.one_way_topup and not off.to_public("s", ["a"]).one_way_topup
    assert public.privacy == off.to_public("s", ["a"]).privacy


def test_the_option_is_noisy_greedys_and_needs_the_bounded_split():
    with pytest.raises(ValueError, match="noisy-greedy"):
        PlanRequest(SCHEMA, 1.0, 1e-6, 1000, selection="em", one_way_topup=True, noise="two-server")
    # Two-server noise: no split release under its bound, so no top-up in the plan.
    assert not SessionPlan.build(PlanRequest(SCHEMA, 1.0, 1e-6, 1000, parameter_set="test-small",
                                             selection="noisy-greedy", noise="two-server",
                                             one_way_topup=True)).one_way_topup
    assert not _plan(1.0, calibrated=False).one_way_topup


def test_the_key_servers_bits_cover_the_one_way_cells():
    """The packed chunks the key server may make bits for cover every pair and, with the
    top-up, every 1-way cell too (``params.release_chunks``)."""
    plan = _plan(1.0)
    chunk = plan.parameters.chunk_cells
    cells = sum(m.size for m in plan.layout.one_way) + sum(m.size for m in plan.layout.two_way)
    assert release_chunks(plan, "two_way") == list(range(-(-cells // chunk)))
    off = _plan(1.0, topup=False)
    pairs = sum(m.size for m in off.layout.two_way)
    assert release_chunks(off, "two_way") == list(range(-(-pairs // chunk)))


def test_select_pairs_prices_with_the_shapes_the_budgets_get():
    plan = _plan(1.0)
    scores = {(0, 1): 400.0, (0, 2): 30.0, (1, 2): 2.0}
    cells = {s.attrs: s.size for s in plan.layout.two_way}
    publication = plan.release("one_way").rho + plan.release("two_way").rho
    expected = greedy_select_with_one_ways(scores, cells, [8, 2, 2], publication,
                                           lambda r: variance_ratio(plan, r))
    assert plan.select_pairs(scores) == expected
    assert variance_ratio(plan, 0.01) >= 1.0  # a dominated shape is never below its Gaussian


# --- the published release ------------------------------------------------------------------

def test_synthesis_reads_a_topped_up_one_way_as_one_measurement():
    a = NoisyMarginal((0,), np.array([10.0, 20.0]), 4.0)
    b = NoisyMarginal((0,), np.array([13.0, 17.0]), 12.0)
    pair = NoisyMarginal((0, 1), np.ones((2, 2)), 1.0)
    combined = combine_repeated([a, pair, b])
    assert [m.attrs for m in combined] == [(0,), (0, 1)]
    assert combined[0].counts.tolist() == [10.75, 19.25]
    assert combined[0].variance == pytest.approx(3.0)
    assert combined[1] is pair

    def result(name, counts, variance):
        return wire.ReleaseResult(
            session_id="s", release=name, rho="1", sigma2_per_server="0", noise="joint",
            per_count_variance=variance, marginals={"0": wire.ReleasedMarginal(
                attrs=["grade"], shape=[8], counts=counts)})
    document = wire.ReleaseDocument(
        session_id="s", schema=SCHEMA.to_dict(), parameter_set={}, noise={},
        accounting=wire.ReleaseAccounting(
            neighbouring="", rho_total="1", rho_spent="1", epsilon_spent=1.0, delta=1e-6,
            delta_conversion=1e-6, epsilon_budget=1.0, conversion="", entries=[],
            selection=wire.NoSelectionAccounting(mode="none")),
        releases=[result("one_way", [8] * 8, "2"), result("two_way", [4] * 8, "6")])
    _, noisy = marginals_from_release(document)
    assert len(noisy) == 1 and noisy[0].counts.tolist() == pytest.approx([7.0] * 8)
    assert noisy[0].variance == pytest.approx(1.5)
