"""Table schemas: which columns a table has, and how each is turned into a finite domain.

A schema is public knowledge shared by every data owner and both servers. Its design
concerns:

* **Bin edges come only from the schema's public bounds, never from data**, so that the
  domain (and hence the layout of every encrypted vector) leaks nothing about any client.
* **One exact rule for inclusion and binning**, used by clients (encoding), servers (they
  receive this schema), synthesis and decoding: bounds are the rationals the user wrote
  (``params.exact_numbers``), a value v is inside when ``min <= v <= max``, and its bin is
  ``floor((v - min) * bins / (max - min))``, the upper bound falling in the last bin. Decoding
  draws values on a decimal grid and keeps only those this same rule puts in the bin.

Two file formats are read:

* SynMeter's (``../shared/data/adult/adult.schema.json``): ``columns`` with ``type``
  ``continuous`` (``min``/``max``) or ``categorical`` (``i2s``).
* Ours, a superset: a continuous column may also give ``bins`` (default 10, as in the
  FedDPSyn case study) and ``integer`` (default: true when both bounds are JSON integers); a
  categorical column may give ``labels`` (descriptive names, not used for encoding); the
  schema may name its prediction ``target`` (used by the benchmark's ML metrics).

Categories and column names are compared as Unicode NFC text without surrounding spaces,
so "café" typed two ways and " Male" are the same category.

>>> s = Schema.from_dict({"columns": [
...     {"name": "x", "type": "continuous", "min": 15.96, "max": 53.13, "bins": 4},
...     {"name": "sex", "type": "categorical", "i2s": ["F", "M"]}]})
>>> s.domain_sizes
(4, 2)
>>> x = s.columns[0]
>>> x.in_bounds("15.96"), x.bin_of("15.96"), x.bin_of("53.13"), s.columns[1].bin_of("M")
(True, 0, 3, 1)
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from feddpsyn.params.exact_numbers import (
    decimal_places,
    decimal_text,
    exact_number,
    json_number,
    parse_decimal,
)

DEFAULT_BINS = 10
MAX_BINS = 4096
# Decoded continuous values are written on a grid at least this many times finer than a bin.
_DECODE_STEPS_PER_BIN = 100
_MAX_DECODE_PLACES = 12


class SchemaError(ValueError):
    """The schema itself is malformed; ``problems`` lists every problem found, one line each."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


def normalise_text(text: str) -> str:
    """Category and column-name text as compared: NFC, surrounding spaces removed."""
    text = text.strip()
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def _as_value(value: float | Fraction | str | int) -> Fraction:
    if isinstance(value, str):
        parsed = parse_decimal(value)
        if parsed is None:
            raise ValueError(f"{value!r} is not a decimal number")
        return parsed
    return exact_number(value)


@dataclass(frozen=True)
class ContinuousColumn:
    """A numeric column with public bounds, cut into ``bins`` equal-width bins.

    ``min`` and ``max`` are exact rationals (any int, float, Decimal or decimal text given is
    converted as written).
    """

    name: str
    min: Fraction
    max: Fraction
    bins: int = DEFAULT_BINS
    integer: bool = True
    kind: Literal["continuous"] = "continuous"

    def __post_init__(self) -> None:
        object.__setattr__(self, "min", exact_number(self.min))
        object.__setattr__(self, "max", exact_number(self.max))
        if not self.min < self.max:
            raise SchemaError(f"column '{self.name}': 'min' ({self.text(self.min)}) must be "
                              f"below 'max' ({self.text(self.max)})")
        if self.integer and math.ceil(self.min) > math.floor(self.max):
            raise SchemaError(f"column '{self.name}': integer column with no integer between "
                              f"its bounds {self.bounds_text()}")

    @property
    def size(self) -> int:
        return self.bins

    @staticmethod
    def text(value: Fraction) -> str:
        return decimal_text(value)

    def bounds_text(self) -> str:
        return f"[{self.text(self.min)}, {self.text(self.max)}]"

    def edges(self) -> list[Fraction]:
        """The ``bins + 1`` public bin edges, exact."""
        width = (self.max - self.min) / self.bins
        return [self.min + i * width for i in range(self.bins)] + [self.max]

    def in_bounds(self, value: float | Fraction | str) -> bool:
        """Exact: ``min <= value <= max``, with the value read as written."""
        return self.min <= _as_value(value) <= self.max

    def bin_of(self, value: float | Fraction | str) -> int:
        """Bin index of an in-bounds value; the upper bound falls in the last bin.

        Computed with exact rationals, and text is read exactly ("0.3" is 3/10, not the
        nearest double), so a value on an edge lands in the same bin on every machine.
        """
        exact = _as_value(value)
        if not self.min <= exact <= self.max:
            raise ValueError(f"column '{self.name}': {decimal_text(exact)} outside "
                             f"{self.bounds_text()}")
        position = (exact - self.min) * self.bins / (self.max - self.min)
        return min(math.floor(position), self.bins - 1)

    def clamp(self, value: float | Fraction | str) -> Fraction:
        return min(max(_as_value(value), self.min), self.max)

    @property
    def decode_places(self) -> int:
        """Decimal places of decoded values: none for integer columns; otherwise enough to
        write both bounds exactly and to put at least 100 grid points in every bin."""
        if self.integer:
            return 0
        span = self.max - self.min  # logs of its integer parts: no float overflow
        resolution = math.ceil(math.log10(_DECODE_STEPS_PER_BIN * self.bins)
                               - math.log10(span.numerator) + math.log10(span.denominator))
        places = [resolution] + [p if p is not None else _MAX_DECODE_PLACES
                                 for p in (decimal_places(self.min), decimal_places(self.max))]
        return min(max(0, *places), _MAX_DECODE_PLACES)

    def decode_range(self, bin_index: int) -> tuple[int, int]:
        """The integers k whose value k / 10^decode_places lies in ``bin_index`` by the
        binning rule, as (first, last). An integer column's bin narrower than 1 may hold no
        integer: then the integer in bounds nearest to the bin's middle (one value, which the
        rule puts in a neighbouring bin)."""
        scale = 10 ** self.decode_places
        edges = self.edges()
        lo, hi = edges[bin_index] * scale, edges[bin_index + 1] * scale
        first = math.ceil(lo)
        last = math.floor(hi) if bin_index == self.bins - 1 else math.ceil(hi) - 1
        if first <= last:
            return first, last
        middle = round((lo + hi) / 2)
        nearest = min(max(middle, math.ceil(self.min * scale)), math.floor(self.max * scale))
        return nearest, nearest

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": "continuous", "min": json_number(self.min),
                "max": json_number(self.max), "bins": self.bins, "integer": self.integer}


