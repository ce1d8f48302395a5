"""One DistAIM server's state and logic behind its intake (``distaim.app``): sessions
derived from the operator's request, hashed client tokens, idempotent share uploads, the MPC
run as a child process, the result.

State, the owner's only (directory 0700, files 0600, as the TFHE servers'):
``intake.sqlite`` (sessions, hashed client tokens, uploads) and per session
``sessions/<id>/``: ``session.json`` (the plan + this server's pid, TLS files and the
digest: what ``distaim.party`` reads), ``uploads/<client>/``, ``party.log``,
``result.json``. Design concerns as in ``common.serving``: hashed tokens compared in
constant time, idempotent uploads (the same body again is ``stored=false``, a different one
409); a run found "running" at start-up (the server was killed) is recorded as failed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from feddpsyn.common import wire
from feddpsyn.common.credentials import (
    CLIENT_TOKENS_SQL,
    new_token,
    store_client_tokens,
    stored_token_hashes,
)
from feddpsyn.common.serving import Database, ServiceError, already_stored, write_private
from feddpsyn.distaim import sharing
from feddpsyn.distaim.plan import (
    AnnealingPlan,
    FixedRoundsPlan,
    SessionRequest,
    build_plan,
    parse_plan,
)
from feddpsyn.distaim.wire import DistSessionCreated, DistSessionInfo, DistStatus, ShareUpload

__all__ = ["DistServer"]

_ROOT = Path(__file__).resolve().parents[1]

_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    plan_digest TEXT NOT NULL,
    state TEXT NOT NULL,
    detail TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS uploads (
    session_id TEXT NOT NULL,
    client_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (session_id, client_id)
);
"""



