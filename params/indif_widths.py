"""P2's width per chunk, from the published 1-ways: fewer lookups for the same scores.

P2 (``crypto.indif``) runs one carry and one sign-fold lookup per base-4 digit of every cell
at the session's full width k (|C - K| < 2^(k-1) for any union of max_rows rows). Most cells
are far smaller than max_rows, and after the 1-way release both servers hold a public bound
on each: C_ab lies in [0, min(C_a, C_b)], C_a <= C^_a + t (C^_a the published 1-way, t a
tail bound of its noise), so

    |C_ab - K_ab| <= B_ab = max(K_ab, min(C^_a, C^_b, max_rows) + t - K_ab).

A chunk whose cells all have B <= 2^(w-1) is run by the module's ``indif_<s>_w<w>`` on the
residues mod 2^w (fewer digits: about k - w lookups a cell fewer); its score is exact
whenever the bound holds.

**Privacy does not rest on the bound.** At width w the circuit computes, per cell,
f_w(d) = |((d + 2^(w-1)) mod 2^w) - 2^(w-1)|: the distance from d to the nearest multiple
of 2^w. A distance to a set is 1-Lipschitz, so adding or removing one record (one cell's
d by 1) changes a chunk's score by at most 1 at every width, and InDif's sensitivity stays
1 (``docs/privacy.md``). The widths and the cut are functions of the published 1-ways and
the public plan (post-processing), the same on both servers. A bound that fails only
lowers that chunk's score (f_w(d) <= |d|): accuracy, never privacy; and InDif can only
shrink, so the score's digits (2 max_rows) still hold it. The bound's tail t is therefore
an accuracy choice: :data:`WRAP_TAIL` per published count, by the noise's sub-Gaussian
proxy (the release's ``row_bound_noise``: Hoeffding for a joint noise).

**A typical bound beside the worst case.** The worst-case bound is about three times what
the cells' own |C - K| need (``experiments/p2_cost_floor/``). A session's record may carry a
multiple z (``indif_typical``; :data:`TYPICAL_MULTIPLE`); each cell's bound is then

    B_z = min(z sqrt(K + v (p_a^2 + p_b^2) + 1), the worst-case bound)

with v the published 1-ways' noise variance and p their shares (K = C^_a C^_b / N^ errs by
about p_b e_a + p_a e_b): z deviations of a cell of an independent pair. Cells of strongly
dependent pairs pass it and wrap, which lowers their pair's score; privacy is unchanged
(the argument above holds at every width), so this too is an accuracy choice, and it is
measured where accuracy is decided, on the selection: with the same score noise, the pairs
noisy-greedy keeps were the same under B_12 as under the worst-case bound in every one of
360 trials (six shared tables, eps 0.3 / 1 / 4, 5 draws of the 1-ways, 4 noise draws each;
``experiments/p2_wrapped_widths/``), while P2's lookups went to x0.77-0.81 of the
worst-case widths' on Adult and x0.84-0.92 wherever else widths are compiled (a pair whose
score dropped, by up to tens of thousands on Adult, stayed far above what keeping it costs).
At z = 8, one of 360 trials in an earlier run kept one pair fewer. A record without the
field runs the worst-case bound alone.

**Which widths.** Every width is one more function per chunk size in the selection module
(compile time, not keys: every lookup stays 3 bits wide). The module holds the widths
from the least a bound can need (t alone) to k - 1, at most :data:`MAX_NARROW_WIDTHS` of
them (:func:`narrow_widths`). Measured on Adult's default plan (one draw of the 1-ways):
P2's lookups x0.709 with (10, 12, 14, 16), x0.687 with every width from 10 to 16. The
widths cost compile time on the key server before any upload: on Fed-Heart-Disease at eps 1
(k = 11, widths 9 and 10, lookups x0.91) the module's compile went from 6.8 to 13.6 s while
P2's calls took x0.96 (``experiments/p2_widths/``): in three demos the session's preparation
grew by about 19 s and P2 shrank by about 20 s. Each width costs about as much compile as
the next bit saves there, so no width is compiled unless the narrowest saves
:data:`MIN_SAVED_BITS` bits; the chunks then keep the layout's order.

**Which cells share a chunk.** A pair's cells are ordered by their bound, smallest first,
and cut by the pair's chunk sizes largest first (``params.selection_plan.chunk_sizes_for``):
the small cells fill the large chunks at a narrow width and the few large cells pay the
full width in the small ones. The order is public (the bounds) and both servers derive it;
a pair's InDif is a sum over its cells, so the order changes no score.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.selection_plan import chunk_sizes_for

__all__ = ["WRAP_TAIL", "MAX_NARROW_WIDTHS", "TYPICAL_MULTIPLE", "Typical", "wrap_margin",
           "narrow_widths", "width_for", "cell_bounds", "chunks_by_width"]

Array = np.ndarray[Any, Any]

# The probability, per published count, that its noise passes the bound's tail t (an
# accuracy choice: module docstring).
WRAP_TAIL = 1e-6

# At most this many widths below the full one are compiled (module docstring).
MAX_NARROW_WIDTHS = 4

# None is compiled unless the narrowest saves at least this many bits (module docstring).
MIN_SAVED_BITS = 4

# z of the typical bound B_z (module docstring): the selection kept the same pairs in every
# paired trial at 12, not at 8.
TYPICAL_MULTIPLE = 12


def wrap_margin(proxy: Fraction, noises: int) -> float:
    """t with P[|noise| > t] <= WRAP_TAIL for a sum of ``noises`` independent noises each
    sub-Gaussian with variance proxy ``proxy``: sqrt(2 proxy noises ln(2 / WRAP_TAIL))."""
    return math.sqrt(2 * float(proxy) * noises * math.log(2 / WRAP_TAIL))


def width_for(bound: float) -> int:
    """The least w >= 2 with bound <= 2^(w-1).

    >>> [width_for(b) for b in (0, 2, 2.5, 4, 5, 1024, 1025)]
    [2, 2, 3, 3, 4, 11, 12]
    """
    return max(2, 1 + (max(math.ceil(bound), 1) - 1).bit_length())


def narrow_widths(count_bits: int, margin: float, max_rows: int,
                  typical: float | None = None) -> tuple[int, ...]:
    """The widths below k the module compiles: from the least any bound can need (the
    margin alone, which the most chunks use once the small cells are grouped; with a
    typical bound B_z, z: ``typical``) to k - 1, every one, or every second, third, ... from
    the least so that at most MAX_NARROW_WIDTHS remain.

    None when the worst-case bound's least is less than MIN_SAVED_BITS below k: where the
    worst case leaves too little, the typical bound's saving is measured to cost about what
    the widths' compile does (``experiments/p2_wrapped_widths/``).

    >>> narrow_widths(11, 214.0, 995), narrow_widths(11, 80.0, 995), narrow_widths(12, 80.0, 2000)
    ((), (), (8, 9, 10, 11))
    >>> narrow_widths(17, 426.0, 35827), narrow_widths(17, 426.0, 35827, typical=12)
    ((10, 12, 14, 16), (5, 8, 11, 14))
    """
    worst = width_for(min(margin, max_rows))
    if count_bits - worst < MIN_SAVED_BITS:
        return ()
    least = worst if typical is None else min(worst, width_for(typical))
    widths = list(range(least, count_bits))
    step = -(-len(widths) // MAX_NARROW_WIDTHS)
    return tuple(widths[::max(step, 1)])


@dataclass(frozen=True)
class Typical:
    """What B_z needs beside the worst-case bound (module docstring): z, the published
    1-ways' noise variance v and their published row count N^."""

    multiple: float
    variance: float
    rows: float

    @staticmethod
    def of(multiple: float, variance: float, one_way: Sequence[Array]) -> Typical:
        """N^ from the first published 1-way (every 1-way sums to about N)."""
        rows = float(np.maximum(np.asarray(one_way[0], dtype=float), 0.0).sum())
        return Typical(float(multiple), float(variance), max(rows, 1.0))