@dataclass(frozen=True)
class CategoricalColumn:
    """A column whose values are one of a public, ordered list of categories."""

    name: str
    categories: tuple[str, ...]
    labels: tuple[str, ...] | None = None
    kind: Literal["categorical"] = "categorical"
    _index: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "categories",
                           tuple(normalise_text(c) for c in self.categories))
        self._index.update({c: i for i, c in enumerate(self.categories)})
        if len(self._index) != len(self.categories):
            raise SchemaError(f"column '{self.name}': duplicate categories in 'i2s' (compared "
                              "without surrounding spaces, Unicode NFC)")

    @property
    def size(self) -> int:
        return len(self.categories)

    def has(self, value: str) -> bool:
        return normalise_text(value) in self._index

    def bin_of(self, value: str) -> int:
        return self._index[normalise_text(value)]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": "categorical",
                               "i2s": list(self.categories)}
        if self.labels is not None:
            out["labels"] = list(self.labels)
        return out


Column = ContinuousColumn | CategoricalColumn


@dataclass(frozen=True)
class Schema:
    """An ordered list of columns; the order fixes the layout of every count vector."""

    columns: tuple[Column, ...]
    name: str = "table"
    target: str | None = None

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise SchemaError(f"duplicate column names in schema: {twice}")
        if len(self.columns) < 2:
            raise SchemaError("a schema needs at least two columns (2-way marginals)")
        if self.target is not None and self.target not in names:
            raise SchemaError(f"'target' {self.target!r} is not one of the columns")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def domain_sizes(self) -> tuple[int, ...]:
        return tuple(c.size for c in self.columns)

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "columns": [c.to_dict() for c in self.columns]}
        if self.target is not None:
            out["target"] = self.target
        return out

    def fingerprint(self) -> str:
        """SHA-256 of the canonical JSON: clients and servers check they agree."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @classmethod
    def from_dict(cls, raw: Any, *, default_bins: int = DEFAULT_BINS) -> Schema:
        """Build a schema; SchemaError lists every problem found (never another exception,
        whatever ``raw`` holds: servers call this on request bodies)."""
        problems: list[str] = []
        if not isinstance(raw, dict) or not isinstance(raw.get("columns"), list):
            raise SchemaError("schema must be a JSON object with a 'columns' list")
        columns = [_column_from_dict(entry, i, default_bins, problems)
                   for i, entry in enumerate(raw["columns"])]
        names = [c.name for c in columns if c is not None]
        for name in sorted({n for n in names if names.count(n) > 1}):
            problems.append(f"duplicate column name '{name}' (declared {names.count(name)} times)")
        if len(raw["columns"]) < 2:
            problems.append("a schema needs at least two columns (2-way marginals)")
        target = raw.get("target")
        if target is not None and (not isinstance(target, str)
                                   or normalise_text(target) not in names):
            problems.append(f"'target' {target!r} is not one of the columns")
        if problems:
            raise SchemaError(problems)
        return cls(columns=tuple(c for c in columns if c is not None),
                   name=str(raw.get("name", "table")),
                   target=normalise_text(target) if target is not None else None)

    @classmethod
    def load(cls, path: str | Path, *, default_bins: int = DEFAULT_BINS) -> Schema:
        path = Path(path)
        raw = read_schema_json(path)
        try:
            return cls.from_dict(raw, default_bins=default_bins)
        except SchemaError as exc:
            raise SchemaError([f"{path}: {p}" for p in exc.problems]) from None


def read_schema_json(path: Path) -> Any:
    """A schema file's JSON with every number exact (decimals as ``Decimal``); a byte-order
    mark is allowed; NaN, Infinity and keys repeated within one object are refused."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise SchemaError(f"{path}: schema file not found") from None
    except UnicodeDecodeError as exc:
        raise SchemaError(f"{path}: not UTF-8 text (byte {exc.start})") from None

    def refuse_constant(name: str) -> None:
        raise SchemaError(f"{path}: {name} is not a number a schema can use")

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise SchemaError(f"{path}: key {repeated[0]!r} appears twice in one object")
        return dict(pairs)

    try:
        return json.loads(text, parse_float=Decimal, parse_constant=refuse_constant,
                          object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: "
                          f"{exc.msg})") from None


