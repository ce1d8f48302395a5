"""The client agent counts a table in bounded memory (``clients.counting``), bit for bit as
the whole table counted at once, with the same one-line errors.

The reference is the whole-file path the agent used before: the file read and decoded whole,
split by the csv module over the text, every row encoded, then ``MarginalLayout.counts`` of
all the records (written out here, so a change to the codec cannot move both sides).
"""

import csv
import io
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import feddpsyn.params.table_codec as codec
from feddpsyn.clients.counting import count_csv
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.schema import Schema
from feddpsyn.params.table_codec import (
    EncodingTally,
    InvalidValueError,
    encode_csv_chunks,
    encode_rows,
    stream_csv,
)

ROOT = Path(__file__).resolve().parents[2]


def whole_file_rows(path: Path) -> tuple[list[str], list[list[str]], list[int]]:
    """The previous reader: the whole file in memory, decoded, then split."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InvalidValueError(f"{path}: file not found") from None
    except OSError as exc:
        raise InvalidValueError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise InvalidValueError(f"{path}: line {line}: not UTF-8 text (byte "
                                f"{data[exc.start]:#04x}); save the file as UTF-8") from None
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows, lines, header, previous_end = [], [], None, 0
    try:
        for record in reader:
            start, previous_end = previous_end + 1, reader.line_num
            if not record:
                continue
            if header is None:
                header = record
            else:
                rows.append(record)
                lines.append(start)
    except csv.Error as exc:
        raise InvalidValueError(f"{path}: line {reader.line_num}: malformed CSV ({exc})") from None
    if header is None:
        raise InvalidValueError(f"{path}: empty file (no header)")
    return header, rows, lines


def whole_file_counts(path: Path, schema: Schema, layout: MarginalLayout,
                      on_invalid: str = "error"):
    header, rows, lines = whole_file_rows(path)
    table = encode_rows(rows, header, schema, source=str(path), on_invalid=on_invalid,
                        lines=lines)
    return layout.counts(table.records), table


def shared_tables(data_dir: Path) -> list[tuple[Path, Path]]:
    tables = [(data_dir / name / f"{name}.csv", data_dir / name / f"{name}.schema.json")
              for name in ("adult", "computers", "doctor_contacts", "mroz", "wages")]
    # The bundled demo table with the schema the project ships for it.
    tables.append((data_dir / "fed_heart_disease" / "fed_heart_disease.csv",
                   ROOT / "params" / "schemas" / "fed_heart_disease.schema.json"))
    return tables


@pytest.mark.parametrize("name", ["adult", "computers", "doctor_contacts", "mroz", "wages",
                                  "fed_heart_disease"])
def test_counts_equal_the_whole_file_path_on_the_shared_tables(data_dir, name):
    csv_path, schema_path = dict((p.parent.name, (p, s))
                                 for p, s in shared_tables(data_dir))[name]
    schema = Schema.load(schema_path)
    layout = MarginalLayout.build(schema.domain_sizes)
    expected, table = whole_file_counts(csv_path, schema, layout)
    # Chunks that do not divide the row count, and the default chunk.
    for chunk_rows in (997, codec.CHUNK_ROWS):
        counts, tally = count_csv(csv_path, schema, layout, chunk_rows=chunk_rows)
        assert counts.dtype == expected.dtype and np.array_equal(counts, expected)
        assert (tally.rows_read, tally.rows_kept) == (table.rows_read, len(table.records))
        assert tally.summary() == table.summary()


def test_the_chunks_are_the_whole_tables_records(data_dir):
    csv_path = data_dir / "computers" / "computers.csv"
    schema = Schema.load(data_dir / "computers" / "computers.schema.json")
    chunks = list(encode_csv_chunks(csv_path, schema, chunk_rows=1000))
    assert [len(c) for c in chunks[:-1]] == [1000] * (len(chunks) - 1)
    header, rows, lines = whole_file_rows(csv_path)
    whole = encode_rows(rows, header, schema, source=str(csv_path), lines=lines).records
    assert np.array_equal(np.concatenate(chunks), whole)


@pytest.mark.parametrize("policy", ["clamp", "drop"])
def test_policies_count_and_report_as_the_whole_file_path(tmp_path, policy):
    schema = Schema.from_dict({"columns": [
        {"name": "age", "type": "continuous", "min": 0, "max": 100, "bins": 4},
        {"name": "sex", "type": "categorical", "i2s": ["F", "M"]}]})
    path = tmp_path / "t.csv"
    rng = np.random.default_rng(3)
    values = ["-5", "250", "10", "", "50.5", "x", "99", "100"]
    path.write_text("age,sex\n" + "".join(
        f"{rng.choice(values)},{rng.choice(['F', 'M', 'X', 'NA'])}\n" for _ in range(5000))
        + "1,F,extra\n")
    layout = MarginalLayout.build(schema.domain_sizes)
    expected, table = whole_file_counts(path, schema, layout, policy)
    counts, tally = count_csv(path, schema, layout, on_invalid=policy, chunk_rows=64)
    assert np.array_equal(counts, expected)
    assert (tally.dropped, tally.clamped) == (table.dropped, table.clamped)
    assert tally.summary() == table.summary()


SCHEMA = Schema.from_dict({"columns": [
    {"name": "x", "type": "continuous", "min": 0, "max": 10, "bins": 5},
    {"name": "c", "type": "categorical", "i2s": ["a", "b"]}]})
GOOD = "".join(f"{i % 11},{'ab'[i % 2]}\n" for i in range(300_000))  # about 1.2 MB


@pytest.mark.parametrize("data", [
    b"",                                          # empty
    b"\n\r\n\n",                                  # blank lines only
    b"x;c\n1;a\n",                                # another separator
    b"x,x,c\n1,1,a\n",                            # duplicate header
    b"x,c\n1,a\n2\n",                             # a short row
    b"x,c\n1,a\n\n11,a\n",                        # out of bounds after a blank line
    b'x,c\n1,"a\n2,b\n',                          # a quote left open
    b'x,c\n1,"a\nb"\n3,q\n',                      # a line break inside quotes, then bad
    b"\xef\xbb\xbfx,c\r\n1,a\r\n2,z\r\n",         # BOM and CRLF, then an unknown category
    b"x,c\r1,a\r2,b\r3,\r",                       # CR line ends, a missing value
    b"x,c\n1,caf\xe9\n",                          # Latin-1
    ("x,c\n" + GOOD).encode() + b"1,\xe9\n",      # not UTF-8 past the first megabyte
    ("x,c\n" + GOOD).encode() + b"1,\xe2\x82",    # a character cut off at the end
    ("x,c\n" + GOOD + "12,a\n").encode(),         # a bad value past the first megabyte
], ids=lambda d: repr(d[:12]) + f"+{len(d)}")
def test_the_same_one_line_error_as_the_whole_file_path(tmp_path, data):
    path = tmp_path / "owner.csv"
    path.write_bytes(data)
    layout = MarginalLayout.build(SCHEMA.domain_sizes)
    with pytest.raises(InvalidValueError) as whole:
        whole_file_counts(path, SCHEMA, layout)
    with pytest.raises(InvalidValueError) as streamed:
        count_csv(path, SCHEMA, layout, chunk_rows=100)
    assert str(streamed.value) == str(whole.value)
    assert "\n" not in str(streamed.value) and str(path) in str(streamed.value)


def test_bytes_that_are_not_utf8_after_a_byte_order_mark_are_named_exactly(tmp_path):
    """The whole-file path counted from after the mark and named a byte 3 places early (here
    the line end before the bad byte); the streamed path names the bad byte and its line."""
    path = tmp_path / "owner.csv"
    path.write_bytes(b"\xef\xbb\xbfx,c\n1,\xff\n")
    with pytest.raises(InvalidValueError) as streamed:
        count_csv(path, SCHEMA, MarginalLayout.build(SCHEMA.domain_sizes))
    assert str(streamed.value) == (f"{path}: line 2: not UTF-8 text (byte 0xff); save the "
                                   "file as UTF-8")


def test_missing_files_and_folders_are_named(tmp_path):
    layout = MarginalLayout.build(SCHEMA.domain_sizes)
    for path in (tmp_path / "nope.csv", tmp_path):
        with pytest.raises(InvalidValueError) as whole:
            whole_file_counts(path, SCHEMA, layout)
        with pytest.raises(InvalidValueError) as streamed:
            count_csv(path, SCHEMA, layout)
        assert str(streamed.value) == str(whole.value)


def test_a_wrong_header_fails_before_the_rest_is_read(tmp_path):
    """The header is checked on the first line: a body that would fail too (here, bytes that
    are not UTF-8 past the first megabyte) is never read."""
    path = tmp_path / "owner.csv"
    path.write_bytes(("x,kind\n" + GOOD).encode() + b"1,\xe9\n")
    with pytest.raises(InvalidValueError, match=r"header \(line 1\) does not match the schema"):
        count_csv(path, SCHEMA, MarginalLayout.build(SCHEMA.domain_sizes))


def test_a_line_longer_than_any_table_row_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(codec, "LINE_LIMIT", 1000)
    path = tmp_path / "junk.csv"
    path.write_text("x,c\n1,a\n" + "z" * 5000 + "\n")
    with pytest.raises(InvalidValueError, match=r"line 3: longer than 1000 characters"):
        count_csv(path, SCHEMA, MarginalLayout.build(SCHEMA.domain_sizes))
    path.write_text("x,c\n" + "1,a\n" * 3)  # short lines: no limit reached
    assert count_csv(path, SCHEMA, MarginalLayout.build(SCHEMA.domain_sizes))[1].rows_kept == 3


def test_the_value_memo_is_bounded_and_changes_nothing(tmp_path, monkeypatch):
    schema = Schema.from_dict({"columns": [
        {"name": "v", "type": "continuous", "min": 0, "max": 1, "bins": 7},
        {"name": "c", "type": "categorical", "i2s": ["a", "b"]}]})
    path = tmp_path / "unique.csv"
    rng = np.random.default_rng(0)
    path.write_text("v,c\n" + "".join(f"{u:.12f},{'ab'[u < 0.3]}\n"
                                      for u in rng.random(3000)))
    layout = MarginalLayout.build(schema.domain_sizes)
    expected, _ = whole_file_counts(path, schema, layout)
    monkeypatch.setattr(codec, "_CACHE_LIMIT", 10)
    assert np.array_equal(count_csv(path, schema, layout, chunk_rows=50)[0], expected)


def _peak_bytes(path: Path, schema: Schema, layout: MarginalLayout) -> int:
    tracemalloc.start()
    try:
        count_csv(path, schema, layout, chunk_rows=2048)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_file(tmp_path, data_dir):
    """Python's allocations while counting a table 6 times as long: the peak stays put (about
    1 MB: a chunk of rows, the counts, the memo)."""
    source = data_dir / "computers" / "computers.csv"
    schema = Schema.load(data_dir / "computers" / "computers.schema.json")
    layout = MarginalLayout.build(schema.domain_sizes)
    header, *body = source.read_text().splitlines(keepends=True)
    peaks = []
    for copies in (1, 6):
        path = tmp_path / f"x{copies}.csv"
        path.write_text(header + "".join(body) * copies)
        peaks.append(_peak_bytes(path, schema, layout))
    small, large = peaks
    assert large < 1.5 * small + (1 << 20), peaks
    assert large < 8 << 20, peaks


def test_stream_csv_gives_rows_with_their_first_lines(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b'x,c\n\n1,"a\nb"\n2,b\n')
    with stream_csv(path) as (header, records):
        assert header == ["x", "c"]
        assert list(records) == [(["1", "a\nb"], 3), (["2", "b"], 5)]
    tally = EncodingTally()
    assert list(encode_csv_chunks(tmp_path / "t.csv", SCHEMA, on_invalid="drop",
                                  tally=tally))[0].tolist() == [[1, 1]]
    assert (tally.rows_read, tally.rows_kept, dict(tally.dropped)) == (2, 1, {"c": 1})


# ------------------------------------------------------------------ schema draft
def test_the_draft_reads_a_column_past_its_kept_values_for_its_type(tmp_path, monkeypatch):
    """Past MAX_DISTINCT distinct values a column keeps none: its type, its integers, its
    values outside declared bounds and its missing values are read as before; a text
    column says it lists only the first ones."""
    from fractions import Fraction

    import feddpsyn.clients.schema_draft as draft

    rng = np.random.default_rng(5)
    path = tmp_path / "owner.csv"
    rows = [f"{i},{rng.integers(0, 200)},{rng.random() * 10:.3f},id{i},"
            f"{rng.choice(['a', 'b', 'NA'])}" for i in range(400)]
    rows[350] = "350,7,,id350,a"  # a missing value past the kept ones
    path.write_text("n,k,x,ident,c\n" + "\n".join(rows) + "\n")
    bounds = {"k": (Fraction(0), Fraction(150))}
    whole, whole_cols = draft.draft_schema(path, bounds)
    monkeypatch.setattr(draft, "MAX_DISTINCT", 50)
    capped, capped_cols = draft.draft_schema(path, bounds)
    assert capped["columns"][:3] == whole["columns"][:3]
    assert [c.notes for c in capped_cols[:3]] == [c.notes for c in whole_cols[:3]]
    assert capped["columns"][4] == whole["columns"][4] and capped_cols[4].notes == \
        whole_cols[4].notes
    assert len(capped["columns"][3]["i2s"]) == 50
    assert any("more than 50 distinct values" in n for n in capped_cols[3].notes)


def test_the_draft_memory_does_not_grow_with_the_file(tmp_path, data_dir):
    from feddpsyn.clients.schema_draft import draft_schema

    source = data_dir / "computers" / "computers.csv"
    header, *body = source.read_text().splitlines(keepends=True)
    peaks, drafts = [], []
    for copies in (1, 6):
        path = tmp_path / f"x{copies}.csv"
        path.write_text(header + "".join(body) * copies)
        tracemalloc.start()
        try:
            drafts.append(draft_schema(path)[0]["columns"])
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert drafts[0] == drafts[1]
    assert peaks[1] < 1.5 * peaks[0] + (1 << 20), peaks
