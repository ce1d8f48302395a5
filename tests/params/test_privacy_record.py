"""A session's published privacy record, re-accounted from its JSON alone.

The accountant here is Google's dp-accounting called directly on the record's numbers (no
project code reads the record), as an outside auditor would: the plans' true eps at the
delta they leave after their reserved terms must be within [0.97, 1] of the eps asked. On a
tiny session the record is also accounted by exact enumeration of its privacy-loss law.
"""

import json
import math
from fractions import Fraction

import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld.common import DifferentialPrivacyParameters

from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.privacy_record import epsilon_after
from feddpsyn.params.schema import Schema
from feddpsyn.params.session_plan import SessionPlan

FED_HEART = "params/schemas/fed_heart_disease.schema.json"


def _uniform_sum_log_pmf(uniforms: int, bits: int) -> dict[int, float]:
    """The exact pmf of a sum of uniforms on {0..2^bits - 1}, by convolution of integers."""
    counts = [1]
    for _ in range(uniforms):
        new = [0] * (len(counts) + (1 << bits) - 1)
        for x, c in enumerate(counts):
            for u in range(1 << bits):
                new[x + u] += c
        counts = new
    log_total = uniforms * bits * math.log(2)
    return {x: math.log(c) - log_total for x, c in enumerate(counts)}


def mechanism_pld(m: dict) -> pld_lib.PrivacyLossDistribution:
    """One mechanism of a record's JSON, all its counts, as dp-accounting's PLD."""
    if m["noise"] == "uniform_sum":
        log_pmf = _uniform_sum_log_pmf(m["uniforms"], m["bits"])
        one = pld_lib.from_two_probability_mass_functions(
            log_pmf, {x + 1: v for x, v in log_pmf.items()})
        times = m["counts_per_record"]
    elif m["noise"] == "discrete_gaussian":
        sigma = math.sqrt(float(Fraction(m["sigma2"])))
        one = pld_lib.from_discrete_gaussian_mechanism(math.nextafter(sigma, 0))
        times = m["counts_per_record"]
    elif m["noise"] == "gaussian_bound":
        # The Gaussian mechanism of variance 1 / (2 rho), then a reveal with prob. eta.
        sigma = math.nextafter(1 / math.sqrt(2 * float(Fraction(m["rho"]))), 0)
        one = pld_lib.from_gaussian_mechanism(sigma).compose(
            pld_lib.from_privacy_parameters(DifferentialPrivacyParameters(0.0, m["eta"])))
        times = 1
    else:
        assert m["noise"] == "pure"
        one = pld_lib.from_privacy_parameters(DifferentialPrivacyParameters(m["epsilon"]))
        times = m["count"]
    return one.self_compose(times) if times > 1 else one


def audit(record: dict) -> float:
    """The record's eps at delta - delta_reserved, by dp-accounting alone."""
    total = None
    for m in record["mechanisms"]:
        composed = mechanism_pld(m)
        total = composed if total is None else total.compose(composed)
    return total.get_epsilon_for_delta(record["delta"] - record["delta_reserved"])


def _record(plan: SessionPlan) -> dict:
    public = plan.to_public("s", ["a", "b"])
    return json.loads(public.model_dump_json(by_alias=True))["privacy"]


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0])
@pytest.mark.parametrize("selection,rounds", [("none", None), ("em", 4),
                                              ("noisy-greedy", None)])
def test_an_auditor_finds_the_plan_spends_the_eps_asked(selection, rounds, epsilon):
    schema = Schema.load(FED_HEART)
    plan = SessionPlan.build(PlanRequest(schema, epsilon, 1e-5, 1143, selection=selection,
                                         rounds=rounds, noise="auto"))
    record = _record(plan)
    assert record["accounting"] == "pld"
    assert record["run_time"] == (["two_way"] if selection == "noisy-greedy" else [])
    assert record["delta"] == 1e-5 and record["epsilon"] == epsilon
    audited = audit(record)
    assert 0.97 * epsilon <= audited <= epsilon
    # The plan accounts on a grid at least as coarse as the auditor's (dp.pld_accounting's
    # grid_for), and a coarser pessimistic grid can only report more.
    assert audited <= record["epsilon_accounted"] * (1 + 1e-9) <= epsilon


def test_the_ledger_reports_the_records_eps_once_everything_is_charged():
    schema = Schema.load(FED_HEART)
    plan = SessionPlan.build(PlanRequest(schema, 1.0, 1e-5, 1143, selection="em", rounds=4,
                                         noise="auto"))
    public = plan.to_public("s", ["a", "b"])
    charges = [("one_way", plan.release("one_way").rho)]
    charges += [(f"select-{i}", plan.selection.step.rho) for i in range(4)]
    charges += [("two_way", plan.release("two_way").rho)]
    assert epsilon_after(public, charges) == pytest.approx(public.privacy.epsilon_accounted)
    assert 0 < epsilon_after(public, charges[:1]) < epsilon_after(public, charges[:3]) \
        < public.privacy.epsilon_accounted
    assert sum((rho for _, rho in charges), Fraction(0)) <= plan.rho_total


