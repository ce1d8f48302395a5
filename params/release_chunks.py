"""Which cells each chunk of a release carries: the one rule both servers apply, from the
public plan and the published selection alone.

* **A fixed release** (its marginals named in the plan: the 1-ways, every pair) runs on the
  session layout's own chunks: chunk c holds cells c*C .. c*C + C - 1 of the full vector
  (C = ``chunk_cells``), and its inputs are the clients' ciphertexts of chunk c, which the
  key server encrypted once when they uploaded. A chunk holding none of its cells is not
  run.
* **A selected release** (its marginals chosen at run time: noisy-greedy's pairs, em's
  rounds) is *packed*: its cells in layout order, C at a time, the last chunk padded. Its
  pairs are spread over the layout (Fed-Heart-Disease's demo kept 16 of 66 pairs, 219 cells
  with the topped-up 1-ways; they touched 13 layout chunks and fill 4 packed ones), and a
  chunk costs the same whatever share of it is released: the joint noise's bits are
  encrypted, and expanded again by the compute server, for every cell of a chunk
  (``crypto.joint_noise``). A packed chunk's inputs are the key server's encryptions of the
  clients' masked values at its cells (``keyserver.releases.Releases.packed_inputs``):
  the same values the uploads carry, under the same key, so the compute server learns
  nothing new; its joint-noise bits are sets made before anyone knows the pairs, since set j
  serves whichever cells the selection puts in packed chunk j (``keyserver.coins``).

Padding cells and unreleased cells of a layout chunk carry ``select`` 0 and weight 0: they
decrypt to 0 (``crypto.aggregation.release_offset``), and the key server keeps only the
release's cells, by their places in the chunk (:attr:`ReleaseChunk.places`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from feddpsyn.params.release_spec import ReleaseSpec
    from feddpsyn.params.session_plan import SessionPlan

__all__ = ["ReleaseChunk", "chunks_of_release", "is_packed", "possible_chunks"]

Array = np.ndarray[Any, Any]


@dataclass(frozen=True, eq=False)
class ReleaseChunk:
    """One chunk of a release: its number in the release's manifest, the release's cells it
    carries (positions in the full vector, in release order) and their places in the chunk's
    vector of C values; ``packed``: its inputs are made for the release (module docstring),
    else they are the clients' uploads of layout chunk ``index``."""

    index: int
    cells: Array
    places: Array
    packed: bool


def is_packed(plan: SessionPlan, name: str) -> bool:
    """A release is packed iff the plan leaves its marginals to the selection."""
    return plan.selection is not None and not plan.release(name).marginal_keys


def chunks_of_release(plan: SessionPlan, release: ReleaseSpec) -> list[ReleaseChunk]:
    """The chunks of a resolved release (its marginals known), in manifest order."""
    size = plan.parameters.chunk_cells
    cells = plan.layout.cells_of(plan.slots_of(release))
    if is_packed(plan, release.name):
        return [ReleaseChunk(j, cells[start:start + size],
                             np.arange(min(size, len(cells) - start)), True)
                for j, start in enumerate(range(0, len(cells), size))]
    out = []
    for index in sorted(set((cells // size).tolist())):  # bounded: one pass per layout chunk
        mine = cells[cells // size == index]
        out.append(ReleaseChunk(index, mine, mine - index * size, False))
    return out


def _possible_slots(plan: SessionPlan, name: str) -> list:
    """Every marginal a release may carry: its own, or for a selected release every pair
    (and the 1-ways where it tops them up)."""
    spec = plan.release(name)
    if spec.marginal_keys:
        return list(plan.slots_of(spec))
    slots = list(plan.layout.two_way)
    if plan.one_way_topup:
        slots = list(plan.layout.one_way) + slots
    return slots


def possible_chunks(plan: SessionPlan, name: str) -> list[int]:
    """Every chunk number a release may use, before its marginals are known: a fixed
    release's layout chunks; a packed one's 0 .. ceil(most cells / C) - 1, which is also
    the likeliest-first order of a packed release's chunks (chunk j is used iff the
    selection keeps more than j*C cells)."""
    size = plan.parameters.chunk_cells
    cells = plan.layout.cells_of(_possible_slots(plan, name))
    if is_packed(plan, name):
        return list(range(-(-len(cells) // size)))
    return sorted(set((cells // size).tolist()))

