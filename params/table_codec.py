"""CSV -> encoded records (bin indices), with every bad value named by file, row and column.

Design concern: **a data owner's mistake is reported, never silently absorbed.** By default
any invalid value stops the run with an error naming the file, the 1-based data row, its
line in the file and the column. Values are read as written: numbers as exact decimals
(plain or scientific notation) against the schema's exact bounds, with the schema's one
binning rule (``params.schema``); categories as NFC text without surrounding spaces; a
value that is no category and reads as "", NA, N/A, NaN, null, None or ? is a missing
value. Two documented policies relax the default:

* ``clamp``: out-of-bounds numbers are clamped to the schema's public bounds; rows with a
  missing value, an unknown category or a non-numeric continuous value are still dropped
  (there is nothing public to clamp them to).
* ``drop``: every row with any invalid value is dropped.

Both policies report what they did (counts per column) so nothing happens unseen.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from params.exact_numbers import parse_decimal, scaled_text
from params.schema import CategoricalColumn, ContinuousColumn, Schema, normalise_text

InvalidPolicy = Literal["error", "clamp", "drop"]

__all__ = ["InvalidValueError", "EncodedTable", "MISSING_MARKERS", "encode_csv", "encode_rows",
           "find_problems", "read_csv", "decode_records"]


class InvalidValueError(ValueError):
    """A CSV does not fit its schema; the message names file, row and column."""


@dataclass
class EncodedTable:
    records: np.ndarray  # rows x columns, int64 bin indices
    rows_read: int
    dropped: Counter = field(default_factory=Counter)  # column -> rows dropped for it
    clamped: Counter = field(default_factory=Counter)  # column -> values clamped

    def summary(self) -> str:
        parts = [f"{len(self.records)} rows encoded of {self.rows_read} read"]
        if self.dropped:
            parts.append("dropped: " + ", ".join(f"{c}={n}" for c, n in self.dropped.items()))
        if self.clamped:
            parts.append("clamped: " + ", ".join(f"{c}={n}" for c, n in self.clamped.items()))
        return "; ".join(parts)


# Text a data owner's export writes for "no value" (pandas, R, SQL dumps, UCI's "?"). A
# category that is literally one of these (Adult's "?") is still that category: the schema
# decides first.
OTHER_SEPARATORS = (";", "\t", "|")
MISSING_MARKERS = frozenset({"", "na", "n/a", "nan", "null", "none", "?"})


def encode_rows(rows: list[list[str]], header: list[str], schema: Schema, *,
                source: str = "<rows>", on_invalid: InvalidPolicy = "error",
                lines: list[int] | None = None) -> EncodedTable:
    """Encode already-split rows; ``source`` names the file in error messages and
    ``lines`` gives each row's first line in the file (default: row r is line r + 1)."""
    if on_invalid not in ("error", "clamp", "drop"):
        raise ValueError(f"unknown --on-invalid policy {on_invalid!r}")
    header = [normalise_text(h) for h in header]
    positions = _header_positions(header, schema, source)
    out = np.zeros((len(rows), len(schema.columns)), dtype=np.int64)
    kept = 0
    table = EncodedTable(records=out, rows_read=len(rows))
    cache: list[dict[str, _Reading]] = [{} for _ in schema.columns]
    for r, row in enumerate(rows, start=1):
        where = f"{source}: row {r} (line {lines[r - 1] if lines else r + 1})"
        if len(row) != len(header):
            if on_invalid == "error":
                raise InvalidValueError(f"{where}: has {len(row)} fields, header has "
                                        f"{len(header)}")
            table.dropped["<row length>"] += 1
            continue
        encoded, bad_column = _encode_row(row, positions, schema, where, on_invalid, table,
                                          cache)
        if bad_column is not None:
            table.dropped[bad_column] += 1
            continue
        out[kept] = encoded
        kept += 1
    table.records = out[:kept]
    return table


def _header_positions(header: list[str], schema: Schema, source: str) -> list[int]:
    where = f"{source}: header (line 1)"
    repeated = sorted({h for h in header if header.count(h) > 1})
    if repeated:
        places = ", ".join(f"column '{h}' at positions "
                           + " and ".join(str(i + 1) for i, x in enumerate(header) if x == h)
                           for h in repeated)
        raise InvalidValueError(f"{where}: duplicate column names: {places}")
    expected = list(schema.names)
    missing = [c for c in expected if c not in header]
    extra = [c for c in header if c not in expected]
    if missing or extra:
        detail = []
        if missing:
            detail.append(f"missing columns {missing}")
        if extra:
            detail.append(f"unexpected columns {extra}")
        separators = [sep for sep in OTHER_SEPARATORS if len(header) == 1 and sep in header[0]]
        if separators:
            detail.append(f"the file is read as comma-separated: is it separated by "
                          f"{separators[0]!r}?")
        raise InvalidValueError(f"{where} does not match the schema: " + "; ".join(detail))
    return [header.index(c) for c in expected]


@dataclass(frozen=True)
class _Reading:
    """What one raw field means for one column: its bin, or the problem (and, for a number
    outside the bounds, the bin it clamps to)."""

    bin: int | None
    problem: str | None = None
    clamped_bin: int | None = None


