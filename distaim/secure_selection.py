"""The exponential mechanism inside MPC, on secret integer scores; only the index is opened.

AIM selects the worst-approximated marginal with the exponential mechanism (McKenna et al.
2022; FLAIM paper, Algorithm 2 line 13), and DistAIM runs it over secret shares (Algorithm 3,
line 6, after Pereira et al. 2022, Protocol 2). Ideal mechanism here: with integer scores S_q
of sensitivity Delta (every neighbouring pair of data sets moves each score by at most
Delta), output q with probability proportional to exp(eps S_q / (2 Delta)). It is eps-DP and,
being a bounded-range mechanism, eps^2/8-zCDP (Cesar and Rogers 2021), as AIM accounts it.
Any public per-candidate offset and any rounding of the *public* model answers keep Delta, so
the score AIM uses can be made integral without changing the claim.

Sampler (our construction, exact up to a counted fixed-point error):

1. D_q = max_r S_r - S_q >= 0 (secure maximum), clamped at a public cap beyond which the
   weight is below 2^-(f+2), bit-decomposed (r bits) and moved to a 128-bit secure type;
2. weight W_q = 2^f * prod_i c_i^{d_i} with public c_i = exp(-lambda 2^i), lambda =
   eps / (2 Delta), rounded to f = 56 fractional bits from an 80-digit decimal evaluation; the
   product is a tree of secure multiplications, each truncated (MPyC's probabilistic rounding,
   error < 1 unit). The maximum's weight is exactly 2^f (all its factors are 2^f and
   truncating an exact multiple is exact), so sum W >= 2^f;
3. a secret uniform U in [0, 2^b), b = 60: the output is the number of cumulative sums C_q
   with C_q 2^b <= U * C_N (exact secure comparisons), i.e. inverse-CDF sampling with
   resolution 2^-b.

Precision and privacy claim: each weight is within xi = (2 r + 2) 2^-f of
2^f exp(-lambda D_q) (relative to the maximum's), so the realised distribution is within
N * xi of the ideal one in total variation, and step 3 adds at most N 2^-b:
``selection_tv_bound`` = N (xi + 2^-b), about 1e-13 for N = 120. Over a run, the sum of these
is an extra delta, (1 + e^eps) times the sum, on top of the zCDP conversion.

>>> plan = SelectionPlan.build(Fraction(1, 10), sensitivity=4, candidates=10)
>>> plan.tv_bound < Fraction(1, 10**12)
True
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

__all__ = ["SelectionPlan", "secure_exponential_mechanism", "FRAC_BITS", "UNIFORM_BITS"]

FRAC_BITS = 56      # f
UNIFORM_BITS = 60   # b
_PREC = 80


@dataclass(frozen=True)
class SelectionPlan:
    epsilon: Fraction
    sensitivity: int
    candidates: int
    cap: int                     # D is clamped at cap (weight below 2^-(f+2) beyond)
    bits: int                    # r: bits of the clamped D
    factors: tuple[int, ...]     # round(2^f exp(-lambda 2^i)), i < r
    tv_bound: Fraction

    @classmethod
    def build(cls, epsilon: Fraction | float, sensitivity: int, candidates: int) -> \
            SelectionPlan:
        epsilon = Fraction(epsilon)
        if epsilon <= 0 or sensitivity <= 0 or not 1 <= candidates < 512:
            raise ValueError("need epsilon > 0, sensitivity > 0, 1 <= candidates < 512")
        f = FRAC_BITS
        with localcontext() as ctx:
            ctx.prec = _PREC
            lam = Decimal(epsilon.numerator) / Decimal(epsilon.denominator) / (2 * sensitivity)
            # smallest D with lambda D >= (f + 2) ln 2
            cap = int(((f + 2) * Decimal(2).ln() / lam).to_integral_value(rounding="ROUND_CEILING"))
            bits = max(1, cap.bit_length())
            factors = tuple(int(((-lam * (1 << i)).exp() * (1 << f)).to_integral_value())
                            for i in range(bits))
        xi = Fraction(2 * bits + 2, 1 << f)
        tv = candidates * (xi + Fraction(1, 1 << UNIFORM_BITS))
        return cls(epsilon, sensitivity, candidates, cap, bits, factors, tv)


def secure_exponential_mechanism(rt, scores, plan: SelectionPlan, em_secint, draws: int = 1):
    """Secret index drawn by the exponential mechanism from secret integer ``scores``.

    ``scores``: a secure integer array (the count type) of length plan.candidates, each of at
    most 62 bits. Returns a secure integer (in ``em_secint``) to be opened by the caller;
    with ``draws`` > 1, that many draws from the same weights (for statistical tests).
    """
    n = plan.candidates
    f, b, r = FRAC_BITS, UNIFORM_BITS, plan.bits
    if len(scores) != n:
        raise ValueError("one score per candidate")
    top = rt.np_amax(scores)
    gap = top - scores                                   # D_q >= 0
    over = 1 - rt.np_sgn(gap - plan.cap, l=63, LT=True)  # [D_q >= cap]
    gap = gap + over * (plan.cap - gap)                  # min(D_q, cap)
    gap = rt.convert(list(gap), em_secint)
    gap = rt.np_fromlist(gap)
    dbits = rt.np_to_bits(gap, l=r)                      # shape (n, r)
    one = 1 << f
    factors = np.array([c - one for c in plan.factors], dtype=object)
    level = dbits * factors + one                        # 2^f + d_i (c_i - 2^f)
    while level.shape[1] > 1:                            # pairwise product tree
        width = level.shape[1]
        half = width // 2
        prod = level[:, 0:half] * level[:, half:2 * half]
        prod = rt.np_trunc(prod, f=f, l=2 * f + 2)
        level = prod if width % 2 == 0 else rt.np_concatenate((prod, level[:, 2 * half:]),
                                                              axis=1)
    weights = level[:, 0]
    cumulative = rt.np_cumsum(weights)
    total = cumulative[n - 1]
    if n == 1:
        return em_secint(0) if draws == 1 else em_secint.array(np.zeros(draws, dtype=int))
    ubits = rt.np_random_bits(em_secint, draws * b).reshape(draws, b)
    uniform = ubits @ np.array([1 << i for i in range(b)], dtype=object)
    target = (uniform * total).reshape(draws, 1)
    # [C_q 2^b <= U * total] for q < n - 1; the index is how many cumulative sums lie below
    below = 1 - rt.np_sgn(target - (cumulative[:n - 1] * (1 << b)).reshape(1, n - 1),
                          l=b + f + n.bit_length() + 2, LT=True)
    index = rt.np_sum(below, axis=1)
    return index[0] if draws == 1 else index
