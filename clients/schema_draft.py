"""A first schema for a data owner's table (``feddpsyn schema draft``), to be finished by hand.

Guarantee: **nothing the draft reads from the private table is presented as public**. The
draft takes column names, a type guess and category lists from the file, because a person
must start somewhere, and says loudly (in the file and on the terminal) that these are read
from private data and are not DP: categories must be checked against public knowledge (a
code list, a form's options) before the schema is shared. Continuous bounds are never read
from the data: they are left empty for the user to declare, or taken from ``--bounds``.

The table is read a line at a time (``params.table_codec.stream_csv``); each column keeps its
distinct values with their counts, at most :data:`MAX_DISTINCT` of them: past that, a column
is read for its type only (numbers, integers, values outside declared bounds, missing
values), since it lists no categories anyone should share.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from feddpsyn.params.exact_numbers import decimal_text, json_number, parse_decimal
from feddpsyn.params.schema import DEFAULT_BINS, SchemaError, normalise_text
from feddpsyn.params.table_codec import MISSING_MARKERS, stream_csv

__all__ = ["PRIVACY_NOTE", "FROM_DATA", "DraftColumn", "draft_schema", "draft_warnings",
           "parse_bounds"]

PRIVACY_NOTE = ("DRAFT read from private data. The column types and category lists in this "
                "schema were read from the table itself and are NOT differentially private: "
                "before this schema is shared with anyone, replace them with what public "
                "knowledge gives (code lists, form options, published ranges). Continuous "
                "bounds must be declared from public knowledge too; the draft never reads "
                "them from the data.")

# The key a draft puts on each column whose categories it read from the data; the user
# deletes it once the column is declared from public knowledge (``schema check`` warns
# until then).
FROM_DATA = "from_data"

# A numeric column with more distinct values than this is guessed continuous.
DEFAULT_MAX_CATEGORIES = 20
# Distinct values kept per column (memory does not grow with the table beyond them).
MAX_DISTINCT = 100_000


@dataclass(frozen=True)
class DraftColumn:
    name: str
    entry: dict[str, Any]  # the schema entry as written to the draft
    notes: tuple[str, ...]  # what the user must look at, one line each


def parse_bounds(specs: list[str]) -> dict[str, tuple[Fraction, Fraction]]:
    """``col=lo:hi`` (decimal text, scientific notation allowed, negatives too) per column."""
    bounds = {}
    for spec in specs:
        name, sep, span = spec.partition("=")
        lo_text, sep2, hi_text = span.partition(":")
        lo, hi = parse_decimal(lo_text), parse_decimal(hi_text)
        if not sep or not sep2 or not name.strip() or lo is None or hi is None:
            raise SchemaError(f"--bounds {spec!r}: write COLUMN=MIN:MAX, e.g. age=0:120")
        if not lo < hi:
            raise SchemaError(f"--bounds {spec!r}: MIN must be below MAX")
        bounds[normalise_text(name)] = (lo, hi)
    return bounds


def _numeric_order(values: list[str]) -> list[str]:
    return sorted(values, key=lambda v: (parse_decimal(v), v))


def draft_schema(csv_path: Path, bounds: dict[str, tuple[Fraction, Fraction]] | None = None,
                 *, categorical: set[str] = frozenset(), continuous: set[str] = frozenset(),
                 max_categories: int = DEFAULT_MAX_CATEGORIES,
                 bins: int = DEFAULT_BINS) -> tuple[dict[str, Any], list[DraftColumn]]:
    """(the draft schema as JSON-ready dict, each column with its notes)."""
    bounds = dict(bounds or {})
    with stream_csv(csv_path) as (header, records):
        header = [normalise_text(h) for h in header]
        repeated = sorted({h for h in header if header.count(h) > 1})
        if repeated:
            raise SchemaError(f"{csv_path}: header (line 1): duplicate column names "
                              f"{repeated}")
        unknown = sorted((set(bounds) | set(categorical) | set(continuous)) - set(header))
        if unknown:
            raise SchemaError(f"{csv_path}: no column {unknown[0]!r} (columns: "
                              f"{', '.join(header)})")
        both = sorted(set(categorical) & (set(continuous) | set(bounds)))
        if both:
            raise SchemaError(f"column {both[0]!r} cannot be both categorical and continuous")
        seen = [_ColumnValues(bounds.get(name)) for name in header]
        for row, _ in records:
            for value, column in zip(row, seen):
                column.add(value)
    columns = [_draft_column(name, values, bounds.get(name), name in categorical,
                             name in continuous, max_categories, bins)
               for name, values in zip(header, seen)]
    draft = {"name": Path(csv_path).stem, "note": PRIVACY_NOTE,
             "columns": [c.entry for c in columns]}
    return draft, columns


class _ColumnValues:
    """One column's values as read: each distinct text (normalised) with its count, in the
    order first seen, up to :data:`MAX_DISTINCT` of them; the values past those are read for
    the column's type only (:meth:`add`)."""

    def __init__(self, declared: tuple[Fraction, Fraction] | None):
        self.declared = declared
        self.counts: Counter[str] = Counter()
        self._normal: dict[str, str] = {}  # raw text -> normalised, for the distinct kept
        self.more = False  # more distinct values than kept
        # The values past the kept ones: missing ones, and what their type needs.
        self._missing: Counter[str] = Counter()
        self._present = 0
        self._numeric = self._integer = True
        self._first_text: str | None = None
        self._outside = 0

    def add(self, raw: str) -> None:
        value = self._normal.get(raw)
        if value is None:
            value = normalise_text(raw)
            if len(self._normal) < MAX_DISTINCT:
                self._normal[raw] = value
        if value in self.counts or len(self.counts) < MAX_DISTINCT:
            self.counts[value] += 1
            return
        self.more = True
        if value.lower() in MISSING_MARKERS:
            self._missing[value] += 1
            return
        self._present += 1
        number = parse_decimal(value)
        if number is None:
            self._numeric = False
            self._first_text = self._first_text or value
            return
        self._integer = self._integer and number.denominator == 1
        if self.declared is not None and not self.declared[0] <= number <= self.declared[1]:
            self._outside += 1

    def summary(self) -> tuple[Counter[str], list[str], bool, bool, str | None, int, bool]:
        """(missing values by text, distinct present values, any present, all numeric, all
        integers, the first non-numeric value in the file's order, how many are outside the
        declared bounds)."""
        missing: Counter[str] = Counter()
        distinct, numeric, integer, first_text, outside = [], self._numeric, self._integer, None, 0
        for value, count in self.counts.items():  # in the order first seen
            if value.lower() in MISSING_MARKERS:
                missing[value] += count
                continue
            distinct.append(value)
            number = parse_decimal(value)
            if number is None:
                numeric = False
                first_text = first_text or value
                continue
            integer = integer and number.denominator == 1
            if self.declared is not None and not self.declared[0] <= number <= self.declared[1]:
                outside += count
        missing.update(self._missing)  # seen after every kept value: after them in the order
        present = bool(distinct) or self._present > 0
        return (missing, distinct, present, numeric, integer, first_text or self._first_text,
                outside + self._outside)


