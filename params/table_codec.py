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

**Memory does not grow with the file.** :func:`stream_csv` reads a file a line at a time
(the header first, so a wrong header fails before the rest is read) and
:func:`encode_csv_chunks` hands the encoded rows on in chunks of a bounded number of rows;
the client agent counts each chunk and drops it (``clients.counting``). A file is read only
as far as its first problem, so the error named is the first in the file's order.
:func:`read_csv` and :func:`encode_csv` keep the whole table, for callers that need it.
"""

from __future__ import annotations

import codecs
import csv
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from feddpsyn.params.exact_numbers import parse_decimal, scaled_text
from feddpsyn.params.schema import CategoricalColumn, ContinuousColumn, Schema, normalise_text

InvalidPolicy = Literal["error", "clamp", "drop"]

__all__ = ["InvalidValueError", "EncodedTable", "EncodingTally", "MISSING_MARKERS", "encode_csv",
           "encode_csv_chunks", "encode_rows", "find_problems", "read_csv", "stream_csv",
           "decode_records"]

# Rows encoded before a chunk is handed on (about 1 MB of bins at 10 columns).
CHUNK_ROWS = 16384
# The longest physical line read: far above any row a schema admits (the csv module refuses a
# field over 128 KiB), so only a file that is no table (one endless line) reaches it.
LINE_LIMIT = 16 * 1024 * 1024
# Distinct texts remembered per column before the memo is emptied (a column of unique
# decimals would otherwise grow it with the file).
_CACHE_LIMIT = 1 << 16


class InvalidValueError(ValueError):
    """A CSV does not fit its schema; the message names file, row and column."""


@dataclass
class EncodedTable:
    records: np.ndarray  # rows x columns, int64 bin indices
    rows_read: int
    dropped: Counter = field(default_factory=Counter)  # column -> rows dropped for it
    clamped: Counter = field(default_factory=Counter)  # column -> values clamped

    def summary(self) -> str:
        return _summary(len(self.records), self.rows_read, self.dropped, self.clamped)


@dataclass
class EncodingTally:
    """What a streamed encoding did (:func:`encode_csv_chunks`), without the rows."""

    rows_read: int = 0
    rows_kept: int = 0
    dropped: Counter = field(default_factory=Counter)  # column -> rows dropped for it
    clamped: Counter = field(default_factory=Counter)  # column -> values clamped

    def summary(self) -> str:
        return _summary(self.rows_kept, self.rows_read, self.dropped, self.clamped)


def _summary(kept: int, read: int, dropped: Counter, clamped: Counter) -> str:
    parts = [f"{kept} rows encoded of {read} read"]
    if dropped:
        parts.append("dropped: " + ", ".join(f"{c}={n}" for c, n in dropped.items()))
    if clamped:
        parts.append("clamped: " + ", ".join(f"{c}={n}" for c, n in clamped.items()))
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
    table = EncodedTable(records=np.zeros((0, len(schema.columns)), dtype=np.int64),
                         rows_read=0)
    numbered = zip(rows, lines if lines else range(2, len(rows) + 2))
    chunks = list(_encode_chunks(numbered, header, schema, source, on_invalid, table,
                                 max(1, len(rows))))
    if chunks:
        table.records = chunks[0]
    return table


def _encode_chunks(records: Iterable[tuple[list[str], int]], header: list[str],
                   schema: Schema, source: str, on_invalid: InvalidPolicy,
                   table: EncodedTable | EncodingTally, chunk_rows: int
                   ) -> Iterator[np.ndarray]:
    """The bins of ``records`` ((row, its first line) each), ``chunk_rows`` rows at a time
    (the last chunk shorter; none for no rows kept); ``table`` counts what was read, dropped
    and clamped. The header is checked before the first record is taken."""
    if on_invalid not in ("error", "clamp", "drop"):
        raise ValueError(f"unknown --on-invalid policy {on_invalid!r}")
    header = [normalise_text(h) for h in header]
    positions = _header_positions(header, schema, source)
    width = len(schema.columns)
    fields = len(header)
    cache: list[dict[str, _Reading]] = [{} for _ in schema.columns]
    # The bins of the texts already read as valid: a row of known valid values is encoded
    # by lookups alone; any other row takes the full path (and its errors) below.
    bins: list[dict[str, int]] = [{} for _ in schema.columns]
    lookups = list(zip(positions, bins))
    kept: list[list[int]] = []
    for r, (row, line) in enumerate(records, start=1):
        table.rows_read += 1
        try:
            encoded = [known[row[pos]] for pos, known in lookups] if len(row) == fields \
                else None
        except KeyError:
            encoded = None
        if encoded is None:
            where = f"{source}: row {r} (line {line})"
            if len(row) != fields:
                if on_invalid == "error":
                    raise InvalidValueError(f"{where}: has {len(row)} fields, header has "
                                            f"{fields}")
                table.dropped["<row length>"] += 1
                continue
            encoded, bad_column = _encode_row(row, positions, schema, where, on_invalid, table,
                                              cache, bins)
            if bad_column is not None:
                table.dropped[bad_column] += 1
                continue
        kept.append(encoded)
        if len(kept) == chunk_rows:
            yield _as_records(kept, width, table)
            kept = []
            for seen, known in zip(cache, bins):
                if len(seen) > _CACHE_LIMIT or len(known) > _CACHE_LIMIT:
                    seen.clear()
                    known.clear()
    if kept:
        yield _as_records(kept, width, table)


def _as_records(rows: list[list[int]], width: int,
                table: EncodedTable | EncodingTally) -> np.ndarray:
    if isinstance(table, EncodingTally):
        table.rows_kept += len(rows)
    return np.array(rows, dtype=np.int64).reshape(len(rows), width)


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


def _encode_row(row, positions, schema, where, on_invalid, table, cache, bins):
    encoded = []
    for pos, column, seen, known in zip(positions, schema.columns, cache, bins):
        # Exports repeat values endlessly (ages, codes): read each distinct text once.
        reading = seen.get(row[pos])
        if reading is None:
            reading = seen[row[pos]] = _read_value(column, row[pos])
        if reading.bin is not None:
            known[row[pos]] = reading.bin
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


@contextmanager
def stream_csv(path: str | Path
               ) -> Iterator[tuple[list[str], Iterator[tuple[list[str], int]]]]:
    """(header, an iterator of (data row, its first line number)) of a CSV file, read a
    line at a time: the header is read (and an empty file refused) on entry, each row as it
    is taken.

    UTF-8 with or without a byte-order mark; CRLF, LF or CR line ends; quoted fields may hold
    commas and line breaks; blank lines are skipped (and line numbers stay true). Errors
    name the file and the line.
    """
    path = Path(path)
    try:
        fh = path.open("r", encoding="utf-8-sig", errors="strict", newline="")
    except FileNotFoundError:
        raise InvalidValueError(f"{path}: file not found") from None
    except OSError as exc:
        raise InvalidValueError(f"{path}: cannot read ({exc.strerror})") from None
    with fh:
        records = _records(path, fh)
        header = next(records, None)
        if header is None:
            raise InvalidValueError(f"{path}: empty file (no header)")
        yield header[0], records


def _records(path: Path, fh) -> Iterator[tuple[list[str], int]]:
    """Every non-blank record of an open file with its first line."""
    # strict: a quote left open is an error, not the rest of the file swallowed in one field.
    reader = csv.reader(_bounded_lines(path, fh), strict=True)
    previous_end = 0
    try:
        for record in reader:
            start, previous_end = previous_end + 1, reader.line_num
            if record:  # a blank line is not a record
                yield record, start
    except csv.Error as exc:
        raise InvalidValueError(f"{path}: line {reader.line_num}: malformed CSV ({exc})") from None
    except UnicodeDecodeError:
        raise _not_utf8(path) from None


def _bounded_lines(path: Path, fh) -> Iterator[str]:
    """The file's physical lines (ends kept), none longer than :data:`LINE_LIMIT`."""
    number = 0
    while True:
        line = fh.readline(LINE_LIMIT)
        if not line:
            return
        number += 1
        if len(line) == LINE_LIMIT and not line.endswith("\n"):
            raise InvalidValueError(f"{path}: line {number}: longer than {LINE_LIMIT} "
                                    "characters: not a table (is this file a CSV?)")
        yield line


