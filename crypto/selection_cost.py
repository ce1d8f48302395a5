"""The bootstraps of Primitive 3 (``crypto.tfhe_permute_and_flip``), one call or by candidate
batches (``crypto.selection_batches``), counted from the circuits' structure.

Guarantee: each count is an upper bound on concrete's own count for the same circuit
(``tests/crypto/test_selection.py`` and ``tests/crypto/test_selection_batches.py`` compare
them with the compile statistics), so a plan made before anything is compiled
(``feddpsyn params``, the demo's estimate, ``params.selection_plan``'s delta reserve) never
understates the bootstraps' failure probability. A session's fhe_delta uses the compiled
count itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from feddpsyn.crypto.selection_batches import BatchLayout
    from feddpsyn.crypto.tfhe_permute_and_flip import SelectionShape

__all__ = ["pbs_estimate", "batched_pbs_estimate"]


def _or_tree_lookups(count: int) -> int:
    """Lookups of an OR tree over ``count`` columns (three at a time, as the circuit's)."""
    total = 0
    while count > 1:
        total += count // 3 + (1 if count % 3 > 1 else 0)
        count = -(-count // 3)
    return total


def _maximum_lookups(s: int, width: int, last_alive: bool = True) -> int:
    """OR trees, ANDs, keep-alives; the keep-alive after the last digit is never used
    (concrete drops it; :func:`pbs_estimate` counts it, an upper bound)."""
    return width * _or_tree_lookups(s) + (width - 1) * s + (width - int(not last_alive)) * s


def _acceptance_lookups(shape: SelectionShape) -> int:
    """Per candidate: A's digits and borrows, the saturation OR, the trials, the accept OR."""
    width = shape.quantised_bits
    difference = width + (width - 1)
    saturated = _or_tree_lookups(width - shape.nb) if width > shape.nb else 0
    trials = sum(-(-kp // shape.trial_bits) for kp in shape.kappa_prime) + shape.nb
    return difference + saturated + trials + _or_tree_lookups(shape.nb + 1)


def _least_lookups(s: int, priority_bits: int) -> int:
    return priority_bits * (2 * s + _or_tree_lookups(s))


def pbs_estimate(shape: SelectionShape) -> int:
    """Bootstraps of one selection, counted from the circuit's structure (an upper bound on
    concrete's count: ``tests/crypto/test_selection.py`` compares it with the compile statistics).
    The session's fhe_delta uses the compiled count itself; this count is for plans made
    before anything is compiled (``feddpsyn params``, the demo's estimate)."""
    s = shape.candidates
    return (_maximum_lookups(s, shape.quantised_bits) + s * _acceptance_lookups(shape)
            + _least_lookups(s, shape.priority_bits))


def batched_pbs_estimate(shape: SelectionShape, layout: BatchLayout) -> dict[str, int]:
    """Bootstraps of each batched function call (structural upper bounds, as
    :func:`pbs_estimate`), keyed by stage: ``maximum`` (a batch), ``combine_maximum`` (the
    batches' maxima), ``pick`` (a batch), ``least`` (the batches' summaries), ``mask``
    (a batch); ``round``: one selection, every call."""
    n, count, width = layout.size, layout.count, shape.quantised_bits
    parts = {"maximum": _maximum_lookups(n, width, last_alive=False),
             "combine_maximum": _maximum_lookups(count, width, last_alive=False),
             "pick": (n * _acceptance_lookups(shape) + _least_lookups(n, shape.priority_bits)
                      + _or_tree_lookups(n)),
             "least": _least_lookups(count, shape.priority_bits),
             "mask": n}
    parts["round"] = (count * (parts["maximum"] + parts["pick"] + parts["mask"])
                      + parts["combine_maximum"] + parts["least"])
    return parts
