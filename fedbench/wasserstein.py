"""1-Wasserstein distance between real and synthetic 2-way marginals, exactly.

The benchmark reports the Wasserstein distance of every 1-way and 2-way marginal;
:func:`fedbench.metrics.wasserstein_one_way` is the 1-way part. For a pair of attributes the
ground distance between cells (i, j) and (i', j') is d_a(i, i') + d_b(j, j'), where, as in the
1-way metric, an ordered (binned continuous) attribute of n bins has positions
0, 1/(n-1), ..., 1 (L1 on ordered bin indices, scaled to [0, 1]) and a categorical one the
0/1 metric. That metric is the shortest-path metric of the Cartesian product of two graphs:
a path with edges 1/(n-1) for an ordered attribute, a star with edges 1/2 around an extra
hub node for a categorical one. W1 under a graph metric is a min-cost transshipment on the
graph (Kantorovich-Rubinstein), an LP with one variable per edge direction, which HiGHS
(``scipy.optimize.linprog``) solves exactly up to floating point in milliseconds: Adult's
largest pair has 731 nodes and 2,804 variables. So every pair is computed, none sampled.

>>> real = np.array([[0, 0], [0, 1]]); synth = np.array([[1, 0], [1, 0]])
>>> round(wasserstein_two_way(real, synth, (2, 2), ordered=(True, False)), 9)
1.5
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

__all__ = ["wasserstein_pair", "wasserstein_two_way"]


def _factor_graph(size: int, ordered: bool) -> tuple[int, list[tuple[int, int, float]]]:
    """(node count, weighted edges) whose path metric on nodes 0..size-1 is the ground one."""
    if size <= 1:
        return max(size, 1), []
    if ordered:
        step = 1.0 / (size - 1)
        return size, [(i, i + 1, step) for i in range(size - 1)]
    hub = size
    return size + 1, [(i, hub, 0.5) for i in range(size)]


def wasserstein_pair(p: np.ndarray, q: np.ndarray, ordered: tuple[bool, bool]) -> float:
    """W1 between two distributions on a 2-D grid (arrays of the same shape, each sums to 1)."""
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    na, ea = _factor_graph(p.shape[0], ordered[0])
    nb, eb = _factor_graph(p.shape[1], ordered[1])
    supply = np.zeros((na, nb))
    supply[:p.shape[0], :p.shape[1]] = p - q
    tails, heads, costs = [], [], []
    for u, u2, w in ea:  # edges along attribute a, at every node of b's graph
        for v in range(nb):
            tails.append(u * nb + v)
            heads.append(u2 * nb + v)
            costs.append(w)
    for v, v2, w in eb:
        for u in range(na):
            tails.append(u * nb + v)
            heads.append(u * nb + v2)
            costs.append(w)
    if not costs:
        return 0.0
    m = len(costs)
    # Variables: flow tail->head (first m) and head->tail (last m); balance: out - in = supply.
    rows = np.concatenate([tails, heads, heads, tails])
    cols = np.concatenate([np.arange(m), np.arange(m), np.arange(m, 2 * m), np.arange(m, 2 * m)])
    vals = np.concatenate([np.ones(m), -np.ones(m), np.ones(m), -np.ones(m)])
    incidence = coo_matrix((vals, (rows, cols)), shape=(na * nb, 2 * m)).tocsr()
    result = linprog(np.concatenate([costs, costs]), A_eq=incidence, b_eq=supply.ravel(),
                     bounds=(0, None), method="highs")
    if result.status != 0:
        raise RuntimeError(f"transport LP failed: {result.message}")
    return float(result.fun)


def wasserstein_two_way(real: np.ndarray, synth: np.ndarray, domain_sizes: tuple[int, ...],
                        ordered: tuple[bool, ...],
                        pairs: list[tuple[int, int]] | None = None) -> float:
    """Mean over attribute pairs (default: all) of the 2-way marginals' W1."""
    pairs = list(itertools.combinations(range(len(domain_sizes)), 2)) if pairs is None else pairs
    out = []
    for a, b in pairs:
        shape = (domain_sizes[a], domain_sizes[b])
        dists = []
        for table in (real, synth):
            flat = table[:, a] * shape[1] + table[:, b]
            counts = np.bincount(flat, minlength=shape[0] * shape[1]).reshape(shape)
            dists.append(counts / max(len(table), 1))
        out.append(wasserstein_pair(dists[0], dists[1], (ordered[a], ordered[b])))
    return float(np.mean(out)) if out else 0.0
