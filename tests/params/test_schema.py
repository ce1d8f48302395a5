import json

import numpy as np
import pytest

from feddpsyn.params.schema import ContinuousColumn, Schema, SchemaError
from feddpsyn.params.table_codec import decode_records


def test_reads_the_synmeter_adult_schema(data_dir):
    schema = Schema.load(data_dir / "adult" / "adult.schema.json")
    assert len(schema.columns) == 15
    assert schema.column("age").size == 10  # default bins
    assert schema.column("native-country").size == 42
    assert schema.column("age").integer


def test_bins_come_from_public_bounds_and_edges_are_exact():
    col = ContinuousColumn("x", 0, 10, bins=5)
    assert col.edges() == [0, 2, 4, 6, 8, 10]
    assert [col.bin_of(v) for v in (0, 1.999, 2, 9.99, 10)] == [0, 0, 1, 4, 4]
    # CSV text is read exactly: "0.3" sits on an edge and belongs to the upper bin.
    assert ContinuousColumn("y", 0, 1, bins=10).bin_of("0.3") == 3


@pytest.mark.parametrize("raw, message", [
    ({"columns": "no"}, "'columns' list"),
    ({"columns": [{"name": "a", "type": "continuous", "min": 1, "max": 1},
                  {"name": "b", "type": "categorical", "i2s": ["x"]}]}, "must be below"),
    ({"columns": [{"name": "a", "type": "categorical", "i2s": []},
                  {"name": "b", "type": "categorical", "i2s": ["x"]}]}, "non-empty"),
    ({"columns": [{"name": "a", "type": "weird"},
                  {"name": "b", "type": "categorical", "i2s": ["x"]}]}, "unknown type"),
    ({"columns": [{"name": "a", "type": "categorical", "i2s": ["x"]},
                  {"name": "a", "type": "categorical", "i2s": ["x"]}]}, "duplicate column"),
    ({"columns": [{"name": "a", "type": "categorical", "i2s": ["x", "x"]},
                  {"name": "b", "type": "categorical", "i2s": ["x"]}]}, "duplicate categories"),
    ({"columns": [{"name": "a", "type": "continuous", "min": 0, "max": 1, "bins": 0},
                  {"name": "b", "type": "categorical", "i2s": ["x"]}]}, "'bins'"),
])
def test_malformed_schemas_are_refused_with_the_reason(raw, message):
    with pytest.raises(SchemaError, match=message):
        Schema.from_dict(raw)


def test_schema_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text("{not json")
    with pytest.raises(SchemaError, match="s.json: not valid JSON"):
        Schema.load(bad)
    with pytest.raises(SchemaError, match="not found"):
        Schema.load(tmp_path / "missing.json")


def test_fingerprint_changes_with_bins():
    base = {"columns": [{"name": "a", "type": "continuous", "min": 0, "max": 9},
                        {"name": "b", "type": "categorical", "i2s": ["x", "y"]}]}
    other = json.loads(json.dumps(base))
    other["columns"][0]["bins"] = 3
    assert Schema.from_dict(base).fingerprint() != Schema.from_dict(other).fingerprint()


def test_decoding_returns_original_types_inside_each_bin():
    schema = Schema.from_dict({"columns": [
        {"name": "age", "type": "continuous", "min": 17, "max": 90},
        {"name": "w", "type": "continuous", "min": 0.0, "max": 1.0, "bins": 4},
        {"name": "c", "type": "categorical", "i2s": ["p", "q"]}]})
    records = np.array([[b, b % 4, b % 2] for b in range(10)] * 20)
    rows = decode_records(records, schema, np.random.default_rng(0))
    for rec, row in zip(records, rows):
        age = int(row[0])  # integer column decodes to integers
        assert schema.column("age").bin_of(age) == rec[0]
        assert schema.column("w").bin_of(float(row[1])) == rec[1]
        assert row[2] == ["p", "q"][rec[2]]


def run_cli(*args):
    import subprocess
    import sys
    from pathlib import Path

    return subprocess.run([sys.executable, "-m", "feddpsyn.cli", *args],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=300)