def _draft_column(name: str, values: _ColumnValues,
                  declared: tuple[Fraction, Fraction] | None, force_categorical: bool,
                  force_continuous: bool, max_categories: int, bins: int) -> DraftColumn:
    notes = []
    missing, present_values, present, numeric, integer, first_text, outside = values.summary()
    numeric = present and numeric
    if missing:
        shown = ", ".join(f"{v!r} x{n}" for v, n in missing.most_common(3))
        notes.append(f"missing values: {sum(missing.values())} ({shown}); the encoder refuses "
                     "them unless --on-invalid drop, or declare a category for them")
    distinct = sorted(present_values)
    many = values.more or len(distinct) > max_categories
    as_continuous = (declared is not None or force_continuous
                     or (numeric and not force_categorical and many))
    if as_continuous:
        if not numeric and present:
            notes.append(f"declared continuous but holds non-numeric text such as "
                         f"{first_text!r}")
        integer = numeric and integer
        entry: dict[str, Any] = {"name": name, "type": "continuous"}
        if declared is not None:
            entry.update(min=json_number(declared[0]), max=json_number(declared[1]))
            if outside:
                notes.append(f"{outside} values outside the declared bounds "
                             f"[{decimal_text(declared[0])}, {decimal_text(declared[1])}]: "
                             "the encoder refuses them unless --on-invalid clamp|drop")
            integer = integer and all(b.denominator == 1 for b in declared)
        else:
            entry.update(min=None, max=None)
            notes.append("bounds NOT SET: declare 'min' and 'max' from public knowledge "
                         "(or --bounds COL=MIN:MAX); never from this data")
        entry.update(bins=bins, integer=integer)
        return DraftColumn(name, entry, tuple(notes))
    categories = _numeric_order(distinct) if numeric else distinct
    if not categories:
        notes.append("no values at all: declare its categories from public knowledge")
    elif values.more:
        notes.append(f"more than {MAX_DISTINCT} distinct values (the first {MAX_DISTINCT} "
                     "listed): an identifier or free text? drop the column or group its "
                     "values before sharing")
    elif not numeric and len(categories) > max_categories:
        notes.append(f"{len(categories)} distinct values: an identifier or free text? drop "
                     "the column or group its values before sharing")
    entry = {"name": name, "type": "categorical", "i2s": categories or ["?"]}
    if categories:
        entry[FROM_DATA] = (
            "numeric values listed as categories from the table itself (not DP): declare "
            "them from public knowledge, or make the column continuous with public bounds; "
            "then delete this key" if numeric else
            "categories read from the table itself (not DP): replace them with public "
            "knowledge (a code list, a form's options), then delete this key")
    return DraftColumn(name, entry, tuple(notes))


def draft_warnings(raw: dict[str, Any]) -> list[str]:
    """What in a schema file still comes from a draft (``schema check``'s warnings): the
    draft's privacy note, and each column whose categories were read from the data."""
    warnings = []
    if raw.get("note") == PRIVACY_NOTE:
        warnings.append("this schema still carries the draft's note: its categories were read "
                        "from private data (not DP); finish it from public knowledge and "
                        "delete the note before sharing it")
    for column in raw.get("columns", []):
        if isinstance(column, dict) and FROM_DATA in column:
            kind = ("numeric values guessed categorical from the data"
                    if "numeric" in str(column[FROM_DATA]) else "categories from the data")
            warnings.append(f"column '{column.get('name')}': {kind} (not DP): declare them "
                            f"from public knowledge, then delete its '{FROM_DATA}' key")
    return warnings
