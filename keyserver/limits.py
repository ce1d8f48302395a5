"""What one session may ask of this key server: checked on the request's JSON before the
schema or the plan is built, so a request past a limit is refused at once (409), naming the
limit, the request's value and the server option that raises it, with nothing built or
stored.

The limits bound what a session makes the key server hold and do: the cells of the layout
(each client's masked vector, its ciphertexts, the releases' coin sets grow with them), the
columns (the pairs the plan prices and the selection scores grow with their square) and
one column's categories (a 2-way marginal's cells are the product of two). The defaults fit
the 2-core, 24 GB machine the project is measured on with room to spare: 16 times Adult's
12,090 cells, four times its 15 columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from feddpsyn.params.schema import DEFAULT_BINS

__all__ = ["SessionLimits", "request_size", "LimitExceeded"]


class LimitExceeded(ValueError):
    """A request past one of :class:`SessionLimits`; the message names it."""


@dataclass(frozen=True)
class SessionLimits:
    """One session's bounds at this key server (``feddpsyn keyserver --max-...``)."""

    max_columns: int = 64
    max_categories: int = 4096
    max_cells: int = 200_000
    max_clients: int = 1000

    def check(self, schema: dict[str, Any], clients: int,
              pairs: list[tuple[int, int]] | None) -> None:
        """Raise :class:`LimitExceeded` for the first limit ``schema`` (the request's JSON
        object, already of the documented shape), ``clients`` and ``pairs`` pass."""
        columns = schema.get("columns", [])
        if len(columns) > self.max_columns:
            raise LimitExceeded(self._message("columns", len(columns), self.max_columns,
                                              "--max-columns"))
        sizes = [_domain(column) for column in columns]
        for column, size in zip(columns, sizes, strict=True):
            if size > self.max_categories:
                raise LimitExceeded(self._message(
                    f"categories (bins) of column {str(column.get('name'))[:40]!r}", size,
                    self.max_categories, "--max-categories"))
        if clients > self.max_clients:
            raise LimitExceeded(self._message("clients", clients, self.max_clients,
                                              "--max-clients"))
        cells = request_size(sizes, pairs)
        if cells > self.max_cells:
            raise LimitExceeded(self._message("cells (1-way and 2-way counts)", cells,
                                              self.max_cells, "--max-cells"))

    @staticmethod
    def _message(what: str, value: int, limit: int, option: str) -> str:
        return (f"the session's {what} number {value:,}, over this key server's limit of "
                f"{limit:,} (its operator can raise it: feddpsyn keyserver {option})")


def _domain(column: dict[str, Any]) -> int:
    if column.get("type") == "categorical":
        return len(column.get("i2s", ()))
    return int(column.get("bins", DEFAULT_BINS))


def request_size(sizes: list[int], pairs: list[tuple[int, int]] | None) -> int:
    """The layout's cells: every 1-way, and the requested 2-ways (default: every pair),
    from the columns' domain sizes alone; arithmetic only, whatever the sizes.

    >>> request_size([2, 3, 4], None)
    35
    >>> request_size([2, 3, 4], [(0, 2)])
    17
    """
    if pairs is None:
        total, square = sum(sizes), sum(s * s for s in sizes)
        return total + (total * total - square) // 2
    return sum(sizes) + sum(sizes[a] * sizes[b] for a, b in pairs
                            if 0 <= a < len(sizes) and 0 <= b < len(sizes))