def test_schema_draft_guesses_types_and_never_reads_bounds(tmp_path):
    from feddpsyn.params.table_codec import encode_csv

    table = tmp_path / "t.csv"
    lines = ["bmi,flag,city,age,visit_id"]
    lines += [f"{15.96 + i * 0.37:.2f},{i % 2},{'Zürich' if i % 3 else 'Genève'},{20 + i},v{i}"
              for i in range(40)]
    lines.append("53.13,NA,Bern,61,v40")
    table.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "draft.json"
    result = run_cli("schema", "draft", "--csv", str(table), "--out", str(out), "--bounds",
                     "bmi=15.96:53.13")
    assert result.returncode == 0, result.stderr
    assert "NOT differentially private" in result.stdout
    draft = json.loads(out.read_text(encoding="utf-8"))
    assert "NOT differentially private" in draft["note"]
    entries = {c["name"]: c for c in draft["columns"]}
    assert entries["bmi"] == {"name": "bmi", "type": "continuous", "min": 15.96, "max": 53.13,
                              "bins": 10, "integer": False}
    flag = {k: v for k, v in entries["flag"].items() if k != "from_data"}
    assert flag == {"name": "flag", "type": "categorical", "i2s": ["0", "1"]}
    # Categories read from the data are marked as such, a numeric column's as numeric.
    assert entries["flag"]["from_data"].startswith("numeric values listed as categories")
    assert entries["city"]["from_data"].startswith("categories read from the table")
    assert "from_data" not in entries["bmi"]
    assert entries["city"]["i2s"] == ["Bern", "Genève", "Zürich"]
    # More distinct numbers than --max-categories: continuous, bounds left to the user.
    assert entries["age"]["type"] == "continuous" and entries["age"]["min"] is None
    assert "bounds NOT SET" in result.stdout and "identifier or free text" in result.stdout
    assert "flag: categorical, 2 categories\n  - missing values: 1 ('NA' x1)" in result.stdout
    # Unfinished, the draft does not load; the check says what to declare, a line each.
    check = run_cli("schema", "check", "--schema", str(out))
    assert check.returncode == 1
    assert check.stdout.splitlines() == [
        f"problem: {out}: column 'age': continuous needs public 'min' (declare it from public "
        "knowledge, not from the data)",
        f"problem: {out}: column 'age': continuous needs public 'max' (declare it from public "
        "knowledge, not from the data)"]
    with pytest.raises(SchemaError, match="continuous needs public 'min'"):
        Schema.load(out)
    # With every bound declared it loads, and the table encodes except its missing value.
    result = run_cli("schema", "draft", "--csv", str(table), "--out", str(out), "--force",
                     "--bounds", "bmi=15.96:53.13", "--bounds", "age=0:120",
                     "--categorical", "visit_id")
    assert result.returncode == 0, result.stderr
    schema = Schema.load(out)
    assert schema.column("age").integer and schema.column("visit_id").size == 41
    # It loads, but the check warns while the draft's note and marks remain, naming each
    # column whose categories came from the data; finished by hand, the warnings go.
    check = run_cli("schema", "check", "--schema", str(out))
    assert check.returncode == 0
    warnings = [line for line in check.stdout.splitlines() if line.startswith("warning: ")]
    assert warnings[0].startswith("warning: this schema still carries the draft's note")
    assert {w.split("'")[1] for w in warnings[1:]} == {"flag", "city", "visit_id"}
    assert "column 'flag': numeric values guessed categorical" in check.stdout
    finished = json.loads(out.read_text(encoding="utf-8"))
    del finished["note"]
    for column in finished["columns"]:
        column.pop("from_data", None)
    out.write_text(json.dumps(finished), encoding="utf-8")
    check = run_cli("schema", "check", "--schema", str(out))
    assert check.returncode == 0 and "warning" not in check.stdout
    assert len(encode_csv(table, schema, on_invalid="drop").records) == 40
    refused = run_cli("schema", "draft", "--csv", str(table), "--out", str(out))
    assert refused.returncode == 2 and "add --force" in refused.stderr


def test_schema_check_explains_each_problem_in_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"columns": [
        {"name": "a", "type": "continuous", "min": 5, "max": 1},
        {"name": "b", "type": "categorical", "i2s": ["x", "x "]},
        {"name": "c", "type": "continuous", "min": "ten", "max": 3, "bins": 0},
        {"name": "d", "type": "weird"}]}))
    result = run_cli("schema", "check", "--schema", str(bad))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"problem: {bad}: column 'a': 'min' (5) must be below 'max' (1)",
        f"problem: {bad}: column 'b': duplicate categories in 'i2s' (compared without "
        "surrounding spaces, Unicode NFC)",
        f"problem: {bad}: column 'c': 'min' must be a finite number, not 'ten'",
        f"problem: {bad}: column 'c': 'bins' must be an integer in [1, 4096], not 0",
        f"problem: {bad}: column 'd': unknown type 'weird' (continuous or categorical)"]
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"columns": [
        {"name": "n", "type": "continuous", "min": 0, "max": 3, "bins": 6},
        {"name": "s", "type": "categorical", "i2s": ["M", "m"]}]}))
    table = tmp_path / "t.csv"
    table.write_text("n,s\n1,M\n4,m\n2,X\n")
    result = run_cli("schema", "check", "--schema", str(good), "--csv", str(table))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"ok: {good}: 2 columns, domain sizes n=6, s=2",
        "warning: column 'n': integer column whose bins 1, 3 hold no integer (bin width 0.5): "
        "use fewer bins or set \"integer\": false",
        "warning: column 's': categories ['M', 'm'] differ only in case: they are distinct "
        "categories",
        f"problem: {table}: row 2 (line 3), column 'n': value 4 outside public bounds [0, 3]",
        f"problem: {table}: row 3 (line 4), column 's': unknown category 'X' (known: 'M', 'm')"]
