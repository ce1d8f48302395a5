"""CSV -> encoded records (bin indices), with every bad value named by file, row and column.

Design concern: **a data owner's mistake is reported, never silently absorbed.** By default
any invalid value stops the run with an error naming the file, the 1-based data row (data
row r is line r + 1 of the file, after the header) and the column. Two documented
policies relax this:

* ``clamp``: out-of-bounds numbers are clamped to the schema's public bounds; rows with a
  missing value, an unknown category or a non-numeric continuous value are still dropped
  (there is nothing public to clamp them to).
* ``drop``: every row with any invalid value is dropped.

Both policies report what they did (counts per column) so nothing happens unseen.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Literal

import numpy as np

from params.schema import CategoricalColumn, ContinuousColumn, Schema

InvalidPolicy = Literal["error", "clamp", "drop"]

__all__ = ["InvalidValueError", "EncodedTable", "encode_csv", "encode_rows", "decode_records"]


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


def _parse_number(text: str) -> Fraction | None:
    # Exact: "0.3" becomes 3/10, so bin edges are compared without float rounding.
    # Fraction() refuses "nan" and "inf", which have no place in a bounded column.
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def encode_rows(rows: list[list[str]], header: list[str], schema: Schema, *,
                source: str = "<rows>", on_invalid: InvalidPolicy = "error") -> EncodedTable:
    """Encode already-split rows; ``source`` names the file in error messages."""
    if on_invalid not in ("error", "clamp", "drop"):
        raise ValueError(f"unknown --on-invalid policy {on_invalid!r}")
    header = [h.strip() for h in header]
    expected = list(schema.names)
    missing = [c for c in expected if c not in header]
    extra = [c for c in header if c not in expected]
    if missing or extra or len(header) != len(set(header)):
        detail = []
        if missing:
            detail.append(f"missing columns {missing}")
        if extra:
            detail.append(f"unexpected columns {extra}")
        if len(header) != len(set(header)):
            detail.append("duplicate column names")
        raise InvalidValueError(f"{source}: header does not match the schema: "
                                + "; ".join(detail))
    positions = [header.index(c) for c in expected]
    out = np.zeros((len(rows), len(expected)), dtype=np.int64)
    kept = 0
    table = EncodedTable(records=out, rows_read=len(rows))
    for r, row in enumerate(rows, start=1):
        where = f"{source}: row {r} (line {r + 1})"
        if len(row) != len(header):
            if on_invalid == "error":
                raise InvalidValueError(f"{where}: has {len(row)} fields, header has {len(header)}")
            table.dropped["<row length>"] += 1
            continue
        encoded, bad_column = _encode_row(row, positions, schema, where, on_invalid, table)
        if bad_column is not None:
            table.dropped[bad_column] += 1
            continue
        out[kept] = encoded
        kept += 1
    table.records = out[:kept]
    return table


def _encode_row(row, positions, schema, where, on_invalid, table):
    encoded = []
    for pos, column in zip(positions, schema.columns):
        raw = row[pos].strip()
        if isinstance(column, CategoricalColumn):
            if raw == "":
                problem = "missing value"
            elif column.has(raw):
                encoded.append(column.bin_of(raw))
                continue
            else:
                problem = f"unknown category {raw!r} (known: {_preview(column.categories)})"
        else:
            assert isinstance(column, ContinuousColumn)
            value = _parse_number(raw) if raw else None
            if raw == "":
                problem = "missing value"
            elif value is None:
                problem = f"non-numeric value {raw!r} in a continuous column"
            elif column.in_bounds(value):
                encoded.append(column.bin_of(value))
                continue
            elif on_invalid == "clamp":
                table.clamped[column.name] += 1
                encoded.append(column.bin_of(column.clamp(value)))
                continue
            else:
                problem = f"value {raw} outside public bounds [{column.min}, {column.max}]"
        if on_invalid == "error":
            raise InvalidValueError(f"{where}, column '{column.name}': {problem}")
        return None, column.name
    return encoded, None


def _preview(items, limit: int = 6) -> str:
    shown = ", ".join(map(repr, items[:limit]))
    return shown + (", ..." if len(items) > limit else "")


def encode_csv(path: str | Path, schema: Schema, *,
               on_invalid: InvalidPolicy = "error") -> EncodedTable:
    path = Path(path)
    try:
        with path.open(newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise InvalidValueError(f"{path}: empty file (no header)")
            rows = list(reader)
    except FileNotFoundError:
        raise InvalidValueError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        raise InvalidValueError(f"{path}: not a UTF-8 text file ({exc.reason})") from None
    except csv.Error as exc:
        raise InvalidValueError(f"{path}: malformed CSV ({exc})") from None
    rows = [r for r in rows if r]  # a trailing blank line is not a record
    return encode_rows(rows, header, schema, source=str(path), on_invalid=on_invalid)


def decode_records(records: np.ndarray, schema: Schema,
                   rng: np.random.Generator) -> list[list[str]]:
    """Map bin indices back to values of the original columns.

    Categorical bins give their category. A continuous bin gives a value drawn uniformly
    inside the bin (rounded for integer columns, kept inside the bin): synthesis is
    post-processing, so this randomness carries no privacy claim.
    """
    columns_out = []
    for j, column in enumerate(schema.columns):
        idx = records[:, j]
        if isinstance(column, CategoricalColumn):
            cats = np.array(column.categories, dtype=object)
            columns_out.append(cats[idx])
            continue
        edges = np.array(column.edges(), dtype=float)
        lo, hi = edges[idx], edges[idx + 1]
        values = lo + rng.random(len(idx)) * (hi - lo)
        if column.integer:
            first = np.ceil(lo - 1e-9)
            last = np.where(idx == column.bins - 1, np.floor(hi), np.ceil(hi) - 1)
            last = np.maximum(last, first)
            values = np.clip(np.round(values), first, last).astype(np.int64)
            columns_out.append(values.astype(str))
        else:
            columns_out.append(np.array([f"{v:.6g}" for v in values], dtype=object))
    return [list(row) for row in zip(*columns_out)]