def _not_utf8(path: Path, block: int = 1 << 20) -> InvalidValueError:
    """The error for a file that is not UTF-8, naming the line and the first bad byte
    (found again from the start, a block at a time: only on this path)."""
    newlines = 0
    with path.open("rb") as raw:
        first = raw.read(len(codecs.BOM_UTF8))
        carry = b"" if first == codecs.BOM_UTF8 else first
        while True:
            read = raw.read(block)
            data = carry + read
            try:
                _, consumed = codecs.utf_8_decode(data, "strict", not read)
            except UnicodeDecodeError as exc:
                line = newlines + data[:exc.start].count(b"\n") + 1
                return InvalidValueError(f"{path}: line {line}: not UTF-8 text (byte "
                                         f"{data[exc.start]:#04x}); save the file as UTF-8")
            if not read:
                return InvalidValueError(f"{path}: not UTF-8 text; save the file as UTF-8")
            newlines += data[:consumed].count(b"\n")
            carry = data[consumed:]


def read_csv(path: str | Path) -> tuple[list[str], list[list[str]], list[int]]:
    """(header, data rows, each row's first line number) of a CSV file, the whole file in
    memory (:func:`stream_csv` reads it a line at a time; its rules and errors)."""
    rows: list[list[str]] = []
    lines: list[int] = []
    with stream_csv(path) as (header, records):
        for row, line in records:
            rows.append(row)
            lines.append(line)
    return header, rows, lines


