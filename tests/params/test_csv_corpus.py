"""A corpus of real-world CSV and schema forms: each encodes as the user meant, or fails with
a message naming the file, the row (and its line) and the column.

The schema's one exact rule (``params.schema``) is checked against an independent integer
formulation, through every path a schema travels: a schema file (exact decimals), a JSON
parser's floats, and the servers' wire format.
"""

import json
import random
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feddpsyn.common import wire
from feddpsyn.params.schema import Schema
from feddpsyn.params.table_codec import InvalidValueError, decode_records, encode_csv, encode_rows


def write_schema(tmp_path, text: str, name="schema.json"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return Schema.load(path)


def write_csv(tmp_path, data: bytes | str, name="owner.csv"):
    path = tmp_path / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def one_continuous(lo: str, hi: str, bins: int = 10, extra: str = "") -> str:
    """Schema text with one continuous column 'x' (bounds as written) and a category 'c'."""
    return ('{"columns": [{"name": "x", "type": "continuous", '
            f'"min": {lo}, "max": {hi}, "bins": {bins}{extra}}}, '
            '{"name": "c", "type": "categorical", "i2s": ["a", "b"]}]}')


def reference_bin(value: str, lo: str, hi: str, bins: int) -> int:
    """Independent of Fraction: scale every decimal to integers and count the interior edges
    at or below the value, (v - lo) * bins >= i * (hi - lo)."""
    places = max(-Decimal(t).as_tuple().exponent for t in (value, lo, hi))
    v, a, b = (int(Decimal(t).scaleb(places)) for t in (value, lo, hi))
    return sum(1 for i in range(1, bins) if (v - a) * bins >= i * (b - a))


# The four forms that were refused at upload: a value equal to its declared decimal bound.
ISSUE_FORMS = [("15.96", "15.96", "53.13"), ("1.98", "1.45", "1.98"),
               ("1.488", "0.001", "1.488"), ("4.2835", "4.2835", "334.177")]


@pytest.mark.parametrize("value, lo, hi", ISSUE_FORMS)
def test_a_value_equal_to_a_decimal_bound_encodes_by_every_path(tmp_path, value, lo, hi):
    from_file = write_schema(tmp_path, one_continuous(lo, hi))
    # A JSON parser's floats (what pydantic hands the servers) read back as written.
    from_floats = Schema.from_dict(json.loads(one_continuous(lo, hi)))
    on_the_wire = Schema.from_dict(wire.SessionCreate.model_validate_json(wire.SessionCreate(
        schema=from_file.to_dict(), clients=["a"], budget=wire.BudgetSpec(epsilon=1, delta=1e-6)
    ).model_dump_json(by_alias=True)).schema_)
    assert from_file == from_floats == on_the_wire
    assert from_file.fingerprint() == on_the_wire.fingerprint()
    csv_path = write_csv(tmp_path, f"x,c\n{value},a\n{lo},b\n{hi},a\n")
    for schema in (from_file, from_floats, on_the_wire):
        records = encode_csv(csv_path, schema).records  # no --on-invalid needed
        expected = [reference_bin(v, lo, hi, 10) for v in (value, lo, hi)]
        assert records[:, 0].tolist() == expected
        assert expected[1] == 0 and expected[2] == 9


@pytest.mark.parametrize("places", range(1, 7))
def test_values_at_both_bounds_with_one_to_six_decimals(tmp_path, places):
    rng = random.Random(places)
    for _ in range(40):
        a = rng.randrange(-10 ** (places + 2), 10 ** (places + 2))
        b = a + rng.randrange(1, 10 ** (places + 3))
        lo, hi = (f"{Decimal(n).scaleb(-places):f}" for n in (a, b))
        bins = rng.randrange(1, 40)
        schema = write_schema(tmp_path, one_continuous(lo, hi, bins))
        assert Schema.from_dict(json.loads(one_continuous(lo, hi, bins))) == schema
        # The bounds themselves, padded with zeros, in scientific notation, inner values.
        inner = [f"{Decimal(rng.randrange(a, b + 1)).scaleb(-places):f}" for _ in range(5)]
        sci = f"{Decimal(lo):E}"
        values = [lo, hi, lo + "00", hi + "0", sci] + inner
        path = write_csv(tmp_path, "x,c\n" + "".join(f"{v},a\n" for v in values))
        got = encode_csv(path, schema).records[:, 0].tolist()
        assert got == [reference_bin(v, lo, hi, bins) for v in values], (lo, hi, bins)
        # One step of the last decimal outside either bound is refused, named precisely.
        step = Decimal(1).scaleb(-places)
        for r, outside in enumerate((Decimal(lo) - step, Decimal(hi) + step), start=1):
            bad = write_csv(tmp_path, f"x,c\n{lo},a\n{outside:f},b\n", name=f"bad{r}.csv")
            shown = ", ".join(f"{Decimal(t).normalize():f}" for t in (lo, hi))
            with pytest.raises(InvalidValueError,
                               match=rf"bad{r}.csv: row 2 \(line 3\), column 'x': value "
                                     rf"{outside:f} outside public bounds \[{shown}\]"):
                encode_csv(bad, schema)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.integers(-10 ** 8, 10 ** 8), st.integers(1, 10 ** 8), st.integers(0, 6),
       st.integers(1, 64), st.lists(st.floats(0, 1), min_size=1, max_size=8))
