"""Primitive 3 by candidate batches: one round of the hidden-order permute-and-flip
(``crypto.tfhe_permute_and_flip``) cut into calls that run in parallel, so that a round
scales with cores (``crypto.private_selection`` compiles these as functions of the same
module, ``computeserver.selection.batched_select`` schedules them).

The S positions are cut into B batches of n (:class:`BatchLayout`; the last ``B n - S``
positions are padding, inactive in clear, any candidate's ciphertext), and the round is five
steps of calls, every intermediate encrypted:

1. per batch, the maximum of its scores (:func:`batch_maximum_core`, the digit loop of the
   single call's step 1 over n candidates), a digit vector;
2. the maximum of the B maxima (the same function over B inputs): max over batches of the
   batch maxima is the global maximum, so A_r below is A_r of the single call;
3. per batch (:func:`batch_pick_core`), the single call's steps 2-4 on its positions against
   that maximum: acceptances from the same trials on the same R, the batch's accepted
   position of least priority as a one-hot (all 0 when none accepted), and a summary:
   whether any position accepted and, per priority bit, whether the least accepted priority
   has a 0 there (the OR the step-4 loop computes anyway);
4. over the B summaries (:func:`batch_least_core`), step 4's loop with "accepted" = "the
   batch accepted something" and the batch's least priority as its priority: the batch
   holding the least accepted priority of all, one-hot over batches;
5. per batch (:func:`batch_mask_core`), its one-hot AND its batch's choice.

**Guarantee: the output and the views are the single call's.** The least accepted priority
over all positions is the least of the batches' least accepted priorities, and priorities are
distinct, so the output is exactly the single call's one-hot (:func:`batched_select_plaintext`
models every step; ``tests/crypto/test_selection_batches.py`` decrypts each step against it and the
output against the single call and ``select_plaintext``). The key server encrypts the same
shares (R^KS and priorities, now per batch, the padding's chosen data-independently;
``crypto.selection_randomness.batch_randomness``) and decrypts only the S final outputs,
which all come from one output of one function (one encoding, as the single call's), in
candidate order; the batch maxima, summaries and choices stay encrypted at the compute
server, which holds no secret key, and its clear inputs (order, R^CS, active flags, the
public layout) are those of the single call. So each server's view is the single call's view
plus ciphertexts that are computationally hidden, and the enumeration of
``tests/crypto/test_selection_views.py`` covers both forms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from concrete import fhe

from feddpsyn.crypto._concrete import lookup
from feddpsyn.crypto.tfhe_permute_and_flip import (
    AND_TABLE,
    SelectionShape,
    accepted_plaintext,
    encrypted_acceptances,
    encrypted_maximum,
    least_priority,
    or_elements,
    priority_values,
    quantised_scores,
)

__all__ = ["BatchLayout", "batch_layout", "BatchedSelection", "batched_select_plaintext",
           "batch_maximum_core", "batch_pick_core", "batch_least_core", "batch_mask_core"]

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class BatchLayout:
    """One round's positions cut into ``count`` batches of ``size`` (module docstring):
    positions b*size .. (b+1)*size - 1 form batch b; the ``positions - candidates`` last
    positions are padding, always inactive."""

    candidates: int
    size: int

    def __post_init__(self) -> None:
        if self.size < 2 or self.count < 2:
            raise ValueError("candidate batches: two or more batches of two or more positions")

    @property
    def count(self) -> int:
        return -(-self.candidates // self.size)

    @property
    def positions(self) -> int:
        return self.count * self.size

    def batch(self, b: int) -> slice:
        return slice(b * self.size, (b + 1) * self.size)


def batch_layout(candidates: int, target: int) -> BatchLayout | None:
    """Batches of at most ``target`` candidates, as even as one size allows (padding below one
    batch); None when one batch would hold them all (the single ``select`` call).

    >>> batch_layout(105, 8), batch_layout(6, 8)
    (BatchLayout(candidates=105, size=8), None)
    """
    count = -(-candidates // max(2, target))
    if count < 2:
        return None
    return BatchLayout(candidates, -(-candidates // count))


def _score_columns(scores: list[Any], width: int) -> list[Any]:
    """Digit j of every score vector, as one (1, len(scores)) row per digit."""
    return [fhe.array([[score[j] for score in scores]]) for j in range(width)]


def batch_maximum_core(shape: SelectionShape, scores: list[Any], active: Any) -> Any:
    """Stage 1 (and its combine): the maximum of ``scores`` (digit vectors; inactive ones
    count as 0), as a digit vector of the same width, so a maximum can enter this function
    again."""
    q = [column * active for column in _score_columns(scores, shape.score_bits)]
    top = encrypted_maximum(q, active, len(scores), 1)
    return fhe.array([digit[0, 0] for digit in top])


def batch_pick_core(shape: SelectionShape, c: list[int], scores: list[Any], top: Any,
                    active: Any, r_ks: Any, priority: Any, xor_twice: Any,
                    xor_shift: Any) -> tuple[Any, Any]:
    """Stage 2: the batch's acceptances against the global maximum ``top`` and its accepted
    position of least priority. Returns (one-hot over the batch's positions, all 0 when none
    accepted, (1, size); summary: [some position accepted, then per priority bit j whether
    the least accepted priority has a 0 there])."""
    size = len(scores)
    q = [column * active for column in _score_columns(scores, shape.score_bits)]
    accept = encrypted_acceptances(shape, c, q, [top[j] for j in range(shape.score_bits)],
                                   active, r_ks, xor_twice, xor_shift)
    lows = [1 - priority[:, :, j] for j in range(shape.priority_bits)]
    alive, any_low = least_priority(accept, lows, size, 1)
    accepted = or_elements(accept, size)
    return alive, fhe.array([accepted[0]] + [low[0, 0] for low in any_low])


def batch_least_core(shape: SelectionShape, summaries: list[Any]) -> tuple[Any, ...]:
    """Combine of stage 2: the batch holding the least accepted priority, one output per
    batch (exactly one is 1). A batch's least priority has bit j = 0 iff its summary says so;
    a batch without an accepted position never stays alive."""
    count = len(summaries)
    alive = fhe.array([[summary[0] for summary in summaries]])
    lows = [fhe.array([[summary[1 + j] for summary in summaries]])
            for j in range(shape.priority_bits)]
    alive, _ = least_priority(alive, lows, count, 1)
    return tuple(alive[:, b] for b in range(count))


def batch_mask_core(hot: Any, chosen: Any, size: int) -> tuple[Any, ...]:
    """A batch's one-hot kept where its batch was chosen, one output per position: every
    output is the same lookup, so all share one encoding and the compute server may put them
    back in candidate order before the key server decrypts them."""
    return tuple(lookup(AND_TABLE, hot[:, i] + 2 * chosen) for i in range(size))


@dataclass(frozen=True)
class BatchedSelection:
    """Every intermediate of a batched round, in clear (:func:`batched_select_plaintext`)."""

    maxima: list[int]         # per batch, its scores' maximum (stage 1)
    top: int                  # the maximum of the maxima
    hots: list[Array]         # per batch, its one-hot (all 0 when nothing was accepted)
    least: list[int | None]   # per batch, its least accepted priority (None: none accepted)
    chosen: int               # the batch of least accepted priority
    outputs: Array            # the one-hot over every position


def batched_select_plaintext(digits: Array, active: Array, r_ks: Array, r_cs: Array,
                             shape: SelectionShape, c: list[int], priority: Array,
                             layout: BatchLayout) -> BatchedSelection:
    """The batched functions' exact integer model over ``layout.positions`` positions (padding
    included, inactive); its ``outputs`` equal
    :func:`crypto.tfhe_permute_and_flip.select_plaintext`'s on the real positions
    (``tests/crypto/test_selection_batches.py``)."""
    q = quantised_scores(digits, active, shape)
    maxima = [int(q[layout.batch(b)].max()) for b in range(layout.count)]
    top = max(maxima)
    accept = accepted_plaintext(top - q, active, r_ks, r_cs, shape, c)
    priority = priority_values(priority)
    least: list[int | None]  # None: the batch accepted no position
    hots, least = [], []
    for b in range(layout.count):
        part = layout.batch(b)
        hot = np.zeros(layout.size, dtype=np.int64)
        if accept[part].any():
            ranked = np.where(accept[part], priority[part], np.iinfo(np.int64).max)
            hot[int(np.argmin(ranked))] = 1
            least.append(int(ranked.min()))
        else:
            least.append(None)
        hots.append(hot)
    chosen = min((value, b) for b, value in enumerate(least) if value is not None)[1]
    outputs = np.concatenate([hot * int(b == chosen) for b, hot in enumerate(hots)])
    return BatchedSelection(maxima, top, hots, least, chosen, outputs)
