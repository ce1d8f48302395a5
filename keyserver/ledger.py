"""The key server's privacy ledger: every rho it spends, charged before what it pays for.

Design concerns:

* **Charged before it is decrypted, at most once.** A charge names what it pays for (a
  release, a selection round, the noisy-greedy selection) and binds the SHA-256 digest of
  the ciphertexts it pays for; it is written in the same SQLite transaction that checks the
  remaining budget, so concurrent charges never overspend. A retry with the same digest is
  free; another digest for a charged name is refused (409): decrypting it would be a second
  noisy view for one charge.
* **Exact.** Amounts are rationals (``Fraction`` as text) and are summed exactly; a charge
  beyond the session's rho_total is refused (403) and nothing is written.
* **Durable.** The ledger is a table of the key server's database: it survives restarts,
  and the release document and ``GET /sessions/{id}/ledger`` read it back.
"""

from __future__ import annotations

import sqlite3
import time
from fractions import Fraction

from feddpsyn.common import wire
from feddpsyn.common.serving import Database, ServiceError
from feddpsyn.params.privacy_record import epsilon_after
from feddpsyn.params.session_plan import SessionPlan

__all__ = ["LEDGER_SQL", "PrivacyLedger"]

LEDGER_SQL = """
CREATE TABLE IF NOT EXISTS ledger (
    session_id TEXT NOT NULL, release TEXT NOT NULL, rho TEXT NOT NULL,
    request_digest TEXT NOT NULL, charged_at REAL NOT NULL, manifest_json TEXT NOT NULL,
    PRIMARY KEY (session_id, release));
"""


class PrivacyLedger:
    """The ledger table of one key server's database."""

    def __init__(self, db: Database):
        self.db = db

    @staticmethod
    def charged_for(conn: sqlite3.Connection, session_id: str, name: str, digest: str) -> bool:
        """True if ``name`` is already charged for this digest; 409 if for another."""
        charged = conn.execute("SELECT request_digest FROM ledger WHERE session_id = ? AND "
                               "release = ?", (session_id, name)).fetchone()
        if charged is None:
            return False
        if charged["request_digest"] != digest:
            raise ServiceError(409, f"release {name!r} was already charged for other "
                                    "ciphertexts; a second decryption would spend budget twice")
        return True

    @staticmethod
    def check_budget(conn: sqlite3.Connection, plan: SessionPlan, session_id: str, name: str,
                     rho: Fraction) -> None:
        """403 unless ``rho`` fits what the session has left."""
        spent = sum((Fraction(r["rho"]) for r in conn.execute(
            "SELECT rho FROM ledger WHERE session_id = ?", (session_id,))), Fraction(0))
        if spent + rho > plan.rho_total:
            raise ServiceError(403, f"budget exceeded: release {name!r} needs rho="
                                    f"{float(rho):.6g}, remaining "
                                    f"{float(plan.rho_total - spent):.6g}")

    def charge(self, conn: sqlite3.Connection, plan: SessionPlan, session_id: str, name: str,
               rho: Fraction, digest: str, manifest_json: str = "{}") -> None:
        """Charge ``rho`` for ``name`` bound to ``digest``, inside the caller's transaction
        (module docstring); nothing happens on a retry with the same digest."""
        if self.charged_for(conn, session_id, name, digest):
            return
        self.check_budget(conn, plan, session_id, name, rho)
        conn.execute("INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?)",
                     (session_id, name, str(rho), digest, time.time(), manifest_json))

    def has_entries(self, conn: sqlite3.Connection, session_id: str) -> bool:
        return conn.execute("SELECT 1 FROM ledger WHERE session_id = ?",
                            (session_id,)).fetchone() is not None

    def view(self, session_id: str, public: wire.SessionPublic) -> wire.LedgerView:
        """Every charge in order, what was spent and its epsilon at the conversion delta
        (the PLD of the charged mechanisms in a calibrated session);
        from the session's public record alone (readable for a session whose plan this
        server refuses: ``keyserver.sessions``)."""
        with self.db.connect() as conn:
            rows = conn.execute("SELECT release, rho, charged_at FROM ledger WHERE "
                                "session_id = ? ORDER BY charged_at", (session_id,)).fetchall()
        spent = sum((Fraction(r["rho"]) for r in rows), Fraction(0))
        return wire.LedgerView(
            session_id=session_id, rho_total=str(Fraction(public.rho_total)),
            rho_spent=str(spent),
            epsilon_spent=epsilon_after(public, [(r["release"], Fraction(r["rho"]))
                                                 for r in rows]),
            delta=public.delta,
            entries=[wire.LedgerEntry(release=r["release"], rho=r["rho"], at=r["charged_at"])
                     for r in rows])
