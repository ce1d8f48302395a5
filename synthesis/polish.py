"""Records brought to their model's pair marginals: a local search after sampling.

Why. A fitted graphical model answers every 2-way marginal; records drawn from it answer
them only up to the draw's own noise. On the servers' default release that noise was most
of Private-PGM's error at high budgets: the model's own pair marginals were 10-26% closer to
the truth than its sample's at eps 4 (wages: 0.0265 against 0.0360;
``experiments/synthesis_estimators/results``). The randomized-rounding sampler keeps each
clique's marginal within rounding, but a pair that no clique holds, or a clique of many
small conditional groups, collects the rounding of every group.

What. With T_ab the model's marginal of the pair (a, b) scaled to the number of records and
C_ab the records' counts, the search lowers

    L(records) = sum over every pair a < b of sum over cells |C_ab - T_ab|,

which is the records' 2-way L1 distance to the model (times the rows), one attribute of one
record at a time: in sweeps over the attributes and the records in random order, each record
moves to the value of the attribute that lowers L most, if any does. A move of attribute a
from v to w changes one cell of each pair (a, b) down and one up, so its change of L is the
sum over b of four terms read from C_ab and T_ab. Each accepted move lowers L strictly, so
the search ends; it stops at a local minimum or after ``max_sweeps``. Only moves that lower
L are made, so the records are never further from the model than the sample was.

Privacy: none is spent. The model is a function of the released marginals only, and the
randomness here (the orders) is not private (as the sampler's is not).
"""

from __future__ import annotations

import itertools

import numpy as np
from numba import njit

__all__ = ["MAX_READS", "MAX_SWEEPS", "distance", "polish"]

# Sweeps over every attribute of every record. On the shipped tables the search stopped by
# itself in 6-20 sweeps (no improving move left); the cap bounds it on any table.
MAX_SWEEPS = 30
# The most cell reads the search may make in all: a sweep reads rows x (columns - 1) x the
# sum of the domain sizes. Adult (26,000 rows, 15 columns) reads about 10^8 a sweep and ran
# 20 sweeps in 6 s; this cap is about a minute of one core. A table too large for one sweep
# within it keeps its draw as drawn (the search only ever improves on the draw).
MAX_READS = 2 * 10 ** 10


def _pair_tables(records: np.ndarray, targets: dict[tuple[int, int], np.ndarray],
                 sizes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair's counts and targets packed in two flat arrays, with each ordered pair
    (a, b)'s offset and strides: the cell (x, y) of (a, b) is at offset[a, b] + x * sa[a, b]
    + y * sb[a, b], for a < b and a > b alike (the transpose reads the same cells)."""
    d = len(sizes)
    offset = np.zeros((d, d, 3), dtype=np.int64)  # offset, stride of a's value, of b's
    counts: list[np.ndarray] = []
    wanted: list[np.ndarray] = []
    start = 0
    for a, b in itertools.combinations(range(d), 2):
        c = np.zeros((sizes[a], sizes[b]), dtype=np.float64)
        np.add.at(c, (records[:, a], records[:, b]), 1.0)
        counts.append(c.ravel())
        wanted.append(np.asarray(targets[a, b], dtype=np.float64).reshape(sizes[a],
                                                                          sizes[b]).ravel())
        offset[a, b] = (start, sizes[b], 1)
        offset[b, a] = (start, 1, sizes[b])
        start += sizes[a] * sizes[b]
    return np.concatenate(counts), np.concatenate(wanted), offset


@njit(cache=True)
def _sweeps(records, sizes, counts, targets, offset, seed,
            max_sweeps):  # pragma: no cover - compiled; run by the tests through polish()
    np.random.seed(seed)  # numba's own generator: the orders, drawn here a sweep at a time
    n, d = records.shape
    top = sizes.max()
    delta = np.zeros(top)
    moves = 0
    for s in range(max_sweeps):
        made = 0
        attrs = np.random.permutation(d)
        order = np.random.permutation(n)
        for ai in range(d):
            a = attrs[ai]
            for ri in range(n):
                r = order[ri]
                v = records[r, a]
                size = sizes[a]
                for w in range(size):
                    delta[w] = 0.0
                leave = 0.0
                for b in range(d):
                    if b == a:
                        continue
                    base = offset[a, b, 0] + records[r, b] * offset[a, b, 2]
                    step = offset[a, b, 1]
                    i = base + v * step
                    leave += abs(counts[i] - 1.0 - targets[i]) - abs(counts[i] - targets[i])
                    for w in range(size):
                        j = base + w * step
                        delta[w] += abs(counts[j] + 1.0 - targets[j]) - abs(counts[j] - targets[j])
                best = v
                gain = -1e-9  # a move must lower L by more than float noise
                for w in range(size):
                    if w != v and delta[w] + leave < gain:
                        gain = delta[w] + leave
                        best = w
                if best != v:
                    for b in range(d):
                        if b == a:
                            continue
                        base = offset[a, b, 0] + records[r, b] * offset[a, b, 2]
                        step = offset[a, b, 1]
                        counts[base + v * step] -= 1.0
                        counts[base + best * step] += 1.0
                    records[r, a] = best
                    made += 1
        moves += made
        if made == 0:
            return moves, s + 1
    return moves, max_sweeps


def polish(records: np.ndarray, targets: dict[tuple[int, int], np.ndarray],
           sizes: tuple[int, ...], rng: np.random.Generator,
           max_sweeps: int = MAX_SWEEPS) -> tuple[np.ndarray, int, int]:
    """``records`` moved toward ``targets`` (module docstring): a copy, with the number of
    moves made and of sweeps run. ``targets[a, b]`` for every pair a < b: the model's
    marginal of (a, b), shape (sizes[a], sizes[b]), scaled to ``len(records)`` records.
    At most ``MAX_READS`` cell reads in all: fewer sweeps on a large table, none on one too
    large for a single sweep."""
    records = np.array(records, dtype=np.int64, copy=True)
    n, d = records.shape if records.ndim == 2 else (0, 0)
    if records.ndim != 2 or d != len(sizes):
        raise ValueError(f"records must be a (rows, {len(sizes)}) array")
    if max_sweeps < 1:
        raise ValueError("max_sweeps must be at least 1")
    if n == 0 or d < 2:
        return records, 0, 0
    per_sweep = n * (d - 1) * sum(sizes)
    max_sweeps = min(max_sweeps, MAX_READS // per_sweep)
    if max_sweeps < 1:
        return records, 0, 0
    counts, wanted, offset = _pair_tables(records, targets, sizes)
    seed = int(rng.integers(1 << 31))
    moves, sweeps = _sweeps(records, np.asarray(sizes, dtype=np.int64), counts, wanted,
                            offset, seed, max_sweeps)
    return records, int(moves), int(sweeps)


def distance(records: np.ndarray, targets: dict[tuple[int, int], np.ndarray],
             sizes: tuple[int, ...]) -> float:
    """L of the module docstring: the records' summed 2-way L1 distance to ``targets``."""
    counts, wanted, _ = _pair_tables(np.asarray(records, dtype=np.int64), targets, sizes)
    return float(np.abs(counts - wanted).sum())
