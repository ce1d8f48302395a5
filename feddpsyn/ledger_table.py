"""Where a session's privacy budget went, as a table a person reads (``session status``).

Guarantee: the table is computed from the key server's own ledger and public plan only,
with exact rationals for rho (sums, remainders) and the same accounting as the ledger's
``epsilon_spent`` (``params.privacy_record.epsilon_after``: the PLD of the charged
mechanisms in a calibrated session, else the zCDP conversion) at the same delta (the
session's conversion delta: the requested delta minus its reserved failure terms), so its
last running total is that number. Entries still to come (planned releases and selection
steps not yet charged) are listed after the charged ones, so "remaining" shows what the
plan leaves unspent.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from feddpsyn.common import wire
from feddpsyn.dp.accounting import rho_to_eps
from feddpsyn.params.privacy_record import epsilon_after
from feddpsyn.params.modes import SelectionMode
from datetime import UTC

__all__ = ["LedgerRow", "ledger_rows", "format_ledger"]


@dataclass(frozen=True)
class LedgerRow:
    what: str
    rho: Fraction
    total: Fraction  # running total after this entry (charged rows only)
    remaining: Fraction
    epsilon_total: float  # the running total in eps at the session's delta
    charged: bool


def _describe(name: str, public: wire.SessionPublic, done: bool) -> str:
    marginals = {r.name: len(r.marginals) for r in public.releases}
    if name in ("one_way", "two_way"):
        count = marginals.get(name, 0)
        which = (f"{count}" if count or public.selection is None else "the selected pairs")
        return (f"{name[:3].replace('one', '1').replace('two', '2')}-way marginals "
                f"{'released' if done else 'to release'} ({which})")
    if name.startswith("select-") and name[7:].isdigit():
        rounds = public.selection.rounds if public.selection is not None else "?"
        return (f"pair selection round {int(name[7:]) + 1} of {rounds} "
                f"{'decided' if done else 'to decide'} (em)")
    if name == "selection":
        return (f"pairs {'chosen' if done else 'to choose'} from noisy dependency scores "
                "(noisy-greedy)")
    return name


def _planned(public: wire.SessionPublic, charged: set[str]) -> list[tuple[str, Fraction]]:
    """(name, rho) of the plan's steps that have no ledger entry yet, in protocol order."""
    pending = []
    steps = [(r.name, Fraction(r.rho)) for r in public.releases]
    selection = public.selection
    if (selection is not None and selection.mode == SelectionMode.EM
            and selection.rho_round is not None):
        rounds = [(f"select-{i}", Fraction(selection.rho_round))
                  for i in range(selection.rounds)]
        steps = steps[:1] + rounds + steps[1:]
    elif (selection is not None and selection.mode == SelectionMode.NOISY_GREEDY
          and selection.rho):
        steps = steps[:1] + [("selection", Fraction(selection.rho))] + steps[1:]
    for name, rho in steps:
        if name not in charged:
            pending.append((name, rho))
    return pending


def ledger_rows(ledger: wire.LedgerView, public: wire.SessionPublic) -> list[LedgerRow]:
    budget = Fraction(ledger.rho_total)
    rows, total, charged = [], Fraction(0), []
    for entry in ledger.entries:
        total += Fraction(entry.rho)
        charged.append((entry.release, Fraction(entry.rho)))
        rows.append(LedgerRow(_describe(entry.release, public, True), Fraction(entry.rho), total,
                              budget - total, epsilon_after(public, charged), True))
    planned_total = total
    for name, rho in _planned(public, {e.release for e in ledger.entries}):
        planned_total += rho
        charged.append((name, rho))
        rows.append(LedgerRow(_describe(name, public, False), rho, planned_total,
                              budget - planned_total, epsilon_after(public, charged), False))
    return rows


def _budget_epsilon(public: wire.SessionPublic) -> float:
    """The whole budget's eps: the calibrated plan's accounted PLD figure, else the zCDP
    conversion of rho_total."""
    record = public.privacy
    if record is not None and record.epsilon_accounted is not None:
        return record.epsilon_accounted
    return rho_to_eps(Fraction(public.rho_total), public.conversion_delta())


def _utc(moment: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(moment, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def format_ledger(ledger: wire.LedgerView, public: wire.SessionPublic,
                  status: wire.SessionStatus) -> str:
    """The status line, the budget, and one line per ledger entry (then the planned ones)."""
    budget = Fraction(ledger.rho_total)
    delta = public.conversion_delta()
    reserved = (f" (delta {public.delta:g} requested, {public.delta - delta:.3g} of it "
                "reserved for the selection's failure events)" if delta != public.delta else "")
    offline = getattr(status, "offline", None)
    absent = getattr(status, "clients_absent", [])
    deadline = getattr(status, "upload_deadline", None)
    lines = [f"session {status.session_id}: {status.state}; owners uploaded "
             f"{len(status.clients_uploaded)} of "
             f"{len(status.clients_uploaded) + len(status.clients_missing) + len(absent)}"
             + (f" (missing: {', '.join(status.clients_missing)})"
                if status.clients_missing else "")
             + (f"; left out: {', '.join(absent)}" if absent else "")
             + (f"; uploads close at {_utc(deadline)} with at least {status.quorum} owners"
                if deadline is not None and status.clients_missing else "")
             + (f"; {status.detail}" if status.detail else "")
             + (f"; key server's offline job: {offline.text()}" if offline is not None
                else ""),
             f"budget: rho {float(budget):.6g} (zCDP) = eps {_budget_epsilon(public):.4g}"
             f" at delta {delta:.6g}{reserved}",
             f"spent: rho {float(Fraction(ledger.rho_spent)):.6g} = eps "
             f"{ledger.epsilon_spent:.4f}", ""]
    header = ("#", "released or decided", "rho", "total rho", "remaining rho",
              f"eps so far (delta {delta:.6g})")
    body = []
    for i, row in enumerate(ledger_rows(ledger, public), start=1):
        body.append((str(i) if row.charged else "-",
                     row.what if row.charged else f"planned: {row.what}",
                     f"{float(row.rho):.6g}", f"{float(row.total):.6g}",
                     f"{float(row.remaining):.6g}", f"{row.epsilon_total:.4f}"))
    if not body:
        body.append(("-", "nothing charged yet", "", "", "", ""))
    widths = [max(len(r[k]) for r in [header, *body]) for k in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        parts = [cells[0].rjust(widths[0]), cells[1].ljust(widths[1])]
        parts += [c.rjust(w) for c, w in zip(cells[2:], widths[2:])]
        return "  ".join(parts).rstrip()

    lines.append(line(header))
    lines.append("  ".join("-" * w for w in widths))
    lines.extend(line(r) for r in body)
    return "\n".join(lines)