def test_the_rule_matches_an_integer_reference(a, width, places, bins, positions):
    lo, hi = (f"{Decimal(n).scaleb(-places):f}" for n in (a, a + width))
    column = Schema.from_dict(json.loads(one_continuous(lo, hi, bins))).columns[0]
    for p in positions:
        value = f"{Decimal(a + round(p * width)).scaleb(-places):f}"
        assert column.in_bounds(value)
        assert column.bin_of(value) == reference_bin(value, lo, hi, bins)


def test_scientific_notation_in_schema_and_values(tmp_path):
    schema = write_schema(tmp_path, one_continuous("0.5e1", "1.55E2", 3))
    # Edges at 5, 55, 105, 155: "5.5e1" and "1.05E+2" sit exactly on the inner edges.
    values = ["5E0", "5.5e1", "54.9999e0", "1.05E+2", "1.55e2", "+0.0155e4"]
    path = write_csv(tmp_path, "x,c\n" + "".join(f"{v},a\n" for v in values))
    assert encode_csv(path, schema).records[:, 0].tolist() == [0, 1, 0, 2, 2, 2]


def test_integer_columns_with_decimal_bounds(tmp_path):
    # Integer data, bounds written as decimals: encoded exactly, decoded as the user's type.
    schema = write_schema(tmp_path, one_continuous("0.5", "10.5", 5, ', "integer": true'))
    path = write_csv(tmp_path, "x,c\n1,a\n10,b\n3,a\n")
    assert encode_csv(path, schema).records[:, 0].tolist() == [0, 4, 1]
    decoded = decode_records(np.array([[b, 0] for b in range(5)] * 30), schema,
                             np.random.default_rng(0))
    assert {int(row[0]) for row in decoded} <= set(range(1, 11))
    # Without "integer", bounds that are not JSON integers make a decimal column.
    plain = write_schema(tmp_path, one_continuous("0.5", "10.5", 5), name="plain.json")
    assert not plain.columns[0].integer
    with pytest.raises(Exception, match="no integer between its bounds"):
        write_schema(tmp_path, one_continuous("0.2", "0.8", 2, ', "integer": true'),
                     name="none.json")