def cell_bounds(one_way: Sequence[Array], attrs: tuple[int, ...], expected: Array,
                margin: float, max_rows: int, typical: Typical | None = None) -> Array:
    """B per cell of the pair ``attrs`` (module docstring), in the pair's cell order: the
    worst case, or B_z where ``typical`` is given."""
    a, b = (np.maximum(np.asarray(one_way[i], dtype=float), 0.0) for i in attrs)
    top = np.minimum(np.minimum.outer(a, b).ravel() + margin, max_rows)
    k = np.asarray(expected, dtype=float)
    worst = np.maximum(k, top - k)
    if typical is None:
        return worst
    pa, pb = a / typical.rows, b / typical.rows
    spread = typical.variance * np.add.outer(pa * pa, pb * pb).ravel()
    return np.minimum(worst, typical.multiple * np.sqrt(k + spread + 1))


def chunks_by_width(layout: MarginalLayout, sizes: tuple[int, ...], count_bits: int,
                    widths: tuple[int, ...], one_way: Sequence[Array],
                    expected: Mapping[tuple[int, ...], Array], margin: float, max_rows: int,
                    typical: Typical | None = None) -> list[tuple[int, Array, int, int]]:
    """P2's chunks as (candidate index, cell positions, chunk size, width): the chunk
    sizes of ``params.selection_plan.indif_chunks``, each pair's cells by bound, each chunk
    at the narrowest compiled width that holds its cells' bounds (``count_bits`` if none)."""
    out = []
    for index, slot in enumerate(layout.two_way):
        bounds = cell_bounds(one_way, slot.attrs, expected[slot.attrs], margin, max_rows,
                             typical)
        # Without narrower widths, the layout's order (the chunks of ``indif_chunks``).
        order = np.argsort(bounds, kind="stable") if widths else np.arange(slot.size)
        start = 0
        for size in chunk_sizes_for(slot.size, sizes):
            part = order[start:start + size]
            need = width_for(float(bounds[part].max()))
            width = min([w for w in widths if w >= need], default=count_bits)
            out.append((index, slot.offset + part, size, width))
            start += size
    return out
