"""What every benchmark method returns, and the budget convention they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from dp.accounting import eps_delta_to_rho


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


def budget_rho(epsilon: float, delta: float) -> Fraction:
    """Every method gets the same (epsilon, delta), converted to rho the same conservative way."""
    return eps_delta_to_rho(epsilon, delta)
