"""A lifetime budget across sessions (``dp.lifetime``, ``clients.odometer``,
``keyserver.owner_caps``).

Two default Fed-Heart-Disease sessions at (eps 1, delta 1e-5) compose, from their published
records, to about eps 1.48 at delta 1e-5 (a sum of eps says 2): checked against Google's
dp-accounting called on the records' JSON by an accountant written here. An owner whose cap
is (1.3, 1e-5) joins the first session and is refused the second, by its own agent's
odometer and by the key server holding the same cap; with (1.6, 1e-5) it joins both. The
odometer and the key server's count survive a restart; an owner left out of a session is
not charged for it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

import feddpsyn.keyserver.preparation as preparation
from feddpsyn.cli import app
from feddpsyn.clients.odometer import Odometer, OdometerRefusal, odometer_path
from feddpsyn.common import wire
from feddpsyn.common.serving import ServiceError
from feddpsyn.dp.lifetime import composed_epsilon
from feddpsyn.keyserver.service import KeyServer
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.schema import Schema
from feddpsyn.params.session_plan import SessionPlan
from tests.params.test_privacy_record import mechanism_pld

FED_HEART = "params/schemas/fed_heart_disease.schema.json"
MAX_ROWS = 1143


@pytest.fixture(scope="module")
def default_public() -> wire.SessionPublic:
    """A default Fed-Heart-Disease session's public record (noisy-greedy, auto noise)."""
    plan = SessionPlan.build(PlanRequest(Schema.load(FED_HEART), 1.0, 1e-5, MAX_ROWS,
                                         selection="noisy-greedy", noise="auto"))
    return plan.to_public("s-first", ["alice", "bob"])


def _independent(records: list[dict], delta: float) -> float:
    """Every record's mechanisms composed by dp-accounting directly, at delta minus the
    records' reserved terms (the auditor of tests/params/test_privacy_record.py, over
    several records)."""
    total = None
    for record in records:
        for m in record["mechanisms"]:
            composed = mechanism_pld(m)
            total = composed if total is None else total.compose(composed)
    return total.get_epsilon_for_delta(delta - sum(r["delta_reserved"] for r in records))


def test_two_default_sessions_compose_to_about_1_48_not_2(default_public):
    record = default_public.privacy
    assert record.accounting == "pld" and record.run_time == ["two_way"]
    one = composed_epsilon([record], 1e-5)
    two = composed_epsilon([record, record], 1e-5)
    assert 0.97 <= one <= 1.0
    assert 1.40 <= two <= 1.55, two
    as_json = json.loads(record.model_dump_json())
    independent = _independent([as_json, as_json], 1e-5)
    assert abs(two - independent) <= 0.01 * independent, (two, independent)
    assert composed_epsilon([], 1e-5) == 0.0


def test_a_record_without_its_pld_is_composed_basically():
    rdp = wire.PrivacyRecord(epsilon=0.5, delta=2e-6, delta_reserved=0.0, accounting="rdp",
                             mechanisms=[])
    assert composed_epsilon([rdp, rdp], 1e-5) == 1.0
    assert composed_epsilon([rdp] * 5, 1e-5) == math.inf  # 5 x 2e-6 leaves no delta


def _other(public: wire.SessionPublic, session_id: str) -> wire.SessionPublic:
    return public.model_copy(update={"session_id": session_id})


