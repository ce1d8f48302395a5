"""Re-account a published privacy record (``feddpsyn audit``): the session's eps at the
record's delta less its reserved terms, by Google's dp-accounting on the record's
mechanisms (``dp.pld_accounting``, pessimistic), on the grid the plan used, and what each
mechanism alone would cost at the same delta.

The composed eps is the record's claim; the per-mechanism eps are a reading aid (they do not
add up to it: composition of PLDs is tighter than a sum), shown with each one's share of
their sum so a reader sees where the budget went.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from feddpsyn.common import wire
from feddpsyn.dp.lifetime import record_mechanisms
from feddpsyn.dp.pld_accounting import epsilon_of, grid_for

__all__ = ["Audit", "audit_record", "record_of"]


@dataclass(frozen=True)
class Audit:
    epsilon: float  # the mechanisms composed, at delta - delta_reserved
    delta: float
    delta_reserved: float
    epsilon_asked: float
    epsilon_accounted: float | None  # what the record states
    run_time: list[str]
    mechanisms: list[tuple[str, str, float]]  # (name, noise, eps alone at the same delta)


def record_of(document: dict[str, Any]) -> wire.PrivacyRecord:
    """The privacy record in a published JSON document: a demo's report.json or a session's
    public record (their ``privacy``), or a bare record."""
    raw = document.get("privacy", document) if isinstance(document, dict) else None
    if not isinstance(raw, dict) or "mechanisms" not in raw:
        raise ValueError("no privacy record here: give a report.json, a session's public "
                         "record (GET /sessions/ID) or a privacy record")
    return wire.PrivacyRecord.model_validate(raw)


def audit_record(record: wire.PrivacyRecord) -> Audit:
    """The record re-accounted (module docstring)."""
    if record.accounting != "pld" or not record.mechanisms:
        raise ValueError("this record is accounted 'rdp' (a plan made before the PLD "
                         "calibration): its guarantee is the plan's Renyi bound, and its "
                         "mechanisms do not list every noise, so a PLD audit would not bound it")
    delta = record.delta - record.delta_reserved
    if delta <= 0:
        raise ValueError("the record's reserved terms leave no delta for its mechanisms")
    grid = grid_for(record.epsilon)
    mechanisms = record_mechanisms(record)
    alone: list[tuple[str, str, float]] = [(m.name, str(wire_m.noise), epsilon_of([m], delta, grid))
             for m, wire_m in zip(mechanisms, record.mechanisms, strict=True)]
    return Audit(epsilon_of(mechanisms, delta, grid), record.delta, record.delta_reserved,
                 record.epsilon, record.epsilon_accounted, list(record.run_time), alone)
