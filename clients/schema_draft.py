"""A first schema for a data owner's table (``feddpsyn schema draft``), to be finished by hand.

Guarantee: **nothing the draft reads from the private table is presented as public**. The
draft takes column names, a type guess and category lists from the file, because a person
must start somewhere, and says loudly (in the file and on the terminal) that these are read
from private data and are not DP: categories must be checked against public knowledge (a
code list, a form's options) before the schema is shared. Continuous bounds are never read
from the data: they are left empty for the user to declare, or taken from ``--bounds``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from params.exact_numbers import decimal_text, json_number, parse_decimal
from params.schema import DEFAULT_BINS, SchemaError, normalise_text
from params.table_codec import MISSING_MARKERS, read_csv

__all__ = ["PRIVACY_NOTE", "DraftColumn", "draft_schema", "parse_bounds"]

PRIVACY_NOTE = ("DRAFT read from private data. The column types and category lists in this "
                "schema were read from the table itself and are NOT differentially private: "
                "before this schema is shared with anyone, replace them with what public "
                "knowledge gives (code lists, form options, published ranges). Continuous "
                "bounds must be declared from public knowledge too; the draft never reads "
                "them from the data.")

# A numeric column with more distinct values than this is guessed continuous.
DEFAULT_MAX_CATEGORIES = 20


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
    header, rows, _ = read_csv(csv_path)
    header = [normalise_text(h) for h in header]
    repeated = sorted({h for h in header if header.count(h) > 1})
    if repeated:
        raise SchemaError(f"{csv_path}: header (line 1): duplicate column names {repeated}")
    unknown = sorted((set(bounds) | set(categorical) | set(continuous)) - set(header))
    if unknown:
        raise SchemaError(f"{csv_path}: no column {unknown[0]!r} (columns: "
                          f"{', '.join(header)})")
    both = sorted(set(categorical) & (set(continuous) | set(bounds)))
    if both:
        raise SchemaError(f"column {both[0]!r} cannot be both categorical and continuous")
    columns = []
    for j, name in enumerate(header):
        values = [normalise_text(row[j]) for row in rows if j < len(row)]
        columns.append(_draft_column(name, values, bounds.get(name), name in categorical,
                                     name in continuous, max_categories, bins))
    draft = {"name": Path(csv_path).stem, "note": PRIVACY_NOTE,
             "columns": [c.entry for c in columns]}
    return draft, columns


def _draft_column(name: str, values: list[str], declared: tuple[Fraction, Fraction] | None,
                  force_categorical: bool, force_continuous: bool, max_categories: int,
                  bins: int) -> DraftColumn:
    present = [v for v in values if v.lower() not in MISSING_MARKERS]
    missing = Counter(v for v in values if v.lower() in MISSING_MARKERS)
    notes = []
    if missing:
        shown = ", ".join(f"{v!r} x{n}" for v, n in missing.most_common(3))
        notes.append(f"missing values: {sum(missing.values())} ({shown}); the encoder refuses "
                     "them unless --on-invalid drop, or declare a category for them")
    numbers = [parse_decimal(v) for v in present]
    numeric = bool(present) and all(n is not None for n in numbers)
    distinct = sorted(set(present))
    as_continuous = (declared is not None or force_continuous
                     or (numeric and not force_categorical and len(distinct) > max_categories))
    if as_continuous:
        if not numeric and present:
            bad = next(v for v, n in zip(present, numbers) if n is None)
            notes.append(f"declared continuous but holds non-numeric text such as {bad!r}")
        integer = numeric and all(n.denominator == 1 for n in numbers)
        entry: dict[str, Any] = {"name": name, "type": "continuous"}
        if declared is not None:
            entry.update(min=json_number(declared[0]), max=json_number(declared[1]))
            outside = sum(1 for n in numbers if n is not None
                          and not declared[0] <= n <= declared[1])
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
    elif not numeric and len(categories) > max_categories:
        notes.append(f"{len(categories)} distinct values: an identifier or free text? drop "
                     "the column or group its values before sharing")
    entry = {"name": name, "type": "categorical", "i2s": categories or ["?"]}
    return DraftColumn(name, entry, tuple(notes))
