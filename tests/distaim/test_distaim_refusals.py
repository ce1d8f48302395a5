"""A DistAIM session that cannot finish is refused when it is created, with its remedy; and a
server's state is its owner's only.

The reserve (``distaim.reserve``): the least total variation any run of a plan adds is
checked at creation by the function that checks a run's at its end, so a plan refused here
is one every run of which would have failed after its MPC (exit 7), and the remedy it names
builds. The floor is checked against what a run in one process adds (MPyC's local runtime:
no parties, no sockets). File modes: the smallest constructor that makes the state (the
service, then the app) without starting any MPC party.
"""

import re
import stat
from fractions import Fraction

import numpy as np
import pytest
from fastapi.testclient import TestClient

from feddpsyn.distaim.app import create_app
from feddpsyn.distaim.party import ReserveExceeded, _within_reserve
from feddpsyn.distaim.plan import SessionRequest, build_plan
from feddpsyn.distaim.reserve import least_tv, tv_to_delta
from feddpsyn.distaim.service import DistServer
from feddpsyn.distaim.validation import validation_tv

SCHEMA = {"name": "t", "columns": [
    {"name": "a", "type": "categorical", "i2s": ["x", "y", "z"]},
    {"name": "b", "type": "categorical", "i2s": ["u", "v"]},
    {"name": "c", "type": "categorical", "i2s": ["p", "q", "r", "s"]}]}
MPC = ["127.0.0.1:9301", "127.0.0.1:9302", "127.0.0.1:9303"]
MODULUS = 2**127 - 1


def _request(**changes) -> SessionRequest:
    return SessionRequest.model_validate(
        {"session_id": "sx", "schema": SCHEMA, "clients": ["a", "b"], "epsilon": 1.0,
         "delta": 1e-5, "mpc_parties": MPC} | changes)


def _remedy(message: str, what: str) -> float:
    return float(re.search(rf"{what} to at (?:most|least) ([0-9.e+-]+)", message).group(1))


def test_a_plan_over_its_reserve_is_refused_with_a_remedy_that_builds():
    with pytest.raises(ReserveExceeded) as refused:
        build_plan(_request(epsilon=50.0), MODULUS)
    message = str(refused.value)
    assert "exceeds the reserve 1.000e-08" in message and "lower epsilon" in message
    assert "raise delta" not in message  # it would take delta >= 1
    plan = build_plan(_request(epsilon=_remedy(message, "lower epsilon")), MODULUS)
    assert least_tv(plan) * tv_to_delta(plan.epsilon) <= Fraction(plan.delta_reserve)
    with pytest.raises(ReserveExceeded) as refused:
        build_plan(_request(epsilon=20.0), MODULUS)
    build_plan(_request(epsilon=20.0, delta=_remedy(str(refused.value), "raise delta")),
               MODULUS)
    with pytest.raises(ReserveExceeded, match="raise delta to at least"):
        build_plan(_request(delta=1e-12), MODULUS)  # no epsilon fits a reserve of 1e-15


@pytest.mark.parametrize("rounds", [3, None], ids=["fixed-rounds", "annealing"])
def test_the_floor_is_below_what_a_run_adds(rounds):
    from feddpsyn.distaim.mpc_runtime import EM_SECINT_BITS, SECINT_BITS, local_runtime
    from feddpsyn.distaim.oracle import MpcOracle
    from feddpsyn.distaim.protocol import client_vector
    from feddpsyn.params.layout import MarginalLayout
    from feddpsyn.synthesis.aim import aim

    rng = np.random.default_rng(0)
    records = np.stack([rng.integers(0, s, 300) for s in (3, 2, 4)], 1)
    rt = local_runtime()
    secint, em_secint = rt.SecInt(SECINT_BITS), rt.SecInt(EM_SECINT_BITS)
    plan = build_plan(_request(epsilon=8.0, rounds=rounds, max_rounds=30),
                      secint.field.modulus)
    workload = [tuple(c) for c in plan.workload]
    layout = MarginalLayout.for_workload(plan.domain_sizes, workload)
    counts = np.array(client_vector(records, layout), dtype=object)
    oracle = MpcOracle(rt, secint, em_secint, secint.array(secint.field.array(counts)), layout,
                       plan.epsilon, rows_bound=1000, score_grid_bits=plan.score_grid_bits)
    aim(oracle, plan.domain_sizes, workload, Fraction(plan.rho), rounds=plan.rounds,
        max_rounds=plan.max_rounds, rng=np.random.default_rng(0))
    ran = oracle.select_tv + oracle.measure_tv + validation_tv(len(layout.cliques))
    assert least_tv(plan) <= ran
    if rounds is not None:  # T selections counted: close; annealing counts its first only
        assert ran <= 3 * least_tv(plan)


def test_a_run_over_its_reserve_is_stopped_by_the_same_check():
    session = {"epsilon": 16.0, "delta": 1e-5, "delta_reserve": "1/100000000"}
    assert _within_reserve(session, Fraction(1, 10**16))
    with pytest.raises(ReserveExceeded, match=r"this run's .* lower epsilon to at most 14\.\d "
                                              r"or raise delta to at least 4\.4\de-05"):
        _within_reserve(session, Fraction(5, 10**15))


def test_the_intake_refuses_it_with_409_and_stores_nothing(tmp_path):
    with TestClient(create_app(tmp_path / "s1", 1, MPC[0])) as server:
        auth = {"Authorization": "Bearer "
                + (tmp_path / "s1" / "operator.token").read_text().strip()}
        body = _request(epsilon=50.0).model_dump(by_alias=True)
        refused = server.post("/sessions", json=body, headers=auth)
        assert refused.status_code == 409
        assert "lower epsilon to at most" in refused.json()["detail"]
        assert server.get("/sessions/sx/status", headers=auth).status_code == 404
        assert not (tmp_path / "s1" / "sessions" / "sx").exists()


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_state_is_the_owners_only(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    (state / "intake.sqlite").touch(mode=0o644)  # as an earlier version left it
    service = DistServer(state, 1, MPC[0])
    assert _mode(state) == 0o700 and _mode(state / "intake.sqlite") == 0o600
    service.create(_request())
    with service.db.connect() as conn:  # SQLite's -wal and -shm take the file's mode
        assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 1
        assert _mode(state / "intake.sqlite-wal") == _mode(state / "intake.sqlite-shm") == 0o600
    create_app(state, 1, MPC[0])  # the operator's token
    files = [p for p in state.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"intake.sqlite", "session.json", "operator.token"}
    assert {p.name: _mode(p) for p in files} == {p.name: 0o600 for p in files}
