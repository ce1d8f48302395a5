"""``feddpsyn audit`` (``dp.audit``): a published record re-accounted by dp-accounting gives
the eps the record states (same grid, same pessimistic PLD), for a default noisy-greedy
session (its run-time release as a ``gaussian_bound``) and an em session (pure steps);
what is not a record, or an ``rdp`` record, is refused in one line."""

import json

import pytest
from typer.testing import CliRunner

from feddpsyn.cli import app
from feddpsyn.common import wire
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.schema import Schema
from feddpsyn.params.session_plan import SessionPlan

FED_HEART = "params/schemas/fed_heart_disease.schema.json"


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "100"})


@pytest.mark.parametrize(("selection", "rounds"), [("noisy-greedy", None), ("em", 4)])
def test_audit_gives_the_records_eps(tmp_path, selection, rounds):
    plan = SessionPlan.build(PlanRequest(Schema.load(FED_HEART), 1.0, 1e-5, 900,
                                         selection=selection, rounds=rounds, noise="auto"))
    public = plan.to_public("s", ["a"])
    report = tmp_path / "report.json"  # as the demo writes it: the record under "privacy"
    report.write_text(json.dumps({"privacy": public.privacy.model_dump(mode="json")}))
    done = _run("audit", report, "--json")
    assert done.exit_code == 0, done.output
    audit = json.loads(done.stdout)
    assert abs(audit["epsilon"] - public.privacy.epsilon_accounted) <= 1e-6
    assert audit["epsilon"] <= 1.0
    names = [m["name"] for m in audit["mechanisms"]]
    assert names == [m.name for m in public.privacy.mechanisms]
    if selection == "noisy-greedy":
        assert audit["run_time"] == ["two_way"]
        assert "gaussian_bound" in {m["noise"] for m in audit["mechanisms"]}
    # The session's public record works as well as the report, and the text says the same.
    record = tmp_path / "public.json"
    record.write_text(public.model_dump_json(by_alias=True))
    text = _run("audit", record)
    assert text.exit_code == 0 and text.stdout.startswith(f"eps {audit['epsilon']:.6f} at "
                                                          "delta 1e-05")


def test_what_is_not_an_auditable_record_is_refused_in_one_line(tmp_path):
    rdp = wire.PrivacyRecord(epsilon=1.0, delta=1e-5, delta_reserved=0.0, accounting="rdp",
                             mechanisms=[])
    cases = {"notjson.json": "{nope", "empty.json": "{}",
             "rdp.json": json.dumps({"privacy": rdp.model_dump(mode="json")})}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        done = _run("audit", tmp_path / name)
        assert done.exit_code == 2, done.output
        assert len(done.output.strip().splitlines()) == 1, done.output
    assert "accounted 'rdp'" in _run("audit", tmp_path / "rdp.json").output
    assert "no such file" in _run("audit", tmp_path / "missing.json").output.lower()
