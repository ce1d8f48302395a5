"""PrivSyn's Gradually Update Method, GUM (Zhang et al. 2021, Section 6), written from the paper.

Start from records drawn independently from the (consistent) 1-way marginals. Then, for a
number of rounds with a decaying step size alpha, visit the marginals in order of their
current error (largest first) and move records from over-represented cells to
under-represented ones: a moved record either becomes a copy of a record already in the
target cell (PrivSyn's "duplicate", which keeps the other attributes' correlations) or gets
only this marginal's attributes replaced (PrivSyn's "replace").
"""

from __future__ import annotations

import numpy as np

from feddpsyn.synthesis.marginals import NoisyMarginal


def _cell_ids(records: np.ndarray, attrs: tuple[int, ...], sizes: tuple[int, ...]) -> np.ndarray:
    flat = np.zeros(len(records), dtype=np.int64)
    for a in attrs:
        flat = flat * sizes[a] + records[:, a]
    return flat


def _l1(records, m: NoisyMarginal, sizes, rows) -> float:
    current = np.bincount(_cell_ids(records, m.attrs, sizes), minlength=m.counts.size)
    target = m.counts.ravel() * rows / max(m.counts.sum(), 1e-12)
    return float(np.abs(current - target).sum())


def fit_gum(marginals: list[NoisyMarginal], domain_sizes: tuple[int, ...], rows: int,
            rng: np.random.Generator, rounds: int = 30, alpha0: float = 1.0,
            decay: float = 0.9, duplicate_share: float = 0.5,
            start: np.ndarray | None = None) -> np.ndarray:
    """GUM's records for ``marginals`` (module docstring). ``start``: records to update instead
    of independent draws from the 1-ways (another estimator's sample, say; resampled to
    ``rows``); it is not modified."""
    sizes = tuple(domain_sizes)
    if start is not None:
        start = np.asarray(start, dtype=np.int64)
        if start.ndim != 2 or start.shape[1] != len(sizes) or len(start) == 0:
            raise ValueError(f"start must be a non-empty (rows, {len(sizes)}) array of records")
        records = (start.copy() if len(start) == rows else
                   start[rng.choice(len(start), size=rows, replace=len(start) < rows)])
    else:
        one_way = {m.attrs[0]: m for m in marginals if len(m.attrs) == 1}
        records = np.zeros((rows, len(sizes)), dtype=np.int64)
        for a, size in enumerate(sizes):
            p = one_way[a].counts.ravel() if a in one_way else np.ones(size)
            p = np.maximum(p, 0)
            p = p / p.sum() if p.sum() > 0 else np.full(size, 1 / size)
            records[:, a] = rng.choice(size, size=rows, p=p)
    two_way = [m for m in marginals if len(m.attrs) >= 2]
    for r in range(rounds):
        alpha = alpha0 * decay ** r
        order = sorted(two_way, key=lambda m: -_l1(records, m, sizes, rows))
        for m in order:
            _update(records, m, sizes, rows, alpha, rng, duplicate_share)
    return records


def _update(records, m, sizes, rows, alpha, rng, duplicate_share) -> None:
    cells = _cell_ids(records, m.attrs, sizes)
    current = np.bincount(cells, minlength=m.counts.size).astype(float)
    target = m.counts.ravel() * rows / max(m.counts.sum(), 1e-12)
    over = np.maximum(current - target, 0) * alpha
    under = np.maximum(target - current, 0) * alpha
    n_move = int(min(over.sum(), under.sum()))
    if n_move == 0:
        return
    # Which records leave: drawn from over-represented cells in proportion to their excess.
    take_per_cell = np.floor(over / over.sum() * n_move).astype(np.int64)
    movers = []
    order = np.argsort(cells, kind="stable")
    starts = np.searchsorted(cells[order], np.arange(m.counts.size))
    ends = np.searchsorted(cells[order], np.arange(m.counts.size), side="right")
    for c in np.nonzero(take_per_cell)[0]:
        members = order[starts[c]:ends[c]]
        k = min(take_per_cell[c], len(members))
        movers.append(rng.choice(members, size=k, replace=False))
    if not movers:
        return
    movers = np.concatenate(movers)
    destinations = rng.choice(m.counts.size, size=len(movers), p=under / under.sum())
    sizes_at_dest = ends[destinations] - starts[destinations]
    duplicate = (rng.random(len(movers)) < duplicate_share) & (sizes_at_dest > 0)
    # Duplicate: copy a random record already in the destination cell (a snapshot, so that
    # copies never chain within one update).
    picks = starts[destinations] + np.floor(rng.random(len(movers)) * np.maximum(sizes_at_dest, 1))
    sources = order[picks.astype(np.int64).clip(max=len(order) - 1)]
    snapshot = records[sources[duplicate]].copy()
    records[movers[duplicate]] = snapshot
    # Replace: set only this marginal's attributes to the destination cell's values.
    values = np.stack(np.unravel_index(destinations[~duplicate], m.counts.shape), axis=1)
    records[np.ix_(movers[~duplicate], list(m.attrs))] = values
