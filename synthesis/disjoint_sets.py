"""Union-find over attribute indices, for growing spanning trees edge by edge (Kruskal).

>>> sets = DisjointSets(3)
>>> sets.joins(0, 1), sets.union(0, 1), sets.joins(0, 1)
(True, None, False)
"""

from __future__ import annotations


class DisjointSets:
    def __init__(self, n: int):
        self._parent = list(range(n))

    def find(self, a: int) -> int:
        while self._parent[a] != a:
            self._parent[a] = self._parent[self._parent[a]]  # path halving
            a = self._parent[a]
        return a

    def joins(self, a: int, b: int) -> bool:
        """True if an edge (a, b) would join two different components."""
        return self.find(a) != self.find(b)

    def union(self, a: int, b: int) -> None:
        self._parent[self.find(a)] = self.find(b)
