"""The key server's sessions: the request each was created from, its public record, the
plan it runs, its keys, its noise pool and its clients' token hashes.

Design concern: **a session runs the plan it published, across restarts and rule changes.**
The plan is built from the operator's request once, at creation (``SessionPlan.build``);
from then on the session's plan is the one its stored public record describes, derived as
the compute server derives it (``SessionPlan.from_public``), never rebuilt from the request:
the plan rules change between versions (em's candidate batches, noisy-greedy's joint score
noise), and a rebuilt plan would then match neither the compute server's compiled module nor
the noise this server drew at creation. Two checks make the derivation fail closed:

* the derived plan must publish the stored record again, field for field (today's code reads
  the record as the code that wrote it did: its reserved delta terms, its variances, its
  chunk sizes and thresholds), and
* the few things this server runs that the record does not state but derives by a rule (the
  layout's offsets, P2's chunks: :func:`plan_facts`; em's candidate batches too, for a
  record written before it stated their size) must equal what was stored of them at
  creation.

Where either differs, the session is refused with HTTP 409 and a message saying so (what is
published stays readable; nothing is decrypted, charged or prepared for it any more, and the
offline job serves the other sessions), never run under a plan that differs from the
published one. A session recorded before its facts were stored is checked by the first rule
alone. At creation the same checks run on the built plan and the plan the session runs from
the first request on is already the published one (:func:`confirm_published`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from feddpsyn.common import wire
from feddpsyn.common.credentials import store_client_tokens, stored_token_hashes
from feddpsyn.common.serving import Database, ServiceError
from feddpsyn.dp.noise_pool import pool_noise
from feddpsyn.keyserver.keys import SessionKeys
from feddpsyn.keyserver.offline_pool import KeyFiles
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.schema import Schema
from feddpsyn.params.selection_plan import EmSelection
from feddpsyn.params.session_plan import SessionPlan

__all__ = ["SESSIONS_SQL", "SessionRegistry", "build_plan", "published_plan", "plan_facts",
           "confirm_published", "PlanMismatch", "preparation_of", "not_ready"]

log = logging.getLogger("feddpsyn.keyserver")

SESSIONS_SQL = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, request_json TEXT NOT NULL, public_json TEXT NOT NULL,
    created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS session_plan_facts (
    id TEXT PRIMARY KEY, facts_json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS session_preparation (
    id TEXT PRIMARY KEY, request_json TEXT NOT NULL, draft_json TEXT NOT NULL,
    clients_json TEXT NOT NULL, state TEXT NOT NULL, phase TEXT NOT NULL, reason TEXT,
    created REAL NOT NULL, finished REAL, attempts INTEGER NOT NULL);
"""


def preparation_of(conn: sqlite3.Connection, session_id: str) -> wire.Preparation | None:
    """The session's preparation job (``keyserver.preparation``), None for a session
    created before preparation was a job, or for an unknown one."""
    row = conn.execute("SELECT state, phase, reason, created, finished FROM "
                       "session_preparation WHERE id = ?", (session_id,)).fetchone()
    if row is None:
        return None
    end = row["finished"] if row["finished"] is not None else time.time()
    return wire.Preparation(state=row["state"], phase=row["phase"], started=row["created"],
                            elapsed=max(0.0, end - row["created"]), reason=row["reason"])


def not_ready(session_id: str, preparation: wire.Preparation) -> ServiceError:
    """The 409 for a request on a session that is still being prepared, or failed."""
    if preparation.state == "failed":
        return ServiceError(409, f"session {session_id} failed while it was being prepared "
                                 f"({preparation.phase}): {preparation.reason}. Create a new "
                                 "session")
    return ServiceError(409, f"session {session_id} is still being prepared "
                             f"({preparation.phase}, {preparation.elapsed:.0f} s so far): wait "
                             f"until its status (GET /sessions/{session_id}/status, "
                             "`feddpsyn session status`) says ready, then retry")


def build_plan(request: wire.SessionCreate) -> SessionPlan:
    """The plan of a new session under today's rules (only ever at creation: module
    docstring)."""
    return SessionPlan.build(PlanRequest(
        Schema.from_dict(request.schema_), request.budget.epsilon, request.budget.delta,
        request.max_rows, pairs=request.pairs, split=request.budget.split,
        parameter_set=request.parameter_set, selection=request.selection.mode,
        rounds=request.selection.rounds, selection_set=request.selection.parameter_set,
        noise=request.noise, one_way_topup=request.selection.one_way_topup))


class PlanMismatch(ValueError):
    """A public record that does not give back the plan it was published from."""


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, separators=(",", ":")).encode()).hexdigest()