def find_problems(path: str | Path, schema: Schema, limit: int = 20) -> tuple[list[str], int]:
    """Every problem of a CSV against a schema, one line each naming file, row, line and
    column: (the first ``limit`` lines, the total count). A header problem stops there. The
    file is read a line at a time."""
    with stream_csv(path) as (header, records):
        try:
            positions = _header_positions([normalise_text(h) for h in header], schema,
                                          str(path))
        except InvalidValueError as exc:
            return [str(exc)], 1
        return _problems(path, header, records, positions, schema, limit)


def _problems(path, header, records, positions, schema, limit) -> tuple[list[str], int]:
    found: list[str] = []
    total = 0
    cache: list[dict[str, _Reading]] = [{} for _ in schema.columns]
    for r, (row, line) in enumerate(records, start=1):
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
        if r % CHUNK_ROWS == 0:
            for seen in cache:
                if len(seen) > _CACHE_LIMIT:
                    seen.clear()
    return found, total


def encode_csv(path: str | Path, schema: Schema, *,
               on_invalid: InvalidPolicy = "error") -> EncodedTable:
    """Encode a CSV file with ``schema``: every row's bins, or an error naming file, row,
    line and column. A header-only file encodes to zero rows."""
    header, rows, lines = read_csv(path)
    return encode_rows(rows, header, schema, source=str(path), on_invalid=on_invalid,
                       lines=lines)


def encode_csv_chunks(path: str | Path, schema: Schema, *, on_invalid: InvalidPolicy = "error",
                      tally: EncodingTally | None = None,
                      chunk_rows: int = CHUNK_ROWS) -> Iterator[np.ndarray]:
    """:func:`encode_csv`'s bins, rules and errors, streamed: the file is read a line at a
    time (the header checked first) and the bins handed on ``chunk_rows`` rows at a time, so
    memory does not grow with the file; ``tally`` counts what was read, kept, dropped and
    clamped. Concatenated, the chunks are :func:`encode_csv`'s records."""
    tally = tally if tally is not None else EncodingTally()
    with stream_csv(path) as (header, records):
        yield from _encode_chunks(records, header, schema, str(path), on_invalid, tally,
                                  chunk_rows)


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
