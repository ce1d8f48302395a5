"""Noise drawn before any data: each server's discrete Gaussian draws for every release and
noisy score its session can make, fixed when the session is set up.

Design concern: **the time a server takes never depends on a noise value it adds to data.**
The exact sampler (``dp.discrete_gaussian``) is a rejection sampler: its run time depends
on the values it draws. Drawn while the peer waits for a release, that time is a side channel
on the noise. Drawn here, when a server first learns the session's public plan (before any
client uploads), the run time depends on nothing but the plan; at release time the server
only reads stored values.

A release whose marginals are known only at run time draws for every cell it may touch: the
em selection's 2-way release takes the chosen pairs' cells from a draw over every pair's
cells; noisy-greedy's release noise depends on how many pairs the greedy rule keeps, so there
is one draw over every pair's cells per possible number of pairs. Unused draws are never
added to anything.

The pool is a private file of the server that drew it (the caller writes it with mode 0600):
one server's noise protects the release from the other server.

>>> import random
>>> from fractions import Fraction
>>> from feddpsyn.dp.discrete_gaussian import ExactSampler
>>> blob = draw_pool([NoiseDraw("one_way", Fraction(4), np.array([0, 2]), 3)],
...                  ExactSampler(random.Random(1).randrange))
>>> noise = pool_noise(blob, "one_way", np.array([2]))
>>> noise.shape, int(pool_noise(blob, "one_way", np.array([1]))[0])
((1,), 0)
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from feddpsyn.dp.discrete_gaussian import CSPRNG, ExactSampler

__all__ = ["NoiseDraw", "draw_pool", "pool_noise"]

Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class NoiseDraw:
    """N_Z(0, sigma2) at ``positions`` of a vector of ``size`` (zero elsewhere)."""

    label: str
    sigma2: Fraction
    positions: Array
    size: int


def draw_pool(draws: list[NoiseDraw], sampler: ExactSampler = CSPRNG) -> bytes:
    """Every draw, from a cryptographic source (failing closed as the sampler does)."""
    arrays = {}
    for draw in draws:
        vector = np.zeros(draw.size, dtype=np.int64)
        if len(draw.positions):
            vector[draw.positions] = sampler.discrete_gaussian_vector(draw.sigma2,
                                                                      len(draw.positions))
        arrays[draw.label] = vector
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def pool_noise(blob: bytes, label: str, positions: Array) -> Array:
    """The stored noise of ``label`` at ``positions``; a label the plan never drew is an
    error (fail closed: no release goes out with noise drawn at release time)."""
    with np.load(io.BytesIO(blob)) as pool:
        if label not in pool.files:
            raise KeyError(f"no noise was drawn for {label!r}")
        noise: Array = pool[label][np.asarray(positions, dtype=np.int64)]
        return noise
