"""Each server's randomness for a round of Primitive 3 (``crypto.tfhe_permute_and_flip``):
the shares of the Bernoulli trials' bits, the key server's priorities and the compute
server's order.

Guarantee: every draw comes from a cryptographic source (``secrets`` by default) and is
exactly uniform: the trials' bits R = R^KS XOR R^CS are uniform given either share, and the
priorities and the order are uniform permutations (``dp.shuffle``: Fisher-Yates on exact
uniform integers, failing closed rather than returning a biased order). So each server's view
holds its own data-independent randomness only (``crypto.tfhe_permute_and_flip``, "Whose
randomness, and each server's view").
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from feddpsyn.dp.shuffle import randbelow_from_bits, uniform_order

if TYPE_CHECKING:
    from feddpsyn.crypto.selection_batches import BatchLayout
    from feddpsyn.crypto.tfhe_permute_and_flip import SelectionShape

__all__ = ["random_share", "random_priorities", "batch_randomness", "secure_order"]

Array = np.ndarray[Any, Any]


def random_share(shape: SelectionShape, randbits: Callable[[int], int] = secrets.randbits) -> Array:
    """One server's share of the trials' random bits, (batch, S, sum kappa'), from a
    cryptographic source (``secrets`` by default)."""
    count = shape.batch * shape.candidates * shape.random_bits
    word = randbits(count)
    bits = np.array([(word >> i) & 1 for i in range(count)], dtype=np.int64)
    return bits.reshape(shape.batch, shape.candidates, shape.random_bits)


def random_priorities(shape: SelectionShape,
                      randbits: Callable[[int], int] = secrets.randbits) -> Array:
    """The key server's share of the hidden order: per selection a uniform permutation of
    0..S-1 (one priority per position), as bits, (batch, S, priority_bits), least
    significant first."""
    out = np.zeros((shape.batch, shape.candidates, shape.priority_bits), dtype=np.int64)
    for b in range(shape.batch):
        ranks = np.array(secure_order(shape.candidates, randbits), dtype=np.int64)
        for i in range(shape.priority_bits):
            out[b, :, i] = (ranks >> i) & 1
    return out


def batch_randomness(shape: SelectionShape, layout: BatchLayout,
                     randbits: Callable[[int], int] = secrets.randbits) -> tuple[Array, Array]:
    """The key server's shares for a batched round, over every position of ``layout``: trial
    bits (1, positions, sum kappa') and priorities (1, positions, priority_bits), a uniform
    permutation of 0..S-1 on the real positions and 0 on the padding (never accepted, so
    never compared)."""
    r_ks = random_share(replace(shape, candidates=layout.positions, batch=1), randbits)
    priority = np.zeros((1, layout.positions, shape.priority_bits), dtype=np.int64)
    priority[:, :shape.candidates] = random_priorities(replace(shape, batch=1), randbits)
    return r_ks, priority


def secure_order(n: int, randbits: Callable[[int], int] = secrets.randbits) -> list[int]:
    """A uniformly random order of range(n) from a source of random bits; fails closed."""
    return uniform_order(n, randbelow_from_bits(randbits))
