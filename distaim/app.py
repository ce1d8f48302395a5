"""One DistAIM server's HTTP intake (FastAPI): the operator creates sessions and starts their
MPC runs, clients upload their shares, anyone with a credential of a session reads its
release.

Each of the three servers runs this app with its own state directory, its own party number
(1, 2 or 3) and its own MPC listen address (``feddpsyn distaim serve --party X
--mpc-address HOST:PORT``). Routes, one group per caller:

* operator (bearer token in ``operator.token``, state directory, mode 0600):
  ``GET /server`` is public (party, MPC address, field: what the operator's CLI checks);
  ``POST /sessions`` creates a session from a ``SessionRequest``: the server derives the
  public plan itself (``distaim.plan``), refuses one it cannot run (422, nothing stored) or
  whose MPC address for this server is not its own, and returns the plan digest and one
  bearer token per client, shown once (only hashes are kept; each server issues its own, so
  no server can upload in a client's name at another). Creation is idempotent by session
  id + plan digest (the same request again: 200, ``created=false``, no tokens; another plan
  under the same id: 409). ``DELETE /sessions/{id}`` removes a session that is not running
  (the CLI's rollback when another server refused). ``POST /sessions/{id}/run`` closes the
  intake and starts this server's MPC party as a child process (``python -m distaim.party``:
  MPyC keeps its runtime in process globals, so one run = one process; one run at a time per
  server, as the MPC address is the server's); the parties compare plan digests first.
* clients (their session token): ``PUT /sessions/{id}/clients/{cid}/share``; ``GET`` the
  session, its status and its result.

State: ``intake.sqlite`` (sessions, hashed client tokens, uploads) and per session
``sessions/<id>/``: ``session.json`` (the plan + this server's pid, TLS files and the
digest: what ``distaim.party`` reads), ``uploads/<client>/``, ``party.log``,
``result.json``. Design concerns as in ``common.serving``: hashed tokens compared in
constant time, typed bodies, one error shape, a body limit checked before reading,
idempotent uploads (the same body again is ``stored=false``, a different one 409); a run
found "running" at start-up (the server was killed) is recorded as failed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI, Response
from pydantic import Field

from common import wire
from common.credentials import (member_check, new_token, own_client_check,
                                read_or_create_token, role_check, token_hash)
from common.serving import (BackgroundWorker, Database, ServiceError, already_stored,
                            service_app, write_private)
from distaim import sharing
from distaim.plan import SessionRequest, derive_plan, plan_digest

__all__ = ["ShareUpload", "DistSessionInfo", "DistStatus", "DistSessionCreated", "ServerInfo",
           "create_app", "MAX_BODY_BYTES"]

MAX_BODY_BYTES = 64 * 1024 * 1024
_ROOT = Path(__file__).resolve().parents[1]

_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    plan_digest TEXT NOT NULL,
    state TEXT NOT NULL,
    detail TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS client_tokens (
    session_id TEXT NOT NULL,
    client_id TEXT NOT NULL,
    token_hash TEXT NOT NULL,
    PRIMARY KEY (session_id, client_id)
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


class ShareUpload(wire.StrictModel):
    """A client's share for this server: the 32-byte seed (server 1) or the share vector
    (servers 2 and 3, fixed-width little-endian field elements, base64)."""

    seed_hex: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    vector_b64: str | None = Field(default=None, max_length=MAX_BODY_BYTES)


class ServerInfo(wire.StrictModel):
    """A server's public configuration (what the operator's CLI checks before creating)."""

    role: str
    party: int = Field(description="this server's x-coordinate (1, 2 or 3)")
    mpc_address: str = Field(description="host:port this server's MPC party listens on")
    modulus: str = Field(description="the prime of the servers' field, decimal")
    mpc_channel_tls: bool = Field(description="its MPC channels use mutual TLS")
    plan_version: str


class DistSessionCreated(wire.StrictModel):
    session_id: str
    party: int
    created: bool = Field(description="false: this session already existed with this plan")
    plan_digest: str
    plan: dict
    client_tokens: dict[str, str] = Field(
        description="one bearer token per client for this server, shown once (empty when "
                    "created is false); the server keeps only hashes")


class DistSessionInfo(wire.StrictModel):
    """What a client needs to share its counts: the layout and the field."""

    session_id: str
    party: int = Field(description="this server's x-coordinate (1, 2 or 3)")
    domain_sizes: list[int]
    workload: list[list[int]]
    modulus: str = Field(description="the prime of the servers' field, decimal")
    cells: int
    plan_digest: str
    schema_fingerprint: str = ""


class DistStatus(wire.StrictModel):
    session_id: str
    party: int
    state: str = Field(description="intake, running, done or failed")
    plan_digest: str
    clients_uploaded: list[str]
    clients_missing: list[str]
    detail: str = ""


class DistServer:
    def __init__(self, state_dir: Path, party: int, mpc_address: str,
                 mpc_tls: dict[str, str] | None = None):
        from distaim.party import session_modulus
        if party not in (1, 2, 3):
            raise ValueError("party is 1, 2 or 3")
        self.state_dir = state_dir
        self.x = party
        self.mpc_address = mpc_address
        self.mpc_tls = mpc_tls
        self.modulus = session_modulus()
        self.db = Database(state_dir / "intake.sqlite", _SCHEMA_SQL)
        self._procs: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._plans: dict[str, dict] = {}
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

    def plan(self, session_id: str) -> dict:
        """The session's plan (404 if there is none)."""
        if self._row(session_id) is None:
            raise ServiceError(404, f"no session {session_id!r} at this server")
        if session_id not in self._plans:
            self._plans[session_id] = json.loads(
                (self.session_dir(session_id) / "session.json").read_text())
        return self._plans[session_id]

    def create(self, request: SessionRequest) -> tuple[DistSessionCreated, bool]:
        try:
            plan = derive_plan(request, self.modulus)
        except ValueError as exc:
            raise ServiceError(422, str(exc)) from None
        own = ":".join(map(str, plan["mpc_parties"][self.x - 1]))
        if own != self.mpc_address:
            raise ServiceError(422, f"server {self.x} runs its MPC party at "
                                    f"{self.mpc_address}, the request says {own}")
        if plan["mpc_channel_tls"] != bool(self.mpc_tls):
            raise ServiceError(422, f"server {self.x} runs its MPC channels "
                                    f"{'with' if self.mpc_tls else 'without'} TLS, the "
                                    "request says otherwise")
        digest = plan_digest(plan)
        tokens = {c: new_token() for c in plan["clients"]}
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
            local = dict(plan, pid=self.x - 1, plan_digest=digest)
            if self.mpc_tls:
                local["mpc_tls"] = self.mpc_tls
            write_private(folder / "session.json", json.dumps(local).encode())
            conn.execute("INSERT INTO sessions VALUES (?, ?, 'intake', '', ?)",
                         (request.session_id, digest, time.time()))
            conn.executemany("INSERT INTO client_tokens VALUES (?, ?, ?)",
                             [(request.session_id, c, token_hash(t)) for c, t in tokens.items()])
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
        with self.db.connect() as conn:
            return {r["client_id"]: r["token_hash"] for r in conn.execute(
                "SELECT client_id, token_hash FROM client_tokens WHERE session_id = ?",
                (session_id,))}

    # ------------------------------------------------------------------ intake

    def state(self, session_id: str) -> tuple[str, str]:
        row = self._row(session_id)
        if row is None:
            raise ServiceError(404, f"no session {session_id!r} at this server")
        return row["state"], row["detail"]

    def store(self, session_id: str, client_id: str, body: ShareUpload) -> wire.UploadReceipt:
        plan = self.plan(session_id)
        modulus, length = int(plan["modulus"]), int(plan["cells"])
        if self.x == 1:
            if body.seed_hex is None or body.vector_b64 is not None:
                raise ServiceError(422, "server 1 takes the seed (seed_hex) only")
            blob, name = bytes.fromhex(body.seed_hex), "seed1.bin"
        else:
            if body.vector_b64 is None or body.seed_hex is not None:
                raise ServiceError(422, f"server {self.x} takes the share vector only")
            try:
                blob = base64.b64decode(body.vector_b64, validate=True)
                sharing.decode_vector(blob, modulus, length)
            except ValueError as exc:
                raise ServiceError(422, f"share vector: {exc}") from None
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
                               domain_sizes=plan["domain_sizes"], workload=plan["workload"],
                               modulus=str(plan["modulus"]), cells=plan["cells"],
                               plan_digest=plan["plan_digest"],
                               schema_fingerprint=plan.get("schema_fingerprint", ""))

    def status(self, session_id: str) -> DistStatus:
        plan = self.plan(session_id)
        with self.db.connect() as conn:
            done = sorted(r["client_id"] for r in conn.execute(
                "SELECT client_id FROM uploads WHERE session_id = ?", (session_id,)))
        state, detail = self.state(session_id)
        return DistStatus(session_id=session_id, party=self.x, state=state,
                          plan_digest=plan["plan_digest"], clients_uploaded=done,
                          clients_missing=[c for c in plan["clients"] if c not in done],
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
            parties = ",".join(f"{h}:{p}" for h, p in plan["mpc_parties"])
            log = (folder / "party.log").open("ab")
            self._procs[session_id] = subprocess.Popen(
                [sys.executable, "-m", "distaim.party", "--pid", str(self.x - 1),
                 "--parties", parties, "--session-dir", str(folder),
                 "--out", str(folder / "result.json"),
                 "--timeout", str(plan.get("mpc_timeout", 120)),
                 "--deadline", str(plan.get("mpc_deadline", 3600))],
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
        report.pop("timings", None)
        return report

    def close(self) -> None:
        with self._lock:
            for proc in self._procs.values():
                if proc.poll() is None:
                    proc.terminate()


def _failure(code: int) -> str:
    from distaim.party import EXIT_PLAN_MISMATCH, EXIT_RESERVE_EXCEEDED
    if code == EXIT_PLAN_MISMATCH:
        return "refused: the three servers' plan digests differ; see party.log"
    if code == EXIT_RESERVE_EXCEEDED:
        return "refused: the samplers' extra delta exceeds the plan's reserve; see party.log"
    return f"MPC party exited with {code}; see party.log"


def create_app(state_dir: Path, party: int, mpc_address: str, *,
               operator_token_file: Path | None = None, mpc_tls: dict[str, str] | None = None,
               job_interval: float = 0.5) -> FastAPI:
    state_dir.mkdir(parents=True, exist_ok=True)
    service = DistServer(state_dir, party, mpc_address, mpc_tls)
    operator_token = read_or_create_token(operator_token_file or state_dir / "operator.token")
    worker = BackgroundWorker("distaim-job", service.step, job_interval)
    app = service_app("feddpsyn DistAIM server",
                      "One of three MPyC servers running AIM on Shamir-shared marginals.",
                      worker, on_shutdown=service.close, max_body_bytes=MAX_BODY_BYTES)
    app.state.service = service
    responses = wire.ERROR_RESPONSES
    operator = role_check(operator_token, "operator")
    own_client = own_client_check(service)
    member = member_check(service, operator_token)

    ops = APIRouter(prefix="/sessions", tags=["operator"], responses=responses,
                    dependencies=[Depends(operator)])

    @ops.post("", response_model=DistSessionCreated, status_code=201,
              responses={200: {"description": "exists already with this plan (no tokens)"}})
    def create_session(body: SessionRequest, response: Response) -> DistSessionCreated:
        created, new = service.create(body)
        if not new:
            response.status_code = 200
        return created

    @ops.delete("/{session_id}", status_code=204)
    def delete_session(session_id: wire.SessionId) -> Response:
        service.delete(session_id)
        return Response(status_code=204)

    @ops.post("/{session_id}/run", response_model=DistStatus)
    def run(session_id: wire.SessionId) -> DistStatus:
        service.start_run(session_id)
        return service.status(session_id)

    router = APIRouter(prefix="/sessions", tags=["client"], responses=responses)

    @router.put("/{session_id}/clients/{client_id}/share", response_model=wire.UploadReceipt,
                dependencies=[Depends(own_client)])
    def upload_share(session_id: wire.SessionId, client_id: wire.ClientId,
                     body: ShareUpload) -> wire.UploadReceipt:
        return service.store(session_id, client_id, body)

    @router.get("/{session_id}", response_model=DistSessionInfo,
                dependencies=[Depends(member)])
    def info(session_id: wire.SessionId) -> DistSessionInfo:
        return service.info(session_id)

    @router.get("/{session_id}/status", response_model=DistStatus,
                dependencies=[Depends(member)])
    def status(session_id: wire.SessionId) -> DistStatus:
        return service.status(session_id)

    @router.get("/{session_id}/result", dependencies=[Depends(member)])
    def result(session_id: wire.SessionId) -> dict:
        return service.result(session_id)

    @app.get("/server", response_model=ServerInfo, tags=["health"])
    def server() -> ServerInfo:
        from distaim.plan import PLAN_VERSION
        return ServerInfo(role=f"distaim-server-{service.x}", party=service.x,
                          mpc_address=service.mpc_address, modulus=str(service.modulus),
                          mpc_channel_tls=bool(service.mpc_tls), plan_version=PLAN_VERSION)

    @app.get("/health", tags=["health"])
    def health() -> dict[str, str]:
        return {"status": "ok", "role": f"distaim-server-{service.x}"}

    app.include_router(ops)
    app.include_router(router)
    return app
