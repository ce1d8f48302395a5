"""What every benchmark method returns, and the budget convention they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from feddpsyn.dp.accounting import eps_delta_to_rho


@dataclass
class MethodResult:
    records: np.ndarray
    rho_spent: Fraction  # zCDP cost against the strongest adversary the method considers
    rho_budget: Fraction
    bytes_per_client: float = 0.0
    notes: dict = field(default_factory=dict)
    # Empty: the method claims to spend exactly rho_budget (the runner checks it). A method
    # that may legitimately spend less says why here.
    unspent_reason: str = ""


def plan_budget(plan, epsilon: float, delta: float) -> Fraction:
    """The budget of a method that runs a ``params.session_plan.SessionPlan``: a calibrated
    plan's rho_total (its noises' composed PLD spends exactly the eps asked), else
    :func:`budget_rho`."""
    return plan.rho_total if plan.accounting == "pld" else budget_rho(epsilon, delta)


def budget_rho(epsilon: float, delta: float) -> Fraction:
    """Every method gets the same (epsilon, delta), converted to rho the same conservative way."""
    return eps_delta_to_rho(epsilon, delta)