def _read_value(column, raw: str) -> _Reading:
    raw = raw.strip()
    if isinstance(column, CategoricalColumn):
        if column.has(raw):
            return _Reading(column.bin_of(raw))
        if raw.lower() in MISSING_MARKERS:
            return _Reading(None, f"missing value ({raw!r})")
        return _Reading(None, f"unknown category {raw!r} (known: {_preview(column.categories)})")
    assert isinstance(column, ContinuousColumn)
    value = parse_decimal(raw)
    if value is None and raw.lower() in MISSING_MARKERS:
        return _Reading(None, f"missing value ({raw!r})")
    if value is None:
        hint = (f" (decimal comma? write {raw.replace(',', '.')})"
                if parse_decimal(raw.replace(",", ".")) is not None else "")
        return _Reading(None, f"non-numeric value {raw!r} in a continuous column{hint}")
    if column.min <= value <= column.max:
        return _Reading(column.bin_of(value))
    return _Reading(None, f"value {raw} outside public bounds {column.bounds_text()}",
                    column.bin_of(column.clamp(value)))


def _encode_row(row, positions, schema, where, on_invalid, table, cache):
    encoded = []
    for pos, column, seen in zip(positions, schema.columns, cache):
        # Exports repeat values endlessly (ages, codes): read each distinct text once.
        reading = seen.get(row[pos])
        if reading is None:
            reading = seen[row[pos]] = _read_value(column, row[pos])
        if reading.bin is not None:
            encoded.append(reading.bin)
            continue
        if reading.clamped_bin is not None and on_invalid == "clamp":
            table.clamped[column.name] += 1
            encoded.append(reading.clamped_bin)
            continue
        if on_invalid == "error":
            raise InvalidValueError(f"{where}, column '{column.name}': {reading.problem}")
        return None, column.name
    return encoded, None


def _preview(items, limit: int = 6) -> str:
    shown = ", ".join(map(repr, items[:limit]))
    return shown + (", ..." if len(items) > limit else "")


def read_csv(path: str | Path) -> tuple[list[str], list[list[str]], list[int]]:
    """(header, data rows, each row's first line number) of a CSV file.

    UTF-8 with or without a byte-order mark; CRLF, LF or CR line ends; quoted fields may hold
    commas and line breaks; blank lines are skipped (and line numbers stay true). Errors
    name the file and the line.
    """
    path = Path(path)
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
    # strict: a quote left open is an error, not the rest of the file swallowed in one field.
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows: list[list[str]] = []
    lines: list[int] = []
    header = None
    previous_end = 0
    try:
        for record in reader:
            start, previous_end = previous_end + 1, reader.line_num
            if not record:
                continue  # a blank line is not a record
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


def find_problems(path: str | Path, schema: Schema, limit: int = 20) -> tuple[list[str], int]:
    """Every problem of a CSV against a schema, one line each naming file, row, line and
    column: (the first ``limit`` lines, the total count). A header problem stops there."""
    header, rows, lines = read_csv(path)
    try:
        positions = _header_positions([normalise_text(h) for h in header], schema, str(path))
    except InvalidValueError as exc:
        return [str(exc)], 1
    found: list[str] = []
    total = 0
    cache: list[dict[str, _Reading]] = [{} for _ in schema.columns]
    for r, (row, line) in enumerate(zip(rows, lines), start=1):
        where = f"{path}: row {r} (line {line})"
        if len(row) != len(header):
            problems = [f"{where}: has {len(row)} fields, header has {len(header)}"]
        else:
            problems = []
            for pos, column, seen in zip(positions, schema.columns, cache):
                reading = seen.get(row[pos])
                if reading is None:
                    reading = seen[row[pos]] = _read_value(column, row[pos])
                if reading.bin is None:
                    problems.append(f"{where}, column '{column.name}': {reading.problem}")
        total += len(problems)
        found.extend(problems[:max(0, limit - len(found))])
    return found, total


def encode_csv(path: str | Path, schema: Schema, *,
               on_invalid: InvalidPolicy = "error") -> EncodedTable:
    """Encode a CSV file with ``schema``: every row's bins, or an error naming file, row,
    line and column. A header-only file encodes to zero rows."""
    header, rows, lines = read_csv(path)
    return encode_rows(rows, header, schema, source=str(path), on_invalid=on_invalid,
                       lines=lines)


_WIDEST_DRAW = 2 ** 62


def decode_records(records: np.ndarray, schema: Schema,
                   rng: np.random.Generator) -> list[list[str]]:
    """Map bin indices back to values of the original columns.

    Categorical bins give their category. A continuous bin gives a value drawn uniformly
    from the decimal grid of ``ContinuousColumn.decode_range`` (integers for integer
    columns), so every decoded value encodes back into its own bin by the schema's one
    binning rule. Synthesis is post-processing: this randomness carries no privacy claim.
    """
    columns_out = []
    for j, column in enumerate(schema.columns):
        idx = records[:, j]
        if isinstance(column, CategoricalColumn):
            cats = np.array(column.categories, dtype=object)
            columns_out.append(cats[idx])
            continue
        places = column.decode_places
        values = np.empty(len(idx), dtype=object)
        for b in np.unique(idx):
            where = np.flatnonzero(idx == b)
            first, last = column.decode_range(int(b))
            count = last - first + 1
            if count <= _WIDEST_DRAW:
                offsets = [int(o) for o in rng.integers(0, count, len(where))]
            else:  # a grid wider than int64 (extreme bounds): scale a 62-bit draw onto it
                offsets = [int(u) * count >> 62 for u in rng.integers(0, _WIDEST_DRAW,
                                                                      len(where))]
            values[where] = [scaled_text(first + o, places) for o in offsets]
        columns_out.append(values)
    return [list(row) for row in zip(*columns_out)]
