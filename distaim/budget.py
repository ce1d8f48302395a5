"""A DistAIM session's budget: its rho, and the part of delta kept for the in-MPC samplers.

The bottom of the package's plan modules: ``distaim.plan`` (the public plan) and
``distaim.reserve`` (its delta reserve, checked against the plan) both read it.
"""

from __future__ import annotations

from fractions import Fraction

from feddpsyn.dp.accounting import eps_delta_to_rho

__all__ = ["delta_reserve", "session_rho"]


def delta_reserve(delta: float) -> Fraction:
    """The part of delta kept for the in-MPC samplers' finite-precision deviation."""
    return Fraction(delta) / 1000


def session_rho(epsilon: float, delta: float) -> Fraction:
    """A DistAIM session's rho: (epsilon, delta) converted at the delta left once the
    samplers' reserve is set aside (``fedbench.methods.base.budget_rho`` converts the whole
    delta, for methods without such a reserve)."""
    return eps_delta_to_rho(epsilon, Fraction(delta) - delta_reserve(delta))