class DistServer:
    def __init__(self, state_dir: Path, party: int, mpc_address: str,
                 mpc_tls: dict[str, str] | None = None):
        from feddpsyn.distaim.party import session_modulus
        if party not in (1, 2, 3):
            raise ValueError("party is 1, 2 or 3")
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        state_dir.chmod(0o700)
        self.x = party
        self.mpc_address = mpc_address
        self.mpc_tls = mpc_tls
        self.modulus = session_modulus()
        self.db = Database(state_dir / "intake.sqlite", CLIENT_TOKENS_SQL + _SCHEMA_SQL)
        self._procs: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._plans: dict[str, FixedRoundsPlan | AnnealingPlan] = {}
        with self.db.transaction() as conn:
            conn.execute("UPDATE sessions SET state = 'failed', detail = 'the server stopped "
                         "during the MPC run' WHERE state = 'running'")

    # ------------------------------------------------------------------ sessions

    def session_dir(self, session_id: str) -> Path:
        return self.state_dir / "sessions" / session_id

    def _row(self, session_id: str):
        with self.db.connect() as conn:
            return conn.execute("SELECT * FROM sessions WHERE session_id = ?",
                                (session_id,)).fetchone()

    def plan(self, session_id: str) -> FixedRoundsPlan | AnnealingPlan:
        """The session's plan (404 if there is none)."""
        if self._row(session_id) is None:
            raise ServiceError(404, f"no session {session_id!r} at this server")
        if session_id not in self._plans:
            self._plans[session_id] = parse_plan(json.loads(
                (self.session_dir(session_id) / "session.json").read_text()))
        return self._plans[session_id]

    def plan_digest(self, session_id: str) -> str:
        row = self._row(session_id)
        if row is None:
            raise ServiceError(404, f"no session {session_id!r} at this server")
        return row["plan_digest"]

    def create(self, request: SessionRequest) -> tuple[DistSessionCreated, bool]:
        # The body has the documented shape (else 422); a plan this server cannot run (the
        # schema's own rules, the workload within it, the reserve, its MPC address and TLS)
        # is refused with 409, the message naming the rule or the remedy.
        try:
            plan = build_plan(request, self.modulus)
        except ValueError as exc:
            raise ServiceError(409, str(exc)) from None
        own = ":".join(map(str, plan.mpc_parties[self.x - 1]))
        if own != self.mpc_address:
            raise ServiceError(409, f"server {self.x} runs its MPC party at "
                                    f"{self.mpc_address}, the request says {own}")
        if plan.mpc_channel_tls != bool(self.mpc_tls):
            raise ServiceError(409, f"server {self.x} runs its MPC channels "
                                    f"{'with' if self.mpc_tls else 'without'} TLS, the "
                                    "request says otherwise")
        digest = plan.digest()
        tokens = {c: new_token() for c in plan.clients}
        with self.db.transaction() as conn:
            row = conn.execute("SELECT plan_digest FROM sessions WHERE session_id = ?",
                               (request.session_id,)).fetchone()
            if row is not None:
                if row["plan_digest"] != digest:
                    raise ServiceError(409, f"session {request.session_id!r} exists at server "
                                            f"{self.x} with another plan (digest "
                                            f"{row['plan_digest'][:16]}...)")
                return DistSessionCreated(session_id=request.session_id, party=self.x,
                                          created=False, plan_digest=digest, plan=plan,
                                          client_tokens={}), False
            folder = self.session_dir(request.session_id)
            if folder.exists():  # left by a delete that was cut short
                shutil.rmtree(folder)
            local = dict(plan.mapping(), pid=self.x - 1, plan_digest=digest)
            if self.mpc_tls:
                local["mpc_tls"] = self.mpc_tls
            write_private(folder / "session.json", json.dumps(local).encode())
            conn.execute("INSERT INTO sessions VALUES (?, ?, 'intake', '', ?)",
                         (request.session_id, digest, time.time()))
            store_client_tokens(conn, request.session_id, tokens)
        return DistSessionCreated(session_id=request.session_id, party=self.x, created=True,
                                  plan_digest=digest, plan=plan, client_tokens=tokens), True

    def delete(self, session_id: str) -> None:
        self.plan(session_id)
        with self._lock, self.db.transaction() as conn:
            state = conn.execute("SELECT state FROM sessions WHERE session_id = ?",
                                 (session_id,)).fetchone()["state"]
            if state == "running":
                raise ServiceError(409, "the session's MPC run is in progress")
            for table in ("uploads", "client_tokens", "sessions"):
                conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            self._plans.pop(session_id, None)
        shutil.rmtree(self.session_dir(session_id), ignore_errors=True)

    # ------------------------------------------------------------------ credentials

    def client_token_hashes(self, session_id: str) -> dict[str, str]:
        """The session's client token hashes (``common.credentials.ClientTokens``)."""
        self.plan(session_id)
        return stored_token_hashes(self.db, session_id)

    # ------------------------------------------------------------------ intake

    def state(self, session_id: str) -> tuple[str, str]:
        row = self._row(session_id)
        if row is None:
            raise ServiceError(404, f"no session {session_id!r} at this server")
        return row["state"], row["detail"]

    def store(self, session_id: str, client_id: str, body: ShareUpload) -> wire.UploadReceipt:
        plan = self.plan(session_id)
        modulus, length = plan.modulus, plan.cells
        if self.x == 1:
            if body.seed_hex is None or body.vector_b64 is not None:
                raise ServiceError(422, "server 1 takes the seed (seed_hex) only")
            blob, name = bytes.fromhex(body.seed_hex), "seed1.bin"
        else:
            if body.vector_b64 is None or body.seed_hex is not None:
                raise ServiceError(422, f"server {self.x} takes the share vector only")
            try:
                blob = base64.b64decode(body.vector_b64, validate=True)
            except ValueError as exc:
                raise ServiceError(422, f"share vector: {exc}") from None
            try:
                sharing.decode_vector(blob, modulus, length)
            except ValueError as exc:  # the session's cells and field: 409
                raise ServiceError(409, f"share vector: {exc}") from None
            name = f"share{self.x}.bin"
        digest = hashlib.sha256(blob).hexdigest()
        with self.db.transaction() as conn:
            row = conn.execute("SELECT state FROM sessions WHERE session_id = ?",
                               (session_id,)).fetchone()
            if row is None or row["state"] != "intake":
                raise ServiceError(409, "the intake of this session is closed")
            row = conn.execute("SELECT digest FROM uploads WHERE session_id = ? AND "
                               "client_id = ?", (session_id, client_id)).fetchone()
            stored = not already_stored(row["digest"] if row else None, digest, "share",
                                        client_id)
            if stored:
                write_private(self.session_dir(session_id) / "uploads" / client_id / name, blob)
                conn.execute("INSERT INTO uploads VALUES (?, ?, ?, ?, ?)",
                             (session_id, client_id, digest, len(blob), time.time()))
        return wire.UploadReceipt(session_id=session_id, client_id=client_id, stored=stored,
                                  digest=digest)

    def info(self, session_id: str) -> DistSessionInfo:
        plan = self.plan(session_id)
        return DistSessionInfo(session_id=session_id, party=self.x,
                               domain_sizes=plan.domain_sizes, workload=plan.workload,
                               modulus=str(plan.modulus), cells=plan.cells,
                               plan_digest=self.plan_digest(session_id),
                               schema_fingerprint=plan.schema_fingerprint)

    def status(self, session_id: str) -> DistStatus:
        plan = self.plan(session_id)
        with self.db.connect() as conn:
            done = sorted(r["client_id"] for r in conn.execute(
                "SELECT client_id FROM uploads WHERE session_id = ?", (session_id,)))
        state, detail = self.state(session_id)
        return DistStatus(session_id=session_id, party=self.x, state=state,
                          plan_digest=self.plan_digest(session_id), clients_uploaded=done,
                          clients_missing=[c for c in plan.clients if c not in done],
                          detail=detail)

    # ------------------------------------------------------------------ MPC run

    def _set_state(self, session_id: str, state: str, detail: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE sessions SET state = ?, detail = ?, at = ? WHERE "
                         "session_id = ?", (state, detail, time.time(), session_id))

    def start_run(self, session_id: str) -> None:
        plan = self.plan(session_id)
        with self._lock:
            if self.state(session_id)[0] != "intake":
                return  # idempotent: already started or finished
            busy = [s for s, p in self._procs.items() if p.poll() is None]
            if busy:
                raise ServiceError(409, f"this server's MPC party is busy with {busy[0]!r}")
            self._set_state(session_id, "running", "")
            folder = self.session_dir(session_id)
            (folder / "uploads").mkdir(exist_ok=True)
            parties = ",".join(f"{h}:{p}" for h, p in plan.mpc_parties)
            log = os.fdopen(os.open(folder / "party.log",
                                    os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
            self._procs[session_id] = subprocess.Popen(
                [sys.executable, "-m", "feddpsyn.distaim.party", "--pid", str(self.x - 1),
                 "--parties", parties, "--session-dir", str(folder),
                 "--out", str(folder / "result.json"),
                 "--timeout", str(plan.mpc_timeout),
                 "--deadline", str(plan.mpc_deadline)],
                cwd=_ROOT, stdout=log, stderr=subprocess.STDOUT)
            log.close()

    def step(self) -> None:
        with self._lock:
            finished = {s: p for s, p in self._procs.items() if p.poll() is not None}
            for s in finished:
                del self._procs[s]
        for session_id, proc in finished.items():
            if proc.returncode == 0 and (self.session_dir(session_id) / "result.json").exists():
                self._set_state(session_id, "done", "")
            else:
                self._set_state(session_id, "failed", _failure(proc.returncode))

    def result(self, session_id: str) -> dict:
        if self.state(session_id)[0] != "done":
            raise ServiceError(409, "no result yet")
        report = json.loads((self.session_dir(session_id) / "result.json").read_text())
        # the run's cost (step timings, bytes, memory) stays in the state directory
        for internal in ("timings", "run_stats"):
            report.pop(internal, None)
        return report

    def close(self) -> None:
        with self._lock:
            for proc in self._procs.values():
                if proc.poll() is None:
                    proc.terminate()


def _failure(code: int) -> str:
    from feddpsyn.distaim.party import EXIT_PLAN_MISMATCH, EXIT_RESERVE_EXCEEDED
    if code == EXIT_PLAN_MISMATCH:
        return "refused: the three servers' plan digests differ; see party.log"
    if code == EXIT_RESERVE_EXCEEDED:
        return "refused: the samplers' extra delta exceeds the plan's reserve; see party.log"
    return f"MPC party exited with {code}; see party.log"
