import json

import numpy as np
import pytest

from clients.preprocess import decode_records
from params.schema import ContinuousColumn, Schema, SchemaError


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
