"""The main job end to end (``feddpsyn demo``), and the command line's error handling.

The demos, the bench and the commands that talk to servers run ``python -m feddpsyn.cli`` in
a process of their own (:func:`feddpsyn`); the checks of a command's own answers (its
refusals, ``client check``, ``synthesize``) run the same command tree in this process
(:func:`cli`), without the seconds each new interpreter spends importing. The operator's and
data owners' workflow by hand is in ``tests/servers/test_servers_selection.py``, on its em
session."""

import csv
import json
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from typer.testing import CliRunner

from feddpsyn.common.version import VERSION

ROOT = Path(__file__).resolve().parents[2]


def feddpsyn(*args, check=False):
    return subprocess.run([sys.executable, "-m", "feddpsyn.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=900, check=check)


def cli(*args) -> subprocess.CompletedProcess:
    """The same command in this process (``feddpsyn.cli.app``): its exit status, stdout and
    stderr, as :func:`feddpsyn` gives them (an unexpected exception's traceback on stderr)."""
    from feddpsyn.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(["feddpsyn", *args], result.exit_code, result.stdout,
                                       stderr)


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "out"
    # Every pair, no encrypted selection: the selection's own server tests cover it, and the
    # default demo's selection takes minutes. Each server's own Gaussian: the joint noise's
    # encrypted bits cost ~50x the release (the demo on a user table below takes the default,
    # the joint noise, and tests/servers/test_joint_release_servers.py its law).
    result = feddpsyn("demo", "--selection", "none", "--noise", "two-server", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_demo_writes_the_report_and_a_synthetic_table(demo_out, data_dir):
    report = json.loads((demo_out / "report.json").read_text())
    assert report["dataset"] == "fed_heart_disease" and report["clients"] == 4
    assert report["version"] == VERSION and report["privacy"]["version"] == VERSION
    assert report["contributors"] == [f"owner{i}" for i in range(4)] and report["absent"] == []
    # The published record re-accounted from the report alone (feddpsyn audit).
    audited = cli("audit", demo_out / "report.json", "--json")
    assert audited.returncode == 0, audited.stderr
    assert abs(json.loads(audited.stdout)["epsilon"]
               - report["privacy"]["epsilon_accounted"]) <= 1e-6
    assert report["method"] == "gum"  # auto: every pair was released
    assert report["noise"]["kind"] == "two-server"
    assert report["rows_union"] == 740
    assert 0 < report["epsilon_spent"] <= 1.0
    assert report["delta"] == 1e-5
    for key in ("one_way", "two_way", "three_way"):
        assert 0 <= report["workload_error"][key] <= 2
        assert 0 <= report["central_workload_error"][key] <= 2
    assert {"client_uploads", "encrypt_aggregate_release", "synthesis"} <= set(report["phases"])
    # Where the online phase's core-seconds went (feddpsyn.core_seconds, computeserver.metering)
    cores = report["core_seconds"]
    online = cores["phases"]["encrypt_aggregate_release"]
    assert online["wall_s"] > 0 and online["computeserver"] > 0 and online["keyserver"] > 0
    assert online["idle"] >= 0
    assert [s["step"] for s in cores["compute_server_steps"]] == ["release"]
    # Each server's peak: a Python process with concrete loaded is past 100 MB.
    for server in ("keyserver", "computeserver"):
        assert report["peak_memory_mb"][server]["process_mb"] > 100
    with (demo_out / "synthetic.csv").open() as fh:
        rows = list(csv.reader(fh))
    with (data_dir / "fed_heart_disease" / "fed_heart_disease.csv").open() as fh:
        header = next(csv.reader(fh))
    assert rows[0] == header
    assert len(rows) - 1 == report["rows_synthetic"]


def test_demo_refuses_a_non_empty_output_directory(demo_out):
    result = cli("demo", "--out", str(demo_out))
    assert result.returncode == 2 and "not empty" in result.stderr


# pgm: on the demo's release on a user table (test_demo_on_a_table_written_by_the_test), whose
# 6 pairs it fits in a second where Fed-Heart-Disease's 66 take half a minute.
@pytest.mark.parametrize("method", ["auto", "gum"])
def test_synthesize_command_on_the_demo_release(demo_out, tmp_path, method):
    out = tmp_path / "synth.csv"
    result = cli("synthesize", "--release", str(demo_out / "release.json"), "--schema",
                 str(ROOT / "params" / "schemas" / "fed_heart_disease.schema.json"),
                 "--method", method, "--rows", "100", "--out", str(out), "--seed", "3")
    assert result.returncode == 0, result.stderr
    # auto names what it chose: GUM, since the demo release holds every pair
    assert result.stdout.rstrip().endswith("(gum)" if method == "auto" else f"({method})")
    with out.open() as fh:
        assert len(list(csv.reader(fh))) == 101


def test_synthesize_refuses_a_mismatched_schema_and_bad_files(demo_out, tmp_path, data_dir):
    result = cli("synthesize", "--release", str(demo_out / "release.json"), "--schema",
                 str(data_dir / "adult" / "adult.schema.json"), "--out", str(tmp_path / "x.csv"))
    assert result.returncode == 2 and "differs" in result.stderr
    bogus = tmp_path / "bogus.json"
    bogus.write_text("{}")
    result = cli("synthesize", "--release", str(bogus), "--out", str(tmp_path / "y.csv"))
    assert result.returncode == 2 and "not a release document" in result.stderr


def test_client_check_names_the_bad_value(tmp_path):
    schema = ROOT / "params" / "schemas" / "fed_heart_disease.schema.json"
    bad = tmp_path / "bad.csv"
    bad.write_text("center,age,sex,cp,trestbps,chol,fbs,restecg,thalach,exang,oldpeak,target\n"
                   "0,6,1,0,5,4,1,2,4,0,5,0\n0,6,1,9,5,4,1,2,4,0,5,0\n")
    result = cli("client", "check", "--csv", str(bad), "--schema", str(schema))
    assert result.returncode == 2
    assert "bad.csv: row 2 (line 3), column 'cp': unknown category '9'" in result.stderr
    result = cli("client", "check", "--csv", str(bad), "--schema", str(schema),
                 "--on-invalid", "drop")
    assert result.returncode == 0 and "1 rows encoded of 2 read" in result.stdout


def test_start_servers_stops_the_key_server_when_the_compute_server_never_comes_up(
        tmp_path, monkeypatch):
    """A health wait that times out must not leave the other server running."""
    from feddpsyn import demo

    started, waits = [], []
    real_init, real_wait = demo.ServerProcess.__init__, demo.ServerProcess.wait_healthy

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        started.append(self)

    def wait(self, *args, **kwargs):
        waits.append(self)
        if len(waits) == 2:
            raise RuntimeError("not healthy (the test's)")
        return real_wait(self, *args, **kwargs)

    monkeypatch.setattr(demo.ServerProcess, "__init__", init)
    monkeypatch.setattr(demo.ServerProcess, "wait_healthy", wait)
    with pytest.raises(RuntimeError, match="the test's"):
        demo.start_servers(tmp_path / "state")
    assert len(started) == 2
    assert all(server.proc.poll() is not None for server in started)


def write_user_table(directory: Path, rows: int = 400) -> tuple[Path, Path]:
    """A table none of the bundled ones resembles: decimal bounds met exactly by values,
    quoted commas, unicode categories, an owner column the schema does not declare, the
    prediction target neither last nor named like one. Few cells (119: bmi's default 10
    bins, dose in 3): the demo's joint noise costs its encrypted bits per cell."""
    import random

    rng = random.Random(7)
    csv_path, schema_path = directory / "clinic.csv", directory / "clinic.schema.json"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["hospital", "site", "bmi", "outcome", "dose"])
        for i in range(rows):
            bmi = ["15.96", "53.13"][i] if i < 2 else f"{rng.uniform(15.96, 53.13):.2f}"
            dose = ["0.001", "1.488"][i] if i < 2 else f"{rng.uniform(0.001, 1.488):.3f}"
            site = rng.choice(["Zürich", "Genève", "Bern, Nord"])
            outcome = "improved" if float(bmi) < 30 and rng.random() < 0.8 else "same"
            writer.writerow([f"h{i % 3}", site, bmi, outcome, dose])
    schema_path.write_text(json.dumps({"columns": [
        {"name": "site", "type": "categorical", "i2s": ["Zürich", "Genève", "Bern, Nord"]},
        {"name": "bmi", "type": "continuous", "min": 15.96, "max": 53.13},
        {"name": "outcome", "type": "categorical", "i2s": ["same", "improved"]},
        {"name": "dose", "type": "continuous", "min": 0.001, "max": 1.488, "bins": 3}]},
        ensure_ascii=False), encoding="utf-8")
    return csv_path, schema_path


def test_demo_on_a_table_written_by_the_test(tmp_path):
    from feddpsyn.params.schema import Schema
    from feddpsyn.params.table_codec import encode_csv

    table, schema = write_user_table(tmp_path)
    out = tmp_path / "out"
    result = feddpsyn("demo", "--csv", str(table), "--schema", str(schema), "--owner-column",
                      "hospital", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 data owners (natural split by hospital)" in result.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["dataset"] == "clinic" and report["clients"] == 3
    assert report["rows_union"] == 400 and report["selection"] == {"mode": "none"}
    assert report["noise"]["kind"] == "joint"  # the default, auto: the joint noise fits
    assert 0 < report["epsilon_spent"] <= 1.0
    for key in ("one_way", "two_way", "three_way"):
        assert 0 <= report["workload_error"][key] <= 2
        assert 0 <= report["central_workload_error"][key] <= 2
    # Each owner's file holds its own rows, without the owner column the schema leaves out.
    with (out / "clients" / "client0.csv").open(encoding="utf-8") as fh:
        assert next(csv.reader(fh)) == ["site", "bmi", "outcome", "dose"]
    # The synthetic table is in the user's values and encodes back with the same schema.
    synthetic = encode_csv(out / "synthetic.csv", Schema.load(schema))
    assert len(synthetic.records) == report["rows_synthetic"] > 0
    # `synthesize --method pgm` on this release (auto and gum: on the bundled demo's)
    result = cli("synthesize", "--release", str(out / "release.json"), "--schema", str(schema),
                 "--method", "pgm", "--rows", "100", "--out", str(tmp_path / "synth.csv"),
                 "--seed", "3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("(pgm)")
    with (tmp_path / "synth.csv").open(encoding="utf-8") as fh:
        assert len(list(csv.reader(fh))) == 101


def test_adult_as_a_user_table_is_the_bundled_adult_demo(tmp_path, data_dir):
    """Same seed, same owners and rows, same session: `--csv adult.csv --schema
    adult.schema.json` is `--dataset adult` (the servers' noise is fresh in every run)."""
    from feddpsyn.demo import dataset, split_csv, user_table

    bundled = dataset("adult")
    mine = user_table(data_dir / "adult" / "adult.csv", data_dir / "adult" / "adult.schema.json")
    assert (mine.name, mine.csv, mine.schema, mine.natural_column) == (
        bundled.name, bundled.csv, bundled.schema, bundled.natural_column)
    for seed in (0, 5):
        a = split_csv(bundled, 4, tmp_path / f"bundled{seed}", seed)
        b = split_csv(mine, 4, tmp_path / f"mine{seed}", seed)
        assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]


def test_demo_and_bench_refuse_bad_user_tables_by_name_row_and_column(tmp_path):
    table, schema = write_user_table(tmp_path, rows=5)
    with table.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    rows[4][2] = "53.14"  # bmi, just above its public max
    bad = tmp_path / "bad.csv"
    with bad.open("w", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows(rows)
    result = cli("demo", "--csv", str(bad), "--schema", str(schema), "--owner-column",
                 "hospital", "--out", str(tmp_path / "o"))
    assert result.returncode == 2
    assert ("bad.csv: row 4 (line 5), column 'bmi': value 53.14 outside public bounds "
            "[15.96, 53.13]") in result.stderr
    assert not (tmp_path / "o").exists()  # refused before any server started
    for args, message in [
            (("demo", "--csv", str(table)), "--csv and --schema go together"),
            (("demo", "--csv", str(table), "--schema", str(schema), "--owner-column", "ward"),
             "no column 'ward' to split by"),
            (("demo", "--csv", str(table), "--schema", str(schema), "--owner-column",
              "hospital", "--clients", "3"), "leave out --clients"),
            (("bench", "utility", "--csv", str(table), "--schema", str(schema), "--out",
              str(tmp_path / "b")), "give --target"),
            (("bench", "utility", "--csv", str(table), "--schema", str(schema), "--target",
              "hospital", "--out", str(tmp_path / "b")), "--target 'hospital' is not a column")]:
        result = cli(*args)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)


def test_bench_runs_every_method_on_a_user_table(tmp_path):
    from feddpsyn.fedbench.methods import METHODS

    table, schema = write_user_table(tmp_path)
    # The owner column is no schema column: the bench reads the table as the schema says.
    with table.open(encoding="utf-8", newline="") as fh:
        rows = [row[1:] for row in csv.reader(fh)]
    with table.open("w", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows(rows)
    out = tmp_path / "bench"
    result = feddpsyn("bench", "utility", "--csv", str(table), "--schema", str(schema),
                      "--target", "outcome", "--methods", "all", "--epsilon", "1", "--clients", "2",
                      "--repeats", "1", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    with (out / "results.csv").open() as fh:
        results = list(csv.DictReader(fh))
    assert sorted(r["method"] for r in results) == sorted(METHODS)
    for r in results:
        assert 0 <= float(r["two_way"]) <= 2 and 0 <= float(r["f1_gbt"]) <= 1
        assert float(r["rho_spent"]) <= float(r["rho_budget"])
    assert (out / "summary.md").read_text().count("| uniform |") >= len(METHODS)


def test_the_bench_target_reaches_the_classifier_methods():
    import dataclasses

    from feddpsyn.fedbench.methods.target import target_column
    from feddpsyn.params.schema import Schema

    schema = Schema.from_dict({"columns": [
        {"name": "outcome", "type": "categorical", "i2s": ["a", "b"]},
        {"name": "x", "type": "categorical", "i2s": ["a", "b"]}]})
    assert target_column(schema) == 1  # no declaration: the last column
    assert target_column(dataclasses.replace(schema, target="outcome")) == 0


def test_pairs_print_readably():
    from feddpsyn.cli_demo import _pairs_text

    assert _pairs_text([["trestbps", "chol"], ["chol", "target"]]) == (
        "  trestbps × chol\n  chol × target")


def test_client_check_prints_one_fact_a_line(tmp_path):
    schema = ROOT / "params" / "schemas" / "fed_heart_disease.schema.json"
    good = tmp_path / "good.csv"
    good.write_text("center,age,sex,cp,trestbps,chol,fbs,restecg,thalach,exang,oldpeak,target\n"
                    "0,6,1,0,5,4,1,2,4,0,5,0\n")
    result = cli("client", "check", "--csv", str(good), "--schema", str(schema))
    assert result.returncode == 0 and result.stdout.endswith("\n")
    assert result.stdout.splitlines() == [f"ok: {good}", "  1 rows encoded of 1 read",
                                          "  upload: 78 marginals, 1661 cells"]
    empty = tmp_path / "empty.csv"
    empty.write_text(good.read_text().splitlines()[0] + "\n")
    result = cli("client", "check", "--csv", str(empty), "--schema", str(schema))
    assert result.returncode == 0 and result.stdout.endswith(
        "  warning: a header and no data rows: every count is zero; client upload refuses "
        "it unless --allow-empty\n")
