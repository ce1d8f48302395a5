"""One DistAIM server's HTTP intake (FastAPI): clients upload their share, the operator starts
the MPC run, anyone with a credential of the session reads the release.

Each of the three servers runs this app on its own host/port with its own state directory;
the state directory holds the session (``session.json``, written by the operator's setup:
workload, budget, the servers' MPC addresses, this server's pid, hashes of the client and
operator tokens), the accepted uploads (``uploads/<client>/``, the format ``distaim.party``
reads) and a SQLite record of every upload. ``POST /sessions/{id}/run`` closes the intake and
starts this server's MPC party as a child process (``python -m distaim.party``: MPyC keeps
its runtime in process globals, so one run = one process); the background worker watches it
and records the outcome. Design concerns as in ``feddpsyn.serving``: hashed tokens compared
in constant time, typed bodies, one error shape, a body limit checked before reading,
idempotent uploads (the same body again is ``stored=false``, a different one 409).
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI, Request
from pydantic import Field

from distaim import sharing
from distaim.protocol import Layout
from feddpsyn import wire
from feddpsyn.serving import (BackgroundWorker, Database, ServiceError, already_stored, bearer,
                              service_app, token_matches, write_private)

__all__ = ["ShareUpload", "DistSessionInfo", "DistStatus", "create_app", "MAX_BODY_BYTES"]

MAX_BODY_BYTES = 64 * 1024 * 1024
_ROOT = Path(__file__).resolve().parents[1]

_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS uploads (
    client_id TEXT PRIMARY KEY,
    digest TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS run (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    state TEXT NOT NULL,
    detail TEXT NOT NULL,
    at REAL NOT NULL
);
"""


class ShareUpload(wire.StrictModel):
    """A client's share for this server: the 32-byte seed (server 1) or the share vector
    (servers 2 and 3, fixed-width little-endian field elements, base64)."""

    seed_hex: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    vector_b64: str | None = Field(default=None, max_length=MAX_BODY_BYTES)


class DistSessionInfo(wire.StrictModel):
    """What a client needs to share its counts: the layout and the field."""

    session_id: str
    party: int = Field(description="this server's x-coordinate (1, 2 or 3)")
    domain_sizes: list[int]
    workload: list[list[int]]
    modulus: str = Field(description="the prime of the servers' field, decimal")
    cells: int


class DistStatus(wire.StrictModel):
    session_id: str
    party: int
    state: str = Field(description="intake, running, done or failed")
    clients_uploaded: list[str]
    clients_missing: list[str]
    detail: str = ""


