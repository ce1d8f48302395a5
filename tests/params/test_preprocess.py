import numpy as np
import pytest

from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.schema import Schema
from feddpsyn.params.table_codec import InvalidValueError, encode_csv

SCHEMA = Schema.from_dict({"columns": [
    {"name": "age", "type": "continuous", "min": 0, "max": 100, "bins": 4},
    {"name": "sex", "type": "categorical", "i2s": ["F", "M"]},
]})


def write(tmp_path, text, name="owner.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_encodes_a_valid_file(tmp_path):
    table = encode_csv(write(tmp_path, "age,sex\n10,F\n100,M\n55.5,M\n"), SCHEMA)
    assert table.records.tolist() == [[0, 0], [3, 1], [2, 1]]


def test_column_order_in_the_file_does_not_matter(tmp_path):
    table = encode_csv(write(tmp_path, "sex,age\nF,10\n"), SCHEMA)
    assert table.records.tolist() == [[0, 0]]


@pytest.mark.parametrize("body, message", [
    ("age,sex\n10,F\n101,M\n", r"row 2 \(line 3\), column 'age': value 101 outside public bounds"),
    ("age,sex\n10,X\n", r"row 1 \(line 2\), column 'sex': unknown category 'X'"),
    ("age,sex\n,F\n", r"row 1 \(line 2\), column 'age': missing value"),
    ("age,sex\nold,F\n", r"column 'age': non-numeric value 'old'"),
    ("age,sex\nnan,F\n", r"column 'age': missing value \('nan'\)"),
    ("age,sex\ninf,F\n", r"column 'age': non-numeric value 'inf'"),
    ("age,sex\n1/3,F\n", r"column 'age': non-numeric value '1/3'"),
    ("age,sex\n\"5,5\",F\n", r"non-numeric value '5,5' in a continuous column \(decimal comma\? "
                            r"write 5.5\)"),
    ("age,sex\n10,F,extra\n", r"row 1 \(line 2\): has 3 fields"),
    ("age,gender\n10,F\n", r"missing columns \['sex'\]; unexpected columns \['gender'\]"),
    ("age\n10\n", r"missing columns \['sex'\]"),
    ("age,sex,sex\n10,F,F\n", r"header \(line 1\): duplicate column names: column 'sex' at "
                               r"positions 2 and 3"),
    ("age;sex\n10;F\n", r"is it separated by ';'\?"),
])
def test_every_bad_value_is_named_by_file_row_and_column(tmp_path, body, message):
    path = write(tmp_path, body)
    with pytest.raises(InvalidValueError, match=message) as info:
        encode_csv(path, SCHEMA)
    assert str(path) in str(info.value)


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(InvalidValueError, match="empty file"):
        encode_csv(write(tmp_path, ""), SCHEMA)
    with pytest.raises(InvalidValueError, match="file not found"):
        encode_csv(tmp_path / "nope.csv", SCHEMA)


def test_clamp_policy_clamps_numbers_and_drops_what_cannot_be_clamped(tmp_path):
    path = write(tmp_path, "age,sex\n-5,F\n250,M\n10,X\n,F\n50,F\n")
    table = encode_csv(path, SCHEMA, on_invalid="clamp")
    assert table.records.tolist() == [[0, 0], [3, 1], [2, 0]]
    assert table.clamped["age"] == 2
    assert table.dropped == {"sex": 1, "age": 1}


def test_drop_policy_drops_every_invalid_row(tmp_path):
    path = write(tmp_path, "age,sex\n-5,F\n10,X\n50,F\n")
    table = encode_csv(path, SCHEMA, on_invalid="drop")
    assert table.records.tolist() == [[2, 0]]
    assert sum(table.dropped.values()) == 2
    assert "1 rows encoded of 3 read" in table.summary()


def test_the_whole_adult_file_encodes_without_errors(data_dir):
    schema = Schema.load(data_dir / "adult" / "adult.schema.json")
    table = encode_csv(data_dir / "adult" / "adult.csv", schema)
    assert table.records.shape == (32561, 15)


def test_counts_match_a_direct_tally():
    rng = np.random.default_rng(0)
    sizes = (3, 4, 2)
    records = np.stack([rng.integers(0, s, 500) for s in sizes], axis=1)
    layout = MarginalLayout.build(sizes)
    counts = layout.counts(records)
    for m in layout.marginals:
        block = counts[m.offset:m.offset + m.size].reshape(m.shape)
        expected = np.zeros(m.shape, dtype=int)
        for r in records:
            expected[tuple(r[list(m.attrs)])] += 1
        assert (block == expected).all()
    assert layout.total_cells == 3 + 4 + 2 + 12 + 6 + 8
