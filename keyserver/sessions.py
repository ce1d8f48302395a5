"""The key server's sessions: the request each was created from, its plan (rebuilt from that
request after a restart), its public record, its keys, its noise pool and its clients' token
hashes.

Design concern: **a session's plan is a function of its stored request.** Only the operator's
request and the public record derived from it are stored; the plan is derived again from the
request (``SessionPlan.build``) whenever it is not cached, so a restarted server runs the plan
it published.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from common import wire
from common.credentials import store_client_tokens, stored_token_hashes
from common.serving import Database, ServiceError
from dp.noise_pool import pool_noise
from keyserver.keys import SessionKeys
from params.schema import Schema
from params.session_plan import SessionPlan

__all__ = ["SESSIONS_SQL", "SessionRegistry", "build_plan"]

SESSIONS_SQL = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, request_json TEXT NOT NULL, public_json TEXT NOT NULL,
    created REAL NOT NULL);
"""


def build_plan(request: wire.SessionCreate) -> SessionPlan:
    return SessionPlan.build(Schema.from_dict(request.schema_), request.pairs,
                             request.budget.epsilon, request.budget.delta, request.budget.split,
                             request.parameter_set, request.max_rows,
                             selection=request.selection.mode,
                             rounds=request.selection.rounds,
                             selection_set=request.selection.parameter_set,
                             noise=request.noise)


class SessionRegistry:
    """The sessions table, each session's folder, and its plan and keys cached in memory."""

    def __init__(self, db: Database, state_dir: Path):
        self.db = db
        self.state_dir = state_dir
        self._keys: dict[str, SessionKeys] = {}
        self._plans: dict[str, SessionPlan] = {}
        self._lock = threading.Lock()

    def session_dir(self, session_id: str) -> Path:
        return self.state_dir / "sessions" / session_id

    def add(self, session_id: str, request: wire.SessionCreate, public: wire.SessionPublic,
            tokens: dict[str, str], plan: SessionPlan, keys: SessionKeys) -> None:
        """Record a session whose files are written: its request, public record and tokens."""
        with self.db.transaction() as conn:
            conn.execute("INSERT INTO sessions VALUES (?, ?, ?, ?)",
                         (session_id, request.model_dump_json(by_alias=True),
                          public.model_dump_json(by_alias=True), time.time()))
            store_client_tokens(conn, session_id, tokens)
        with self._lock:
            self._keys[session_id] = keys
            self._plans[session_id] = plan

    def public(self, session_id: str) -> wire.SessionPublic:
        with self.db.connect() as conn:
            row = conn.execute("SELECT public_json FROM sessions WHERE id = ?",
                               (session_id,)).fetchone()
        if row is None:
            raise ServiceError(404, f"unknown session {session_id!r}")
        return wire.SessionPublic.model_validate_json(row["public_json"])

    def session_ids(self) -> list[str]:
        with self.db.connect() as conn:
            return [r["id"] for r in conn.execute("SELECT id FROM sessions ORDER BY created")]

    def plan(self, session_id: str) -> SessionPlan:
        with self._lock:
            if session_id in self._plans:
                return self._plans[session_id]
        with self.db.connect() as conn:
            row = conn.execute("SELECT request_json FROM sessions WHERE id = ?",
                               (session_id,)).fetchone()
        if row is None:
            raise ServiceError(404, f"unknown session {session_id!r}")
        plan = build_plan(wire.SessionCreate.model_validate_json(row["request_json"]))
        with self._lock:
            self._plans[session_id] = plan
        return plan

    def keys(self, session_id: str) -> SessionKeys:
        with self._lock:
            if session_id in self._keys:
                return self._keys[session_id]
        public = self.public(session_id)
        keys = SessionKeys.load(self.session_dir(session_id), len(public.clients),
                                any(r.joint is not None for r in public.releases))
        with self._lock:
            self._keys[session_id] = keys
        return keys

    def client_token_hashes(self, session_id: str) -> dict[str, str]:
        """The session's client token hashes (``common.credentials.ClientTokens``)."""
        self.public(session_id)
        return stored_token_hashes(self.db, session_id)

    def pool_noise(self, session_id: str, label: str, positions: np.ndarray) -> np.ndarray:
        """This server's noise drawn at session creation (``dp.noise_pool``)."""
        blob = (self.session_dir(session_id) / "noise_pool.npz").read_bytes()
        return pool_noise(blob, label, positions)