class DistServer:
    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        self.session = json.loads((state_dir / "session.json").read_text())
        self.layout = Layout.for_workload(self.session["domain_sizes"],
                                          [tuple(c) for c in self.session["workload"]])
        self.db = Database(state_dir / "intake.sqlite", _SCHEMA_SQL)
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    @property
    def x(self) -> int:
        return int(self.session["pid"]) + 1

    def check_session(self, session_id: str) -> None:
        if session_id != self.session["session_id"]:
            raise ServiceError(404, f"no session {session_id!r} at this server")

    def client_authorised(self, client_id: str, token: str) -> bool:
        expected = self.session["client_token_hashes"].get(client_id)
        return expected is not None and token_matches(token, expected)

    def operator_authorised(self, token: str) -> bool:
        return token_matches(token, self.session["operator_token_hash"])

    def state(self) -> tuple[str, str]:
        with self.db.connect() as conn:
            row = conn.execute("SELECT state, detail FROM run WHERE id = 1").fetchone()
        return (row["state"], row["detail"]) if row else ("intake", "")

    def store(self, client_id: str, body: ShareUpload) -> wire.UploadReceipt:
        modulus, length = int(self.session["modulus"]), self.layout.length
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
            if self.state()[0] != "intake":
                raise ServiceError(409, "the intake of this session is closed")
            row = conn.execute("SELECT digest FROM uploads WHERE client_id = ?",
                               (client_id,)).fetchone()
            stored = not already_stored(row["digest"] if row else None, digest, "share",
                                        client_id)
            if stored:
                write_private(self.state_dir / "uploads" / client_id / name, blob)
                conn.execute("INSERT INTO uploads VALUES (?, ?, ?, ?)",
                             (client_id, digest, len(blob), time.time()))
        return wire.UploadReceipt(session_id=self.session["session_id"], client_id=client_id,
                                  stored=stored, digest=digest)

    def info(self) -> DistSessionInfo:
        return DistSessionInfo(session_id=self.session["session_id"], party=self.x,
                               domain_sizes=list(self.layout.domain_sizes),
                               workload=[list(c) for c in self.session["workload"]],
                               modulus=str(self.session["modulus"]), cells=self.layout.length)

    def status(self) -> DistStatus:
        with self.db.connect() as conn:
            done = sorted(r["client_id"] for r in conn.execute("SELECT client_id FROM uploads"))
        state, detail = self.state()
        clients = sorted(self.session["client_token_hashes"])
        return DistStatus(session_id=self.session["session_id"], party=self.x, state=state,
                          clients_uploaded=done,
                          clients_missing=[c for c in clients if c not in done], detail=detail)

    def _set_state(self, state: str, detail: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO run VALUES (1, ?, ?, ?)",
                         (state, detail, time.time()))

    def start_run(self) -> None:
        with self._lock:
            if self.state()[0] != "intake":
                return  # idempotent: already started or finished
            self._set_state("running", "")
            parties = ",".join(f"{h}:{p}" for h, p in self.session["mpc_parties"])
            log = (self.state_dir / "party.log").open("ab")
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "distaim.party", "--pid", str(self.session["pid"]),
                 "--parties", parties, "--session-dir", str(self.state_dir),
                 "--out", str(self.state_dir / "result.json"),
                 "--timeout", str(self.session.get("mpc_timeout", 120)),
                 "--deadline", str(self.session.get("mpc_deadline", 3600))],
                cwd=_ROOT, stdout=log, stderr=subprocess.STDOUT)
            log.close()

    def step(self) -> None:
        with self._lock:
            proc = self._proc
            if proc is None or proc.poll() is None:
                return
            self._proc = None
        if proc.returncode == 0 and (self.state_dir / "result.json").exists():
            self._set_state("done", "")
        else:
            self._set_state("failed", f"MPC party exited with {proc.returncode}; see party.log")

    def result(self) -> dict:
        if self.state()[0] != "done":
            raise ServiceError(409, "no result yet")
        report = json.loads((self.state_dir / "result.json").read_text())
        report.pop("timings", None)
        return report

    def close(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.terminate()


def create_app(state_dir: Path, *, job_interval: float = 0.5) -> FastAPI:
    service = DistServer(state_dir)
    worker = BackgroundWorker("distaim-job", service.step, job_interval)
    app = service_app("feddpsyn DistAIM server",
                      "One of three MPyC servers running AIM on Shamir-shared marginals.",
                      worker, on_shutdown=service.close, max_body_bytes=MAX_BODY_BYTES)
    app.state.service = service
    responses = wire.ERROR_RESPONSES

    def own_client(session_id: wire.SessionId, client_id: wire.ClientId,
                   request: Request) -> None:
        service.check_session(session_id)
        if not service.client_authorised(client_id, bearer(request)):
            raise ServiceError(403, f"credentials are not those of client {client_id!r}")

    def member(session_id: wire.SessionId, request: Request) -> None:
        service.check_session(session_id)
        token = bearer(request)
        if not (service.operator_authorised(token) or any(
                service.client_authorised(c, token) for c in service.session[
                    "client_token_hashes"])):
            raise ServiceError(403, "credentials of this session required")

    def operator(session_id: wire.SessionId, request: Request) -> None:
        service.check_session(session_id)
        if not service.operator_authorised(bearer(request)):
            raise ServiceError(403, "operator credentials required")

    router = APIRouter(prefix="/sessions", tags=["distaim"], responses=responses)

    @router.put("/{session_id}/clients/{client_id}/share", response_model=wire.UploadReceipt,
                dependencies=[Depends(own_client)])
    def upload_share(session_id: wire.SessionId, client_id: wire.ClientId,
                     body: ShareUpload) -> wire.UploadReceipt:
        return service.store(client_id, body)

    @router.get("/{session_id}", response_model=DistSessionInfo,
                dependencies=[Depends(member)])
    def info(session_id: wire.SessionId) -> DistSessionInfo:
        return service.info()

    @router.get("/{session_id}/status", response_model=DistStatus,
                dependencies=[Depends(member)])
    def status(session_id: wire.SessionId) -> DistStatus:
        return service.status()

    @router.post("/{session_id}/run", response_model=DistStatus,
                 dependencies=[Depends(operator)])
    def run(session_id: wire.SessionId) -> DistStatus:
        service.start_run()
        return service.status()

    @router.get("/{session_id}/result", dependencies=[Depends(member)])
    def result(session_id: wire.SessionId) -> dict:
        return service.result()

    @app.get("/health", tags=["health"])
    def health() -> dict[str, str]:
        return {"status": "ok", "role": f"distaim-server-{service.x}"}

    app.include_router(router)
    return app