def _column_from_dict(entry: Any, position: int, default_bins: int,
                      problems: list[str]) -> Column | None:
    if not isinstance(entry, dict) or "name" not in entry or "type" not in entry:
        problems.append(f"column #{position + 1}: needs 'name' and 'type'")
        return None
    if not isinstance(entry["name"], str) or not normalise_text(entry["name"]):
        problems.append(f"column #{position + 1}: 'name' must be a non-empty string")
        return None
    name = normalise_text(entry["name"])
    kind = entry["type"]
    before = len(problems)
    if kind == "continuous":
        bounds = []
        for key in ("min", "max"):
            if entry.get(key) is None:
                problems.append(f"column '{name}': continuous needs public '{key}' (declare it "
                                "from public knowledge, not from the data)")
                continue
            try:
                bounds.append(exact_number(entry[key]))
            except ValueError:
                problems.append(f"column '{name}': '{key}' must be a finite number, not "
                                f"{entry[key]!r}")
        bins = entry.get("bins", default_bins)
        if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= MAX_BINS:
            problems.append(f"column '{name}': 'bins' must be an integer in [1, {MAX_BINS}], "
                            f"not {bins!r}")
        integer = entry.get("integer", all(type(entry.get(k)) is int for k in ("min", "max")))
        if not isinstance(integer, bool):
            problems.append(f"column '{name}': 'integer' must be true or false")
        if len(problems) > before:
            return None
        try:
            return ContinuousColumn(name=name, min=bounds[0], max=bounds[1], bins=bins,
                                    integer=integer)
        except SchemaError as exc:
            problems.extend(exc.problems)
            return None
    if kind == "categorical":
        cats = entry.get("i2s")
        if not isinstance(cats, list) or not cats:
            problems.append(f"column '{name}': categorical needs a non-empty 'i2s' list")
            return None
        texts = []
        for i, c in enumerate(cats):
            if isinstance(c, bool):
                texts.append("true" if c else "false")  # as the JSON file writes it
            elif isinstance(c, (str, int, Decimal, float)):
                texts.append(str(c))
            else:
                problems.append(f"column '{name}': category #{i + 1} must be text or a "
                                f"number, not {c!r}")
        if "size" in entry and entry["size"] != len(cats):
            problems.append(f"column '{name}': 'size' {entry['size']!r} != len(i2s) "
                            f"{len(cats)}")
        labels = entry.get("labels")
        if labels is not None and (not isinstance(labels, list) or len(labels) != len(cats)):
            problems.append(f"column '{name}': 'labels' must be a list with one entry per "
                            "category")
        if len(problems) > before:
            return None
        try:
            return CategoricalColumn(name=name, categories=tuple(texts),
                                     labels=tuple(map(str, labels)) if labels else None)
        except SchemaError as exc:
            problems.extend(exc.problems)
            return None
    problems.append(f"column '{name}': unknown type {kind!r} (continuous or categorical)")
    return None


def schema_warnings(schema: Schema) -> list[str]:
    """What is allowed but probably not what the user meant, one line each."""
    warnings = []
    for column in schema.columns:
        if isinstance(column, ContinuousColumn):
            empty = [b for b in range(column.bins)
                     if column.integer and _bin_without_integer(column, b)]
            if empty:
                warnings.append(f"column '{column.name}': integer column whose bins "
                                f"{', '.join(str(b) for b in empty[:8])}"
                                f"{', ...' if len(empty) > 8 else ''} hold no integer (bin "
                                f"width {float((column.max - column.min) / column.bins):.4g}): "
                                "use fewer bins or set \"integer\": false")
        else:
            if column.size == 1:
                warnings.append(f"column '{column.name}': one category only, the column "
                                "carries no information")
            folded: dict[str, list[str]] = {}
            for c in column.categories:
                folded.setdefault(c.casefold(), []).append(c)
            for same in folded.values():
                if len(same) > 1:
                    warnings.append(f"column '{column.name}': categories {same} differ only "
                                    "in case: they are distinct categories")
    return warnings


def _bin_without_integer(column: ContinuousColumn, bin_index: int) -> bool:
    edges = column.edges()
    first = math.ceil(edges[bin_index])
    last = (math.floor(edges[-1]) if bin_index == column.bins - 1
            else math.ceil(edges[bin_index + 1]) - 1)
    return first > last
