"""A uniformly random order of ``range(n)`` from a cryptographic source: the one shuffle.

Permute-and-flip visits its candidates in this order (``dp.permute_and_flip``), the compute
server places the encrypted candidates in it and the key server's priorities are one
(``crypto.tfhe_permute_and_flip``). Design concern: **uniform or nothing.** Fisher-Yates is
uniform only if every swap index is; a source of raw bits gives one by rejection, and a source
that keeps failing the bound raises instead of returning a biased order.

>>> import random
>>> sorted(uniform_order(5, random.Random(0).randrange))
[0, 1, 2, 3, 4]
>>> uniform_order(4, randbelow_from_bits(random.Random(1).getrandbits)) != list(range(4))
True
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

__all__ = ["uniform_order", "randbelow_from_bits"]

# Each draw of a bit-width w below a bound b > 2^(w-1) succeeds with probability > 1/2, so
# 128 failures in a row (probability < 2^-128) mean a broken source, not bad luck.
_MAX_REJECTIONS = 128


def randbelow_from_bits(randbits: Callable[[int], int]) -> Callable[[int], int]:
    """A uniform ``randbelow(bound)`` over a source of uniform bits, by rejection."""

    def randbelow(bound: int) -> int:
        width = bound.bit_length()
        for _ in range(_MAX_REJECTIONS):
            value = randbits(width)
            if value < bound:
                return value
        raise RuntimeError("random source failed to give a value below the bound")

    return randbelow


def uniform_order(n: int, randbelow: Callable[[int], int] = secrets.randbelow) -> list[int]:
    """Fisher-Yates over ``range(n)`` with ``randbelow``'s uniform integers."""
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = randbelow(i + 1)
        order[i], order[j] = order[j], order[i]
    return order
