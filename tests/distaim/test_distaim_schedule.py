"""Which clients DistAIM's rounds read (``distaim.protocol.Schedule``): the deferred default,
FLAIM's interleaved schedule, enrolment 1-ways; p = 1 is central AIM under every schedule."""

import random
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.distaim.bench_distaim_flaim import SubsetOracle  # noqa: E402
from feddpsyn.distaim.mpc_runtime import EM_SECINT_BITS, SECINT_BITS, local_runtime  # noqa: E402
from feddpsyn.distaim.oracle import MpcOracle  # noqa: E402
from feddpsyn.distaim.plan import SessionRequest, build_plan, plan_digest  # noqa: E402
from feddpsyn.distaim.protocol import Layout, Participation, Schedule, client_vector  # noqa: E402
from feddpsyn.dp.discrete_gaussian import ExactSampler  # noqa: E402
from feddpsyn.synthesis.aim import PlainOracle, aim  # noqa: E402

CLIENTS = [f"c{i:03d}" for i in range(200)]
TENTH = Participation(b"k" * 32, Fraction(1, 10))


def test_deferred_rounds_all_read_the_clients_joined_by_the_window():
    schedule = Schedule(10)
    last = TENTH.joined_by(CLIENTS, 10)
    assert 0 < len(last) < len(CLIENTS)
    assert all(schedule.clients_at(TENTH, CLIENTS, t) == last for t in range(12))
    assert schedule.clients_at(TENTH, CLIENTS, None) == CLIENTS
    assert not schedule.grows(TENTH.rate)


def test_interleaved_round_t_reads_the_clients_joined_by_t():
    schedule = Schedule(10, "interleaved")
    for t in range(12):
        assert schedule.clients_at(TENTH, CLIENTS, t) == TENTH.joined_by(CLIENTS, t)
    assert schedule.grows(TENTH.rate)


@pytest.mark.parametrize("mode", ["deferred", "interleaved"])
def test_enrolment_one_ways_read_every_client_then_the_schedule(mode):
    schedule = Schedule(10, mode, enrolment_one_ways=True)
    assert schedule.clients_at(TENTH, CLIENTS, 0) == CLIENTS
    expect = 10 if mode == "deferred" else 3
    assert schedule.clients_at(TENTH, CLIENTS, 3) == TENTH.joined_by(CLIENTS, expect)
    assert schedule.grows(TENTH.rate)


@pytest.mark.parametrize("schedule", [Schedule(4), Schedule(4, "interleaved"),
                                      Schedule(4, "deferred", True)])
def test_every_client_every_round_at_rate_one(schedule):
    everyone = Participation(b"k" * 32, Fraction(1))
    assert all(schedule.clients_at(everyone, CLIENTS, t) == CLIENTS for t in (None, 0, 1, 7))
    assert not schedule.grows(everyone.rate)


def test_a_bad_schedule_is_refused():
    with pytest.raises(ValueError):
        Schedule(10, "eventually")
    with pytest.raises(ValueError):
        Schedule(-1)


def _table(rows=3000, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, rows)
    return np.stack([a, (a + rng.integers(0, 2, rows)) % 4, rng.integers(0, 2, rows)], 1)


@pytest.mark.parametrize("schedule", [Schedule(4), Schedule(4, "interleaved"),
                                      Schedule(4, "deferred", True)])
def test_rate_one_is_central_aim_step_for_step(schedule):
    """With p = 1 the federated run is central AIM's: same selections, same measurements,
    same ledger, when the private randomness is the same."""
    sizes, workload = (3, 4, 2), [(0, 1), (0, 2), (1, 2)]
    records = _table()
    owner = np.arange(len(records)) % 6
    central = PlainOracle(records, sizes, ExactSampler(random.Random(7).randrange))
    federated = SubsetOracle(records, owner, sizes, 1, 6, schedule)
    federated.sampler = ExactSampler(random.Random(7).randrange)
    assert not federated.grows
    runs = [aim(o, sizes, workload, Fraction(1, 2), rounds=4, max_rounds=4)
            for o in (central, federated)]
    assert runs[0].selected == runs[1].selected
    assert runs[0].rho_spent == runs[1].rho_spent == Fraction(1, 2)
    for a, b in zip(runs[0].measurements, runs[1].measurements, strict=True):
        assert a.attrs == b.attrs and a.variance == b.variance
        assert np.array_equal(a.counts, b.counts)


def test_deferred_mpc_oracle_reads_one_client_set_and_spends_exactly_rho():
    sizes, workload = [3, 4, 2], [(0, 1), (0, 2), (1, 2)]
    records = _table()
    owner = np.arange(len(records)) % 30
    ids = [f"c{k:03d}" for k in range(30)]
    layout = Layout.for_workload(sizes, workload)
    participation = Participation(b"d" * 32, Fraction(1, 5))
    schedule = Schedule(4)
    rt = local_runtime(prss_seed=b"deferred")
    secint, em = rt.SecInt(SECINT_BITS), rt.SecInt(EM_SECINT_BITS)
    read = []

    def totals_at_round(t):
        joined = schedule.clients_at(participation, ids, t)
        read.append(tuple(joined))
        mask = np.isin(owner, [ids.index(c) for c in joined])
        return secint.array(secint.field.array(client_vector(records[mask], layout)
                                               .astype(object)))

    oracle = MpcOracle(rt, secint, em, None, layout, 1.0, totals_at_round=totals_at_round,
                       grows=schedule.grows(participation.rate))
    result = aim(oracle, sizes, workload, Fraction(1, 2), rounds=4, max_rounds=4)
    assert result.rho_spent == Fraction(1, 2)
    assert read == [tuple(participation.joined_by(ids, 4))]   # one set, never advanced
    assert result.notes["noisy_sizes"] == []                 # nothing to rescale
    joined_rows = int(np.isin(owner, [ids.index(c) for c in read[0]]).sum())
    for m in result.measurements[:3]:
        assert abs(m.counts.sum() - joined_rows) < 6 * np.sqrt(m.variance * m.counts.size)


BASE = {"session_id": "s1", "clients": ["a", "b", "c"], "epsilon": 1.0, "delta": 1e-6,
        "mpc_parties": ["127.0.0.1:9101", "127.0.0.1:9102", "127.0.0.1:9103"],
        "participation": "1/2",
        "schema": {"name": "t", "columns": [
            {"name": n, "type": "categorical", "i2s": ["x", "y"]} for n in "pqr"]}}


def test_the_plan_carries_the_schedule_where_it_changes_the_run():
    default = build_plan(SessionRequest.model_validate(BASE), 2**127 - 1)
    assert default.schedule == "deferred" and not default.enrolment_one_ways
    # p < 1: deferred is named (plans without the key ran interleaved, distaim.plan)
    assert default.mapping()["schedule"] == "deferred"
    assert "enrolment_one_ways" not in default.mapping()
    others = [build_plan(SessionRequest.model_validate(BASE | change), 2**127 - 1)
              for change in ({"schedule": "interleaved"}, {"enrolment_one_ways": True})]
    assert "schedule" not in others[0].mapping() and others[0].schedule == "interleaved"
    assert others[1].mapping()["enrolment_one_ways"] is True
    digests = {plan_digest(p.mapping()) for p in [default, *others]}
    assert len(digests) == 3
    with pytest.raises(ValueError):
        SessionRequest.model_validate(BASE | {"schedule": "later"})


