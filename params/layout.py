"""The public layout of a client's count vector: which cell of which marginal sits where.

Every client, the key server and the compute server must agree on this layout bit for bit:
it decides which masked value is added to which, and which cells a release may decrypt.
It depends only on the schema (domain sizes) and the public list of attribute pairs.

Layout: every 1-way marginal in column order, then every 2-way marginal in pair order; a
2-way marginal over columns (j, k) is flattened row-major (index ``a * size_k + b``).

>>> lay = MarginalLayout.build((3, 2, 2), pairs=[(0, 1)])
>>> [(m.attrs, m.offset, m.size) for m in lay.marginals]
[((0,), 0, 3), ((1,), 3, 2), ((2,), 5, 2), ((0, 1), 7, 6)]
>>> lay.total_cells
13

DistAIM's uploads use the general form: the marginals of a workload's completion (every
non-empty subset of a workload marginal), by size, then lexicographically
(:meth:`MarginalLayout.for_workload`).

>>> lay = MarginalLayout.for_workload((3, 2, 2), [(0, 2), (1,)])
>>> [(m.attrs, m.offset, m.size) for m in lay.marginals]
[((0,), 0, 3), ((1,), 3, 2), ((2,), 5, 2), ((0, 2), 7, 6)]
>>> lay.length
13
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["MarginalSlot", "MarginalLayout", "completion"]

Clique = tuple[int, ...]


def completion(workload: Sequence[Sequence[int]]) -> list[Clique]:
    """Every non-empty subset of every workload marginal (AIM's candidates), by size, then
    lexicographically.

    >>> completion([(2, 0), (1,)])
    [(0,), (1,), (2,), (0, 2)]
    """
    subsets = {subset for clique in workload for k in range(1, len(clique) + 1)
               for subset in itertools.combinations(sorted(clique), k)}
    return sorted(subsets, key=lambda c: (len(c), c))


@dataclass(frozen=True)
class MarginalSlot:
    """One marginal's place in the vector."""

    attrs: tuple[int, ...]
    shape: tuple[int, ...]
    offset: int

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def key(self) -> str:
        """A stable name, e.g. ``"3"`` or ``"3,7"``, used in JSON documents."""
        return ",".join(map(str, self.attrs))


@dataclass(frozen=True)
class MarginalLayout:
    domain_sizes: tuple[int, ...]
    marginals: tuple[MarginalSlot, ...]

    @classmethod
    def build(cls, domain_sizes: tuple[int, ...] | list[int],
              pairs: list[tuple[int, int]] | None = None) -> MarginalLayout:
        """All 1-ways plus the given pairs (default: every pair, in lexicographic order)."""
        sizes = tuple(int(s) for s in domain_sizes)
        d = len(sizes)
        pair_list = (list(itertools.combinations(range(d), 2)) if pairs is None
                     else [tuple(sorted(p)) for p in pairs])
        for p in pair_list:
            if len(p) != 2 or p[0] == p[1] or not all(0 <= a < d for a in p):
                raise ValueError(f"invalid attribute pair {p} for {d} columns")
        if len(set(pair_list)) != len(pair_list):
            raise ValueError("duplicate attribute pairs")
        return cls.for_cliques(sizes, [(j,) for j in range(d)] + pair_list)

    @classmethod
    def for_cliques(cls, domain_sizes: Sequence[int],
                    cliques: Sequence[Sequence[int]]) -> MarginalLayout:
        """The given marginals (any number of attributes each), in the given order."""
        sizes = tuple(int(s) for s in domain_sizes)
        slots = []
        offset = 0
        for attrs in cliques:
            shape = tuple(sizes[a] for a in attrs)
            slot = MarginalSlot(attrs=tuple(attrs), shape=shape, offset=offset)
            slots.append(slot)
            offset += slot.size
        return cls(domain_sizes=sizes, marginals=tuple(slots))

    @classmethod
    def for_workload(cls, domain_sizes: Sequence[int],
                     workload: Sequence[Sequence[int]]) -> MarginalLayout:
        """The marginals of the workload's :func:`completion` (a DistAIM upload)."""
        return cls.for_cliques(domain_sizes, completion(workload))

    @property
    def total_cells(self) -> int:
        last = self.marginals[-1]
        return last.offset + last.size

    @property
    def length(self) -> int:
        """:attr:`total_cells`, as DistAIM names it (the length of a client's upload)."""
        return self.total_cells

    @property
    def cliques(self) -> tuple[Clique, ...]:
        """Each marginal's attributes, in the layout's order."""
        return tuple(m.attrs for m in self.marginals)

    @property
    def offsets(self) -> dict[Clique, tuple[int, int]]:
        """Each marginal's (offset, size) by its attributes."""
        return {m.attrs: (m.offset, m.size) for m in self.marginals}

    @property
    def one_way(self) -> tuple[MarginalSlot, ...]:
        return tuple(m for m in self.marginals if len(m.attrs) == 1)

    @property
    def two_way(self) -> tuple[MarginalSlot, ...]:
        return tuple(m for m in self.marginals if len(m.attrs) == 2)

    @property
    def pairs(self) -> list[tuple[int, int]]:
        return [m.attrs for m in self.two_way]  # type: ignore[misc]

    def slot(self, attrs: tuple[int, ...]) -> MarginalSlot:
        for m in self.marginals:
            if m.attrs == tuple(attrs):
                return m
        raise KeyError(attrs)

    def cells_of(self, slots: list[MarginalSlot] | tuple[MarginalSlot, ...]) -> np.ndarray:
        """Indices (into the full vector) of all cells of the given marginals, in order."""
        if not slots:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.arange(m.offset, m.offset + m.size) for m in slots])

    def counts(self, records: np.ndarray) -> np.ndarray:
        """The count vector of an encoded table (rows x columns of bin indices).

        >>> lay = MarginalLayout.build((2, 2))
        >>> lay.counts(np.array([[0, 1], [1, 1], [1, 0]])).tolist()
        [1, 2, 1, 2, 0, 1, 1, 1]
        """
        records = np.asarray(records, dtype=np.int64)
        if records.ndim != 2 or records.shape[1] != len(self.domain_sizes):
            raise ValueError(f"records must be n x {len(self.domain_sizes)}")
        out = np.zeros(self.total_cells, dtype=np.int64)
        for m in self.marginals:
            flat = np.zeros(len(records), dtype=np.int64)
            for a in m.attrs:
                flat = flat * self.domain_sizes[a] + records[:, a]
            out[m.offset:m.offset + m.size] = np.bincount(flat, minlength=m.size)
        return out
