"""Permute-and-flip (McKenna and Sheldon, NeurIPS 2020), sampled exactly.

The exponential-mechanism family's selection step: with scores q_r (higher is better),
sensitivity Delta and budget eps, visit the candidates in a uniformly random order and accept
candidate r with probability exp(eps (q_r - q_max) / (2 Delta)); the best candidate accepts
with probability 1, so one pass always ends with an output. It is eps-DP (pure), never worse
than the exponential mechanism in expected utility, and needs no normaliser -- which is why
DESIGN.md picks it for the encrypted selection too.

Design concern: **exactness.** Scores are turned into exact rationals (a float is an exact
binary fraction), the acceptance test is ``ExactSampler.bernoulli_exp`` on the rational
gamma = eps (q_max - q_r) / (2 Delta), and the order comes from the same uniform-integer
source (Fisher-Yates). So the output distribution is exactly PF's, not a float
approximation. Plaintext reference for the encrypted selection, and a building block for the
benchmark's selection-based methods.

>>> from feddpsyn.dp.discrete_gaussian import ExactSampler
>>> import random
>>> permute_and_flip([0.0, 5.0, 1.0], Fraction(100), 1, ExactSampler(random.Random(0).randrange))
1
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
from itertools import permutations

from feddpsyn.dp.discrete_gaussian import CSPRNG, ExactSampler
from feddpsyn.dp.shuffle import uniform_order

__all__ = ["permute_and_flip", "pf_probabilities", "pf_probabilities_exact"]


def exact_inputs(scores: Iterable[Fraction | float], epsilon: Fraction | int | str,
                 sensitivity: Fraction | int | str) -> tuple[list[Fraction], Fraction, Fraction]:
    """(exact scores, their maximum, eps / (2 Delta)), refusing floats and empty or
    non-positive inputs: the exponential-mechanism family's shared argument checks."""
    if isinstance(epsilon, float) or isinstance(sensitivity, float):
        raise TypeError("epsilon and sensitivity must be exact (Fraction, int or str)")
    eps, delta = Fraction(epsilon), Fraction(sensitivity)
    if eps <= 0 or delta <= 0:
        raise ValueError("epsilon and sensitivity must be > 0")
    exact = [Fraction(s) for s in scores]
    if not exact:
        raise ValueError("no candidates")
    return exact, max(exact), eps / (2 * delta)


def permute_and_flip(scores: Iterable[Fraction | float], epsilon: Fraction | int | str,
                     sensitivity: Fraction | int | str, sampler: ExactSampler = CSPRNG) -> int:
    """Index of the selected candidate."""
    exact, best, scale = exact_inputs(scores, epsilon, sensitivity)
    for r in uniform_order(len(exact), sampler.randbelow):
        if sampler.bernoulli_exp(scale * (best - exact[r])):
            return r
    raise AssertionError("unreachable: the best candidate always accepts")


def pf_probabilities(scores: Sequence[float], epsilon: float, sensitivity: float) -> list[float]:
    """PF's exact output distribution by enumerating every order (small candidate sets)."""
    import math

    best = max(scores)
    p = [math.exp(epsilon * (s - best) / (2 * sensitivity)) for s in scores]
    n = len(scores)
    if n > 8:
        raise ValueError("enumeration is for at most 8 candidates")
    out = [0.0] * n
    orders = list(permutations(range(n)))
    for order in orders:
        reach = 1.0
        for r in order:
            out[r] += reach * p[r] / len(orders)
            reach *= 1 - p[r]
    return out


def pf_probabilities_exact(accept: list[Fraction]) -> list[Fraction]:
    """PF's output distribution for arbitrary acceptance probabilities, exactly.

    Give every candidate a uniform arrival time x; r is output iff it accepts and every
    candidate arriving earlier rejects, so P(r) = p_r * integral_0^1 prod_{s != r} (1 - p_s x)
    dx: a polynomial integrated term by term in rationals. This is the reference the encrypted
    selection's frequencies are tested against (its weights are fixed-point, not exp).

    >>> pf_probabilities_exact([Fraction(1), Fraction(1, 2)])
    [Fraction(3, 4), Fraction(1, 4)]
    """
    out = []
    for r, p_r in enumerate(accept):
        poly = [Fraction(1)]
        for s, p_s in enumerate(accept):
            if s != r:
                poly = [a - p_s * b for a, b in zip(poly + [Fraction(0)], [Fraction(0)] + poly)]
        out.append(p_r * sum(c / (k + 1) for k, c in enumerate(poly)))
    return out