def test_negative_ranges(tmp_path):
    schema = write_schema(tmp_path, one_continuous("-10.5", "-0.25", 4))
    values = ["-10.5", "-0.25", "-5.375", "-5.37500001", "-7.9375", "-2.8125"]
    path = write_csv(tmp_path, "x,c\n" + "".join(f"{v},a\n" for v in values))
    got = encode_csv(path, schema).records[:, 0].tolist()
    assert got == [reference_bin(v, "-10.5", "-0.25", 4) for v in values] == [0, 3, 2, 1, 1, 3]


def test_bom_crlf_quotes_spaces_and_unicode(tmp_path):
    schema = Schema.from_dict({"columns": [
        {"name": "x", "type": "continuous", "min": 15.96, "max": 53.13, "bins": 2},
        {"name": "status", "type": "categorical",
         "i2s": ["Married, spouse present", "café", "東京", " padded "]}]})
    decomposed = "cafe\u0301"  # "café" typed with a combining accent (NFD)
    text = ("\ufeff x , status \r\n"
            "15.96,\"Married, spouse present\"\r\n"
            f" 53.13 , {decomposed} \r\n"
            "\"20\",東京\r\n"
            "40,padded\r\n")
    table = encode_csv(write_csv(tmp_path, text), schema)
    assert table.records.tolist() == [[0, 0], [1, 1], [0, 2], [1, 3]]


def test_empty_strings_and_na_are_missing_values_named_precisely(tmp_path):
    schema = write_schema(tmp_path, one_continuous("0", "1.5"))
    for raw, shown in (("", "''"), ("NA", "'NA'"), ("n/a", "'n/a'"), ("NaN", "'NaN'")):
        path = write_csv(tmp_path, f"x,c\n0.5,a\n\n{raw},b\n")
        # The blank line is skipped and the line number stays true to the file.
        with pytest.raises(InvalidValueError, match=rf"owner.csv: row 2 \(line 4\), column "
                                                    rf"'x': missing value \({shown}\)"):
            encode_csv(path, schema)
        dropped = encode_csv(path, schema, on_invalid="drop")
        assert dropped.records.tolist() == [[3, 0]] and dropped.dropped == {"x": 1}
    path = write_csv(tmp_path, "x,c\n0.5,NA\n")
    with pytest.raises(InvalidValueError, match=r"row 1 \(line 2\), column 'c': missing "
                                                r"value \('NA'\)"):
        encode_csv(path, schema)
    # A declared category that reads like a missing marker is that category (Adult's "?").
    marked = Schema.from_dict({"columns": [{"name": "w", "type": "categorical",
                                            "i2s": ["?", "NA", "Private"]},
                                           {"name": "c", "type": "categorical", "i2s": ["a"]}]})
    path = write_csv(tmp_path, "w,c\n?,a\nNA,a\nPrivate,a\n")
    assert encode_csv(path, marked).records[:, 0].tolist() == [0, 1, 2]


@pytest.mark.parametrize("i2s", ['["0", "1"]', "[0, 1]"])
def test_categories_that_look_like_numbers(tmp_path, i2s):
    schema = write_schema(tmp_path, '{"columns": [{"name": "flag", "type": "categorical", '
                                    f'"i2s": {i2s}}}, {{"name": "x", "type": "continuous", '
                                    '"min": 0, "max": 1}]}')
    path = write_csv(tmp_path, "flag,x\n0,1\n1,0\n 1 ,0.5\n")
    assert encode_csv(path, schema).records.tolist() == [[0, 9], [1, 0], [1, 5]]
    bad = write_csv(tmp_path, "flag,x\n0,1\n1.0,0\n", name="bad.csv")
    with pytest.raises(InvalidValueError, match=r"bad.csv: row 2 \(line 3\), column 'flag': "
                                                r"unknown category '1.0' \(known: '0', '1'\)"):
        encode_csv(bad, schema)


