"""The exponential mechanism (McSherry and Talwar 2007), sampled exactly.

With scores q_r (higher is better), sensitivity Delta and budget eps, output r with probability
proportional to exp(eps q_r / (2 Delta)). It is eps-DP, and -- what AIM (McKenna et al. 2022)
charges for it -- (eps^2 / 8)-zCDP (bounded range, Cesar and Rogers 2021).

Design concern: **exactness.** Scores are exact rationals (a float is an exact binary fraction;
callers round public parts of a score however they like, which is post-processing). Sampling
is by rejection: draw a candidate r uniformly (``ExactSampler.randbelow``) and accept it with
probability exp(-eps (q_max - q_r) / (2 Delta)) (``ExactSampler.bernoulli_exp`` on that exact
rational). An accepted r has probability proportional to exp(eps q_r / (2 Delta)), exactly
the mechanism's distribution; no float softmax, no normaliser. Each attempt accepts with
probability at least 1/n (the best candidate accepts surely), so the loop is bounded at
``64 n + 512`` attempts: reaching it (probability below e^-64 ~ 2^-92) raises
``SamplerExhausted`` rather than return anything (fail closed).

>>> from feddpsyn.dp.discrete_gaussian import ExactSampler
>>> import random
>>> exponential_mechanism([0, 50, 1], Fraction(1), 1, ExactSampler(random.Random(0).randrange))
1
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from fractions import Fraction

from feddpsyn.dp.discrete_gaussian import CSPRNG, ExactSampler, SamplerExhausted
from feddpsyn.dp.permute_and_flip import exact_inputs

__all__ = ["exponential_mechanism", "em_probabilities", "em_rho"]


def exponential_mechanism(scores: Iterable[Fraction | float], epsilon: Fraction | int | str,
                          sensitivity: Fraction | int | str,
                          sampler: ExactSampler = CSPRNG) -> int:
    """Index of the selected candidate (exact sampling, see the module docstring)."""
    exact, best, scale = exact_inputs(scores, epsilon, sensitivity)
    n = len(exact)
    for _ in range(64 * n + 512):
        r = sampler.randbelow(n)
        if sampler.bernoulli_exp(scale * (best - exact[r])):
            return r
    raise SamplerExhausted("exponential mechanism: no candidate accepted")


def em_rho(epsilon: Fraction) -> Fraction:
    """zCDP charge of one exponential mechanism with parameter eps: eps^2 / 8 (exact)."""
    return Fraction(epsilon) ** 2 / 8


def em_probabilities(scores: Sequence[float], epsilon: float, sensitivity: float) -> list[float]:
    """The ideal output distribution (softmax of eps q / (2 Delta)), for tests and plots."""
    best = max(scores)
    w = [math.exp(epsilon * (s - best) / (2 * sensitivity)) for s in scores]
    total = sum(w)
    return [x / total for x in w]