def test_the_ledger_counts_noisy_greedys_scores_under_its_selection_entry():
    """The key server charges the scores as "selection"; the record names their noise
    "selection_scores": once every entry is charged the ledger's eps is the record's."""
    schema = Schema.load(FED_HEART)
    plan = SessionPlan.build(PlanRequest(schema, 1.0, 1e-5, 1143, selection="noisy-greedy",
                                         noise="auto"))
    public = plan.to_public("s", ["a", "b"])
    charges = [("one_way", plan.release("one_way").rho),
               ("selection", plan.selection.rho_charged),
               ("two_way", plan.release("two_way").rho)]
    assert epsilon_after(public, charges) == pytest.approx(public.privacy.epsilon_accounted)
    assert epsilon_after(public, charges[:1]) < epsilon_after(public, charges[:2]) \
        < epsilon_after(public, charges)


def test_noisy_greedys_record_bounds_the_release_it_decides_at_run_time():
    schema = Schema.load(FED_HEART)
    plan = SessionPlan.build(PlanRequest(schema, 1.0, 1e-5, 1143, selection="noisy-greedy",
                                         noise="auto"))
    record = _record(plan)
    assert record["accounting"] == "pld" and record["run_time"] == ["two_way"]
    bound = [m for m in record["mechanisms"] if m["noise"] == "gaussian_bound"]
    assert [m["name"] for m in bound] == ["two_way"]
    assert Fraction(bound[0]["rho"]) == plan.release("two_way").rho
    assert {m["name"] for m in record["mechanisms"]} == {"one_way", "selection_scores",
                                                         "two_way"}
    # Uncalibrated (the bench's what-if plans): the Renyi bound, the release unnamed.
    old = _record(SessionPlan.build(PlanRequest(schema, 1.0, 1e-5, 1143, selection="noisy-greedy",
                                                noise="auto", calibrated=False)))
    assert old["accounting"] == "rdp" and old["epsilon_accounted"] is None
    assert {m["name"] for m in old["mechanisms"]} == {"one_way", "selection_scores"}


# A tiny session: two binary columns, every pair (one), joint noise where it fits.
TINY = {"columns": [{"name": "a", "type": "categorical", "i2s": ["0", "1"]},
                    {"name": "b", "type": "categorical", "i2s": ["0", "1"]}]}


def _exact_loss_law(record: dict) -> dict[float, float]:
    law = {0.0: 1.0}
    for m in record["mechanisms"]:
        if m["noise"] == "uniform_sum":
            pmf = {x: math.exp(v) for x, v in _uniform_sum_log_pmf(m["uniforms"],
                                                                    m["bits"]).items()}
            times = m["counts_per_record"]
        else:
            assert m["noise"] == "discrete_gaussian"
            s2 = float(Fraction(m["sigma2"]))
            reach = int(40 * math.sqrt(s2)) + 2
            weights = {x: math.exp(-x * x / (2 * s2)) for x in range(-reach, reach + 1)}
            norm = sum(weights.values())
            pmf = {x: w / norm for x, w in weights.items() if w > 0}
            times = m["counts_per_record"]
        one: dict[float, float] = {}
        for x, p in pmf.items():
            q = pmf.get(x - 1, 0.0)
            loss = math.inf if q == 0 else round(math.log(p / q), 12)
            one[loss] = one.get(loss, 0.0) + p
        for _ in range(times):
            out: dict[float, float] = {}
            for la, pa in law.items():
                for lb, pb in one.items():
                    key = round(la + lb, 9)
                    out[key] = out.get(key, 0.0) + pa * pb
            law = out
    return law


def test_a_tiny_sessions_record_holds_by_exact_enumeration():
    plan = SessionPlan.build(PlanRequest(Schema.from_dict(TINY), 4.0, 1e-3, 60,
                                         parameter_set="test-small", noise="auto",
                                         selection="none"))
    record = _record(plan)
    law = _exact_loss_law(record)
    delta = record["delta"] - record["delta_reserved"]
    exact = sum(p if loss == math.inf else p * max(0.0, 1 - math.exp(4.0 - loss))
                for loss, p in law.items())
    assert exact <= delta  # sound: the exact delta at the eps asked fits
    assert audit(record) <= 4.0

    def exact_delta(eps: float) -> float:
        return sum(p if loss == math.inf else p * max(0.0, 1 - math.exp(eps - loss))
                   for loss, p in law.items())

    lo, hi = 0.0, 4.0  # tight: the exact eps at that delta is within 3% of the eps asked
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if exact_delta(mid) <= delta else (mid, hi)
    assert 0.97 * 4.0 <= hi <= 4.0