def test_duplicate_headers_name_the_file_and_columns(tmp_path):
    schema = write_schema(tmp_path, one_continuous("0", "1"))
    path = write_csv(tmp_path, "x,c,x\n0,a,1\n")
    with pytest.raises(InvalidValueError, match=r"owner.csv: header \(line 1\): duplicate "
                                                r"column names: column 'x' at positions 1 "
                                                r"and 3"):
        encode_csv(path, schema)


@pytest.mark.parametrize("text", ["x,c\n", "x,c", "\ufeffx,c\r\n", "x,c\r\n\r\n"])
def test_a_header_only_file_encodes_to_no_rows(tmp_path, text):
    schema = write_schema(tmp_path, one_continuous("0", "1"))
    table = encode_csv(write_csv(tmp_path, text), schema)
    assert table.records.shape == (0, 2) and table.rows_read == 0


def test_line_numbers_survive_quoted_line_breaks(tmp_path):
    schema = Schema.from_dict({"columns": [
        {"name": "note", "type": "categorical", "i2s": ["two\nlines", "one"]},
        {"name": "x", "type": "continuous", "min": 0, "max": 1}]})
    path = write_csv(tmp_path, 'note,x\n"two\nlines",0\none,2\n')
    with pytest.raises(InvalidValueError, match=r"row 2 \(line 4\), column 'x': value 2 "
                                                r"outside public bounds \[0, 1\]"):
        encode_csv(path, schema)


def test_files_that_are_not_utf8_or_not_csv_name_the_line(tmp_path):
    schema = write_schema(tmp_path, one_continuous("0", "1"))
    latin1 = write_csv(tmp_path, "x,c\n0,a\n1,caf\xe9\n".encode("latin-1"))
    with pytest.raises(InvalidValueError, match=r"owner.csv: line 3: not UTF-8 text"):
        encode_csv(latin1, schema)
    # An unterminated quote would swallow the rest of the file into one field.
    unterminated = write_csv(tmp_path, 'x,c\n0,a\n1,"b\n0,a\n', name="quote.csv")
    with pytest.raises(InvalidValueError, match=r"quote.csv: line 4: malformed CSV"):
        encode_csv(unterminated, schema)


def test_decoded_values_encode_back_into_their_own_bins(tmp_path):
    columns = [("15.96", "53.13", 10, ""), ("1.45", "1.98", 7, ""), ("0.001", "1.488", 32, ""),
               ("4.2835", "334.177", 10, ""), ("-10.5", "-0.25", 4, ""),
               ("0.5", "10.5", 5, ', "integer": true'), ("17", "90", 10, ""),
               ("0", "1e-6", 3, "")]
    for i, (lo, hi, bins, extra) in enumerate(columns):
        schema = write_schema(tmp_path, one_continuous(lo, hi, bins, extra), name=f"s{i}.json")
        records = np.array([[b, 0] for b in range(bins)] * 50)
        rows = decode_records(records, schema, np.random.default_rng(i))
        again = encode_rows(rows, ["x", "c"], schema).records
        assert (again == records).all(), (lo, hi, bins)
        assert all(Fraction(r[0]) == Fraction(Decimal(r[0])) for r in rows)


def test_a_long_decimal_bound_stays_exact_on_the_wire():
    lo = "0.12345678901234567891"  # more digits than a double holds
    schema = Schema.from_dict({"columns": [
        {"name": "x", "type": "continuous", "min": Decimal(lo), "max": 1},
        {"name": "c", "type": "categorical", "i2s": ["a"]}]})
    assert schema.to_dict()["columns"][0]["min"] == lo  # written as exact text
    sent = wire.SessionCreate(schema=schema.to_dict(), clients=["a"],
                              budget=wire.BudgetSpec(epsilon=1, delta=1e-6))
    received = Schema.from_dict(
        wire.SessionCreate.model_validate_json(sent.model_dump_json(by_alias=True)).schema_)
    assert received.columns[0].min == Fraction(lo) and received == schema
    assert received.columns[0].in_bounds(lo) and not received.columns[0].in_bounds(
        "0.1234567890123456789")