def plan_facts(plan: SessionPlan) -> dict[str, object]:
    """What this server runs of ``plan`` that its public record does not state but derives by
    a rule: each marginal's offset in the count vector, P2's chunks (``indif_chunks``) and
    em's candidate batches (stated by the record since ``batch_size``, by
    ``params.selection_plan.candidate_batches`` before it; kept here for such records).
    Stored at creation and compared whenever the plan is derived again (module docstring)."""
    facts: dict[str, object] = {"layout": _digest(
        [[slot.key, slot.offset, slot.size] for slot in plan.layout.marginals])}
    if plan.selection is not None:
        facts["indif_chunks"] = _digest([[index, cells.tolist(), size]
                                         for index, cells, size in plan.indif_chunks()])
        batches = plan.selection.batches if isinstance(plan.selection, EmSelection) else None
        facts["batches"] = None if batches is None else [batches.candidates, batches.size]
    return facts


def _differences(stored: BaseModel, again: BaseModel, prefix: str = "") -> list[str]:
    """The fields in which two public records differ, one level into nested records."""
    out = []
    for name in type(stored).model_fields:
        a, b = getattr(stored, name), getattr(again, name)
        if a == b:
            continue
        if isinstance(a, BaseModel) and isinstance(b, BaseModel) and type(a) is type(b):
            out += _differences(a, b, f"{prefix}{name}.")
        else:
            out.append(prefix + name)
    return out


def published_plan(public: wire.SessionPublic,
                   facts: dict[str, object] | None = None) -> SessionPlan:
    """The plan ``public`` describes, derived as the compute server derives it
    (``SessionPlan.from_public``), once it is confirmed (module docstring): it publishes
    ``public`` again, and its :func:`plan_facts` equal ``facts`` (None: not stored, a
    session created before they were). Raises :class:`PlanMismatch` saying what differs."""
    try:
        plan = SessionPlan.from_public(public)
        again = plan.to_public(public.session_id, public.clients,
                               None if public.selection is None else public.selection.bootstraps)
    except (ValueError, TypeError, KeyError, ArithmeticError) as exc:
        raise PlanMismatch(f"its public record no longer reads as a plan ({exc})") from None
    if public.selection is not None and public.selection.batch_size is None:
        # A record written before it stated em's batch size: the batches are the rule's, and
        # the stored facts (a session created since the facts were kept) check that rule.
        again = again.model_copy(update={"selection": again.selection.model_copy(
            update={"batch_size": None})})
    if public.privacy is None:
        # A record written before sessions published a privacy record: its budget is the
        # zCDP conversion's, and the plan read back from it is accounted that way.
        again = again.model_copy(update={"privacy": None})
    differs = _differences(public, again)
    if differs:
        raise PlanMismatch("its public record, read by this server, publishes other values "
                           f"for {', '.join(differs)}")
    if facts is not None:
        derived = plan_facts(plan)
        differs = sorted(k for k in set(facts) | set(derived) if facts.get(k) != derived.get(k))
        if differs:
            raise PlanMismatch(f"this server now derives other {', '.join(differs)} from it")
    return plan


def confirm_published(plan: SessionPlan, public: wire.SessionPublic) -> SessionPlan:
    """At creation: the plan ``public`` describes (:func:`published_plan`), which must be
    ``plan`` in everything this server runs; the differences by construction are the em
    selection's ``rho`` (the record carries what is charged, not the share it was planned
    from) and ``max_rows`` without a selection (not in the record; nothing reads it there).
    Raises :class:`PlanMismatch`."""
    published = published_plan(public, plan_facts(plan))
    selection = plan.selection
    expected = replace(
        plan, selection=None if selection is None else replace(selection,
                                                               rho=selection.rho_charged),
        max_rows=plan.max_rows if selection is not None else published.max_rows)
    if published != expected:
        differs = [name for name in SessionPlan.__dataclass_fields__
                   if getattr(published, name) != getattr(expected, name)]
        raise PlanMismatch(f"the plan its public record describes differs in "
                           f"{', '.join(differs)}")
    return published


