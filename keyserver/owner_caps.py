"""The key server's lifetime cap per owner id, across all of its sessions.

The operator (or an ethics board through it) gives the key server a cap (epsilon, delta) for
some owner ids (``feddpsyn keyserver --owner-caps FILE``: ``{"alice": {"epsilon": 3,
"delta": 1e-5}}``, read again at every session, so a change takes effect without a
restart). A new session with a capped owner is planned, and then its privacy record is
composed with the records of every earlier session of this server in which that owner
takes part (``dp.lifetime``: PLD composition, not a sum of eps); past the cap, the session
is refused, naming the owner, the composed eps and what is left. It is the owner's own
odometer (``clients.odometer``) held at the server too, for the sessions of this server.

Which earlier sessions count: every session recorded here or being prepared with a plan
(not one whose preparation failed: nothing of it can be released), in which the owner is
a client and was not left out (``keyserver.uploads``). A session still collecting counts in
full: the owner may yet upload. Plans are built one at a time (the planning thread), and
a session admitted is counted by the next check from that moment on, before its row is
written (:meth:`OwnerCaps.hold`), so two sessions created at once cannot both use the same
remainder.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

from feddpsyn.common import wire
from feddpsyn.common.serving import Database

__all__ = ["OwnerCaps", "CapExceeded", "load_caps"]


class CapExceeded(ValueError):
    """A session past an owner's cap at this key server (a plan refusal: 409)."""


def load_caps(path: Path) -> dict[str, tuple[float, float]]:
    """The caps in ``path``; ValueError naming the problem."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a JSON file of owner caps ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: owner caps are an object of owner id -> "
                         "{\"epsilon\": E, \"delta\": D}")
    caps = {}
    for owner, cap in raw.items():
        try:
            epsilon, delta = float(cap["epsilon"]), float(cap["delta"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: the cap of {owner!r} needs an epsilon and a delta"
                             ) from None
        if not (epsilon > 0 and 0 < delta < 1):
            raise ValueError(f"{path}: the cap of {owner!r} needs epsilon > 0 and delta in "
                             "(0, 1)")
        caps[str(owner)] = (epsilon, delta)
    return caps


class OwnerCaps:
    """Checks a planned session against the owners' caps (module docstring)."""

    def __init__(self, db: Database, path: Path | None):
        self.db = db
        self.path = path
        if path is not None:
            load_caps(path)  # a bad file stops the server at start, not at a session
        self._held: dict[str, tuple[list[str], wire.PrivacyRecord]] = {}
        self._lock = threading.Lock()

    def _records(self, owner: str) -> list[wire.PrivacyRecord]:
        with self.db.connect() as conn:
            absent = {(r["session_id"], r["client_id"]) for r in conn.execute(
                "SELECT session_id, client_id FROM absent")}
            rows = [(r["id"], r["public_json"]) for r in conn.execute(
                "SELECT id, public_json FROM sessions")]
            rows += [(r["id"], r["draft_json"]) for r in conn.execute(
                "SELECT id, draft_json FROM session_preparation WHERE state = 'preparing' "
                "AND draft_json != ''")]
        found: dict[str, wire.PrivacyRecord | None] = {}
        for session_id, text in rows:  # bounded: the server's sessions
            public = wire.SessionPublic.model_validate_json(text)
            if owner in public.clients and (session_id, owner) not in absent:
                found[session_id] = public.privacy
        with self._lock:
            for session_id, (clients, record) in self._held.items():
                if owner in clients:
                    found.setdefault(session_id, record)
        missing = [s for s, record in found.items() if record is None]
        if missing:  # fail closed: a spend that cannot be stated is not taken as zero
            raise CapExceeded(f"owner {owner!r}: sessions {missing} publish no privacy record, "
                              "so its cap cannot be kept; no session is created for it")
        return [r for r in found.values() if r is not None]

    def check(self, draft: wire.SessionPublic) -> None:
        """Refuse (:class:`CapExceeded`) a session past a capped owner's cap; else hold it
        as counted until :meth:`release` (its row is written)."""
        if self.path is None:
            return
        from feddpsyn.dp.lifetime import composed_epsilon

        caps = load_caps(self.path)
        if draft.privacy is None:
            raise CapExceeded("the session publishes no privacy record: owner caps cannot be "
                              "kept")
        for owner in draft.clients:  # bounded: the session's clients
            if owner not in caps:
                continue
            cap_eps, cap_delta = caps[owner]
            earlier = self._records(owner)
            spent = composed_epsilon([*earlier, draft.privacy], cap_delta)
            if not spent <= cap_eps:
                before = composed_epsilon(earlier, cap_delta)
                left = max(0.0, cap_eps - before)
                raise CapExceeded(
                    f"owner {owner!r}: this session would bring its privacy loss at this key "
                    f"server to eps {_text(spent)} at delta {cap_delta:g} over "
                    f"{len(earlier) + 1} sessions, past its cap of eps {cap_eps:g} (spent: eps "
                    f"{_text(before)} over {len(earlier)} sessions; left: eps {left:.4f})")
        with self._lock:
            self._held[draft.session_id] = (list(draft.clients), draft.privacy)

    def release(self, session_id: str) -> None:
        """The session's row is written (or it was refused): the database counts it now."""
        with self._lock:
            self._held.pop(session_id, None)


def _text(epsilon: float) -> str:
    return "inf" if math.isinf(epsilon) else f"{epsilon:.4f}"
