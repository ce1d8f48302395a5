"""Table schemas: which columns a table has, and how each is turned into a finite domain.

A schema is public knowledge shared by every data owner and both servers. Its one design
concern: **bin edges come only from the schema's public bounds, never from data**, so that
the domain (and hence the layout of every encrypted vector) leaks nothing about any client.

Two file formats are read:

* SynMeter's (``../shared/data/adult/adult.schema.json``): ``columns`` with ``type``
  ``continuous`` (``min``/``max``) or ``categorical`` (``i2s``).
* Ours, a superset: a continuous column may also give ``bins`` (default 10, as in the
  FedDPSyn case study) and ``integer`` (default: true when both bounds are integers); a
  categorical column may give ``labels`` (descriptive names, not used for encoding).

>>> s = Schema.from_dict({"columns": [
...     {"name": "age", "type": "continuous", "min": 0, "max": 100, "bins": 4},
...     {"name": "sex", "type": "categorical", "i2s": ["F", "M"]}]})
>>> s.domain_sizes
(4, 2)
>>> s.columns[0].bin_of(99.5), s.columns[1].bin_of("M")
(3, 1)
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

DEFAULT_BINS = 10


class SchemaError(ValueError):
    """The schema file itself is malformed."""


@dataclass(frozen=True)
class ContinuousColumn:
    """A numeric column with public bounds, cut into ``bins`` equal-width bins."""

    name: str
    min: float
    max: float
    bins: int = DEFAULT_BINS
    integer: bool = True
    kind: Literal["continuous"] = "continuous"

    @property
    def size(self) -> int:
        return self.bins

    def edges(self) -> list[float]:
        """The ``bins + 1`` public bin edges."""
        width = (self.max - self.min) / self.bins
        return [self.min + i * width for i in range(self.bins)] + [self.max]

    def in_bounds(self, value: float | Fraction) -> bool:
        return self.min <= value <= self.max

    def bin_of(self, value: float | Fraction | str) -> int:
        """Bin index of an in-bounds value; the upper bound falls in the last bin.

        Computed with exact rationals, and CSV text is read exactly ("0.3" is 3/10, not the
        nearest double), so a value on an edge lands in the same bin on every machine.
        """
        span = Fraction(self.max) - Fraction(self.min)
        position = (Fraction(value) - Fraction(self.min)) * self.bins / span
        return min(int(math.floor(position)), self.bins - 1)

    def clamp(self, value: float) -> float:
        return min(max(value, self.min), self.max)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": "continuous", "min": self.min, "max": self.max,
                "bins": self.bins, "integer": self.integer}


@dataclass(frozen=True)
class CategoricalColumn:
    """A column whose values are one of a public, ordered list of categories."""

    name: str
    categories: tuple[str, ...]
    labels: tuple[str, ...] | None = None
    kind: Literal["categorical"] = "categorical"
    _index: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._index.update({c: i for i, c in enumerate(self.categories)})

    @property
    def size(self) -> int:
        return len(self.categories)

    def has(self, value: str) -> bool:
        return value in self._index

    def bin_of(self, value: str) -> int:
        return self._index[value]

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

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise SchemaError(f"duplicate column names in schema: {sorted(names)}")
        if len(self.columns) < 2:
            raise SchemaError("a schema needs at least two columns (2-way marginals)")

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
        return {"name": self.name, "columns": [c.to_dict() for c in self.columns]}

    def fingerprint(self) -> str:
        """SHA-256 of the canonical JSON: clients and servers check they agree."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, default_bins: int = DEFAULT_BINS) -> Schema:
        if not isinstance(raw, dict) or not isinstance(raw.get("columns"), list):
            raise SchemaError("schema must be a JSON object with a 'columns' list")
        columns: list[Column] = []
        for i, entry in enumerate(raw["columns"]):
            columns.append(_column_from_dict(entry, i, default_bins))
        return cls(columns=tuple(columns), name=str(raw.get("name", "table")))

    @classmethod
    def load(cls, path: str | Path, *, default_bins: int = DEFAULT_BINS) -> Schema:
        path = Path(path)
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise SchemaError(f"{path}: schema file not found") from None
        except json.JSONDecodeError as exc:
            raise SchemaError(f"{path}: not valid JSON ({exc})") from None
        try:
            return cls.from_dict(raw, default_bins=default_bins)
        except SchemaError as exc:
            raise SchemaError(f"{path}: {exc}") from None


def _column_from_dict(entry: Any, position: int, default_bins: int) -> Column:
    if not isinstance(entry, dict) or "name" not in entry or "type" not in entry:
        raise SchemaError(f"column #{position}: needs 'name' and 'type'")
    name = str(entry["name"])
    kind = entry["type"]
    if kind == "continuous":
        try:
            lo, hi = entry["min"], entry["max"]
        except KeyError:
            raise SchemaError(f"column '{name}': continuous needs public 'min' and 'max'") from None
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (lo, hi)):
            raise SchemaError(f"column '{name}': 'min' and 'max' must be finite numbers")
        if not lo < hi:
            raise SchemaError(f"column '{name}': 'min' ({lo}) must be below 'max' ({hi})")
        bins = entry.get("bins", default_bins)
        if not isinstance(bins, int) or not 1 <= bins <= 4096:
            raise SchemaError(f"column '{name}': 'bins' must be an integer in [1, 4096]")
        integer = entry.get("integer", isinstance(lo, int) and isinstance(hi, int))
        return ContinuousColumn(name=name, min=lo, max=hi, bins=bins, integer=bool(integer))
    if kind == "categorical":
        cats = entry.get("i2s")
        if not isinstance(cats, list) or not cats:
            raise SchemaError(f"column '{name}': categorical needs a non-empty 'i2s' list")
        cats = [str(c) for c in cats]
        if len(set(cats)) != len(cats):
            raise SchemaError(f"column '{name}': duplicate categories in 'i2s'")
        if "size" in entry and entry["size"] != len(cats):
            raise SchemaError(f"column '{name}': 'size' {entry['size']} != len(i2s) {len(cats)}")
        labels = entry.get("labels")
        if labels is not None and len(labels) != len(cats):
            raise SchemaError(f"column '{name}': 'labels' must have one entry per category")
        return CategoricalColumn(name=name, categories=tuple(cats),
                                 labels=tuple(map(str, labels)) if labels else None)
    raise SchemaError(f"column '{name}': unknown type {kind!r} (continuous or categorical)")
