"""Exact discrete Laplace and discrete Gaussian samplers (integer noise for every release).

Implements the samplers of Canonne, Kamath and Steinke, "The Discrete Gaussian for
Differential Privacy" (NeurIPS 2020):

* Algorithm 1 — ``bernoulli_exp(gamma)``: Bernoulli(exp(-gamma)) for rational gamma >= 0,
  using only Bernoulli(rational) draws (a von Neumann style series for gamma in [0, 1] and
  ``floor(gamma)`` independent Bernoulli(exp(-1)) draws for the integer part).
* Algorithm 2 — ``discrete_laplace(scale)``: P[Y = y] proportional to exp(-|y| / scale),
  for a rational ``scale`` = s/t.
* Algorithm 3 — ``discrete_gaussian(sigma2)``: P[Y = y] proportional to
  exp(-y^2 / (2 sigma2)), by rejection from a discrete Laplace with scale floor(sigma)+1.

Design concern: **exactness and failing closed.** All arithmetic is on Python integers
(rationals as numerator and denominator in lowest terms; ``Fraction`` at the interface); the
only randomness is ``secrets.randbelow`` (the operating system's CSPRNG, which raises rather
than return weak bytes). Each rejection loop is bounded: with
the bounds used here the probability of reaching one is below 2^-100, and reaching it raises
``SamplerExhausted`` instead of returning a sample from a different distribution.

Privacy (CKS20, Theorem 4): adding N_Z(0, sigma2) to an integer query of L2 sensitivity
Delta is (Delta^2 / (2 sigma2))-zCDP.

>>> v = discrete_gaussian(Fraction(25))
>>> isinstance(v, int)
True
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["CSPRNG", "ExactSampler", "SamplerExhausted", "bernoulli", "bernoulli_exp", "discrete_laplace",
           "discrete_gaussian", "discrete_gaussian_vector"]

# Each loop below succeeds with probability >= 1/2 (most far more) per iteration, so
# 512 failures in a row happen with probability < 2^-512: reaching this bound is a broken
# random source, not bad luck.
_MAX_ITERATIONS = 512


class SamplerExhausted(RuntimeError):
    """A rejection loop hit its bound; no sample is returned (fail closed)."""


def _as_fraction(x: Fraction | int | str) -> Fraction:
    if isinstance(x, float):
        raise TypeError("exact samplers take Fraction, int or str, never float")
    return Fraction(x)


def _variance_ratio(sigma2: Fraction | int | str) -> tuple[int, int]:
    """sigma2 > 0 as (numerator, denominator) in lowest terms."""
    sigma2 = _as_fraction(sigma2)
    if sigma2 <= 0:
        raise ValueError("sigma2 must be > 0")
    return sigma2.numerator, sigma2.denominator


class ExactSampler:
    """The samplers over one source of uniform integers.

    ``randbelow(n)`` must return a uniform integer in [0, n). Production uses
    ``secrets.randbelow`` (the module-level functions below); tests pass a seeded generator so
    that statistical tests are reproducible.
    """

    def __init__(self, randbelow: Callable[[int], int] = secrets.randbelow):
        self._randbelow = randbelow

    def randbelow(self, n: int) -> int:
        """A uniform integer in [0, n) from this sampler's source."""
        return self._randbelow(n)

    def bernoulli(self, p: Fraction) -> int:
        """One draw of Bernoulli(p) for rational p in [0, 1]."""
        if not 0 <= p <= 1:
            raise ValueError(f"probability {p} outside [0, 1]")
        return int(self._randbelow(p.denominator) < p.numerator)

    def bernoulli_exp(self, gamma: Fraction | int | str) -> int:
        """One draw of Bernoulli(exp(-gamma)), gamma >= 0 rational (CKS20, Algorithm 1)."""
        gamma = _as_fraction(gamma)
        if gamma < 0:
            raise ValueError("gamma must be >= 0")
        return self._bernoulli_exp_ratio(gamma.numerator, gamma.denominator)

    # The loops below work on a rational's (numerator, denominator) in lowest terms rather than
    # on Fraction objects: the same draws from the source in the same order, so the same
    # samples (tests/dp/test_discrete_gaussian_integer_form.py replays the Fraction form), about
    # 3x faster, which matters for the noise pools' millions of draws (dp.noise_pool).
    def _bernoulli_exp_ratio(self, num: int, den: int) -> int:
        whole, rest = divmod(num, den)
        # Bounded by floor(gamma); each round ends the loop with probability 1 - 1/e.
        for _ in range(whole):
            if not self._bernoulli_exp_unit(1, 1):
                return 0
        return self._bernoulli_exp_unit(rest, den if rest else 1)

    def _bernoulli_exp_unit(self, num: int, den: int) -> int:
        # For gamma = num / den in [0, 1]: draw A_k ~ Bernoulli(gamma / k) for k = 1, 2, ...
        # until the first zero; P[first zero at an odd k] = exp(-gamma).
        k = 1
        for _ in range(_MAX_ITERATIONS):
            g = math.gcd(num, den * k)
            if not self._randbelow(den * k // g) < num // g:
                return k % 2
            k += 1
        raise SamplerExhausted("bernoulli_exp did not terminate")

    def discrete_laplace(self, scale: Fraction | int | str) -> int:
        """One draw Y with P[Y = y] proportional to exp(-|y| / scale) (CKS20, Algorithm 2)."""
        scale = _as_fraction(scale)
        if scale <= 0:
            raise ValueError("scale must be > 0")
        # CKS20 Algorithm 2 with parameters (s, t) samples P[y] ~ exp(-|y| s / t), so a scale of
        # numerator/denominator means t = numerator, s = denominator.
        return self._discrete_laplace(scale.denominator, scale.numerator)

    def _discrete_laplace(self, s: int, t: int) -> int:
        for _ in range(_MAX_ITERATIONS):
            u = self._randbelow(t)
            g = math.gcd(u, t)
            if not self._bernoulli_exp_ratio(u // g, t // g):
                continue
            v = 0
            for _ in range(_MAX_ITERATIONS):
                if not self._bernoulli_exp_ratio(1, 1):
                    break
                v += 1
            else:
                raise SamplerExhausted("geometric draw did not terminate")
            x = u + t * v
            y = x // s
            negative = self._randbelow(2)
            if negative and y == 0:
                continue
            return -y if negative else y
        raise SamplerExhausted("discrete_laplace did not terminate")

    def discrete_gaussian(self, sigma2: Fraction | int | str) -> int:
        """One draw Y with P[Y = y] proportional to exp(-y^2 / (2 sigma2)) (CKS20, Algorithm 3)."""
        return self._discrete_gaussian(*_variance_ratio(sigma2))

    def _discrete_gaussian(self, a: int, b: int) -> int:
        # sigma2 = a / b in lowest terms; t = floor(sigma) + 1, the Laplace's integer scale.
        t = math.isqrt(a // b) + 1
        for _ in range(_MAX_ITERATIONS):
            y = self._discrete_laplace(1, t)
            # gamma = (|y| - sigma2 / t)^2 / (2 sigma2) = (|y| b t - a)^2 / (2 a b t^2)
            num, den = (abs(y) * b * t - a) ** 2, 2 * a * b * t * t
            g = math.gcd(num, den)
            if self._bernoulli_exp_ratio(num // g, den // g):
                return y
        raise SamplerExhausted("discrete_gaussian did not terminate")

    def discrete_gaussian_vector(self, sigma2: Fraction | int | str,
                                 size: int) -> np.ndarray[Any, Any]:
        """``size`` independent draws of N_Z(0, sigma2) as an int64 array."""
        a, b = _variance_ratio(sigma2)
        return np.array([self._discrete_gaussian(a, b) for _ in range(size)], dtype=np.int64)


CSPRNG = ExactSampler()
bernoulli = CSPRNG.bernoulli
bernoulli_exp = CSPRNG.bernoulli_exp
discrete_laplace = CSPRNG.discrete_laplace
discrete_gaussian = CSPRNG.discrete_gaussian
discrete_gaussian_vector = CSPRNG.discrete_gaussian_vector