def test_the_owners_odometer_refuses_past_its_cap_and_survives_a_restart(default_public,
                                                                       tmp_path):
    path = odometer_path(tmp_path, "patients")
    odometer = Odometer(path)
    odometer.set_cap(1.3, 1e-5)
    first = odometer.admit(default_public, "https://ks")
    assert first.sessions == 1 and first.epsilon <= 1.0
    assert odometer.admit(default_public, "https://ks").sessions == 1  # a retry: once
    with pytest.raises(OdometerRefusal, match=r"past its lifetime cap of eps 1.3 \(spent so "
                                              r"far: eps 0\.9\d+ over 1 sessions\)"):
        Odometer(path).admit(_other(default_public, "s-second"), "https://ks")
    again = Odometer(path)  # a restart: the file is the odometer
    assert len(again.sessions()) == 1 and again.cap == (1.3, 1e-5)
    again.set_cap(1.6, 1e-5)
    both = again.admit(_other(default_public, "s-second"), "https://ks")
    assert both.sessions == 2 and 1.40 <= both.epsilon <= 1.55 and both.left > 0
    # What `client budget` shows: the composed spend of the records.
    shown = CliRunner().invoke(app, ["client", "budget", "--table", "patients",
                                     "--state-dir", str(tmp_path), "--json"])
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert doc["sessions"] == 2 and doc["epsilon"] == pytest.approx(both.epsilon)
    assert doc["cap_epsilon"] == 1.6
    text = CliRunner().invoke(app, ["client", "budget", "--table", "patients",
                                    "--state-dir", str(tmp_path)])
    assert f"table patients: 2 sessions, eps {both.epsilon:.4f} at delta 1e-05" in text.stdout


def test_an_odometer_fails_closed(default_public, tmp_path):
    path = odometer_path(tmp_path, "t")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(OdometerRefusal, match="cannot be read"):
        Odometer(path)
    odometer = Odometer(odometer_path(tmp_path, "u"))
    with pytest.raises(OdometerRefusal, match="publishes no privacy record"):
        odometer.admit(default_public.model_copy(update={"privacy": None}), "https://ks")
    with pytest.raises(OdometerRefusal, match="not a table name"):
        odometer_path(tmp_path, "../escape")


def _request(clients=("alice", "bob"), quorum=None) -> wire.SessionCreate:
    return wire.SessionCreate(schema=json.loads(Path(FED_HEART).read_text()),
                              clients=list(clients), max_rows=MAX_ROWS, quorum=quorum,
                              budget=wire.BudgetSpec(epsilon=1.0, delta=1e-5),
                              selection=wire.SelectionRequest(mode="noisy-greedy"))


def no_files(plan, n_clients, directory, *, report, stop):
    directory.mkdir(parents=True)
    return None


def test_the_key_server_holds_an_owners_cap_across_its_sessions(tmp_path, monkeypatch):
    monkeypatch.setattr(preparation, "ACCEPT_WAIT_S", 300.0)  # refusals as 409, at once
    caps = tmp_path / "caps.json"
    caps.write_text(json.dumps({"alice": {"epsilon": 1.3, "delta": 1e-5},
                                "carol": {"epsilon": 1.6, "delta": 1e-5}}))
    service = KeyServer(tmp_path / "ks", prepare=no_files, owner_caps=caps)
    first = service.create_session(_request(["alice", "bob", "carol"], quorum=2))
    service.preparation.wait_ready(first.session_id, timeout=120)
    with pytest.raises(ServiceError) as info:
        service.create_session(_request(["alice", "dave"]))
    assert info.value.status == 409
    assert "owner 'alice': this session would bring its privacy loss at this key server to " \
           "eps 1.4" in info.value.message
    assert "past its cap of eps 1.3 (spent: eps 0.9" in info.value.message
    assert "left: eps 0.3" in info.value.message
    # carol's cap of 1.6 holds two sessions; bob has no cap.
    second = service.create_session(_request(["bob", "carol"]))
    service.preparation.wait_ready(second.session_id, timeout=120)
    service.close()
    # A restart keeps the count (it is the sessions' records).
    service = KeyServer(tmp_path / "ks", prepare=no_files, owner_caps=caps)
    with pytest.raises(ServiceError, match="owner 'carol'"):
        service.create_session(_request(["carol"]))
    # An owner left out of a session is not charged for it.
    service.uploads.leave_out(first.session_id, ["alice"], "the test")
    third = service.create_session(_request(["alice", "bob"]))
    service.preparation.wait_ready(third.session_id, timeout=120)
    service.close()