class SessionRegistry:
    """The sessions table, each session's folder, and its plan and keys cached in memory."""

    def __init__(self, db: Database, state_dir: Path):
        self.db = db
        self.state_dir = state_dir
        self._keys: dict[str, SessionKeys] = {}
        self._plans: dict[str, SessionPlan] = {}
        self._refused: dict[str, str] = {}
        self._lock = threading.Lock()

    def session_dir(self, session_id: str) -> Path:
        return self.state_dir / "sessions" / session_id

    def add(self, session_id: str, request: wire.SessionCreate, public: wire.SessionPublic,
            tokens: dict[str, str], plan: SessionPlan, keys: SessionKeys | None = None, *,
            then: Callable[[sqlite3.Connection], None] | None = None) -> None:
        """Record a session whose files are written: its request, public record, the facts
        of its plan (:func:`plan_facts`) and tokens (empty: stored when it was accepted).
        ``public`` must describe ``plan`` (:func:`confirm_published`; a 500 otherwise,
        nothing recorded), and the plan the session runs from now on is the one ``public``
        describes. ``then`` runs in the same transaction (the preparation marks the session
        ready); ``keys``: None loads them from the session's folder on first use."""
        try:
            published = confirm_published(plan, public)
        except PlanMismatch as exc:
            raise ServiceError(500, f"session not created: {exc}") from None
        with self.db.transaction() as conn:
            conn.execute("INSERT INTO sessions VALUES (?, ?, ?, ?)",
                         (session_id, request.model_dump_json(by_alias=True),
                          public.model_dump_json(by_alias=True), time.time()))
            conn.execute("INSERT INTO session_plan_facts VALUES (?, ?)",
                         (session_id, json.dumps(plan_facts(plan))))
            store_client_tokens(conn, session_id, tokens)
            if then is not None:
                then(conn)
        with self._lock:
            if keys is not None:
                self._keys[session_id] = keys
            self._plans[session_id] = published

    def preparation(self, session_id: str) -> wire.Preparation | None:
        """The session's preparation job (:func:`preparation_of`)."""
        with self.db.connect() as conn:
            return preparation_of(conn, session_id)

    def require_ready(self, session_id: str) -> None:
        """409 unless the session's preparation is done (a session without one is)."""
        preparation = self.preparation(session_id)
        if preparation is not None and preparation.state != "ready":
            raise not_ready(session_id, preparation)

    def public(self, session_id: str) -> wire.SessionPublic:
        """The session's public record: 404 for an unknown session, 409 for one still being
        prepared (or whose preparation failed): its record is written when it is ready."""
        with self.db.connect() as conn:
            row = conn.execute("SELECT public_json FROM sessions WHERE id = ?",
                               (session_id,)).fetchone()
            preparation = None if row is not None else preparation_of(conn, session_id)
        if row is None:
            if preparation is not None:
                raise not_ready(session_id, preparation)
            raise ServiceError(404, f"unknown session {session_id!r}")
        return wire.SessionPublic.model_validate_json(row["public_json"])

    def session_ids(self) -> list[str]:
        with self.db.connect() as conn:
            return [r["id"] for r in conn.execute("SELECT id FROM sessions ORDER BY created")]

    def runnable_session_ids(self) -> list[str]:
        """The sessions whose plan this server runs: those refused (:meth:`plan`) are left
        out, so that the offline job serves the others."""
        out = []
        for session_id in self.session_ids():  # bounded: one pass over the stored sessions
            try:
                self.plan(session_id)
            except ServiceError:
                continue
            out.append(session_id)
        return out

    def plan(self, session_id: str) -> SessionPlan:
        """The plan the session's public record describes (module docstring); 404 for an
        unknown session, 409 for one planned under rules this server no longer derives
        alike."""
        with self._lock:
            if session_id in self._plans:
                return self._plans[session_id]
            refused = self._refused.get(session_id)
        if refused is not None:
            raise ServiceError(409, refused)
        public = self.public(session_id)
        with self.db.connect() as conn:
            row = conn.execute("SELECT facts_json FROM session_plan_facts WHERE id = ?",
                               (session_id,)).fetchone()
        try:
            plan = published_plan(public, None if row is None else json.loads(row["facts_json"]))
        except PlanMismatch as exc:
            message = (f"session {session_id} was planned under other rules than this key "
                       f"server's: {exc}. What it published stays readable; this server "
                       "decrypts, charges and prepares nothing more for it. Finish it with "
                       "the server version that created it, or create a new session")
            log.warning("%s", message)
            with self._lock:
                self._refused[session_id] = message
            raise ServiceError(409, message) from None
        with self._lock:
            self._plans[session_id] = plan
        return plan

    def keys(self, session_id: str) -> SessionKeys:
        with self._lock:
            if session_id in self._keys:
                return self._keys[session_id]
        files = self.key_files(session_id)
        keys = files.load(Path(files.directory), *files.args)
        with self._lock:
            self._keys[session_id] = keys
        return keys

    def key_files(self, session_id: str) -> KeyFiles:
        """Where an offline worker loads the session's keys itself (``keyserver.offline_pool``):
        the same handle as :meth:`keys`, from the session's 0600 files."""
        public = self.public(session_id)
        return KeyFiles(SessionKeys.load, str(self.session_dir(session_id)),
                        (len(public.clients), any(r.joint is not None for r in public.releases)))

    def client_token_hashes(self, session_id: str) -> dict[str, str]:
        """The session's client token hashes (``common.credentials.ClientTokens``), from its
        acceptance on: a client is told a session is not ready only once its token is
        checked."""
        if self.preparation(session_id) is None:
            self.public(session_id)  # 404 for an unknown session
        return stored_token_hashes(self.db, session_id)

    def pool_noise(self, session_id: str, label: str, positions: np.ndarray) -> np.ndarray:
        """This server's noise drawn at session creation (``dp.noise_pool``)."""
        blob = (self.session_dir(session_id) / "noise_pool.npz").read_bytes()
        return pool_noise(blob, label, positions)
