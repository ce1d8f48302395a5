"""One DistAIM server's HTTP intake (FastAPI): the operator creates sessions and starts their
MPC runs, clients upload their shares, anyone with a credential of a session reads its
release.

Each of the three servers runs this app with its own state directory, its own party number
(1, 2 or 3) and its own MPC listen address (``feddpsyn distaim serve --party X
--mpc-address HOST:PORT``). Routes, one router for ``/sessions``, each route with its
caller's check:

* operator (bearer token in ``operator.token``, state directory, mode 0600): ``GET /server``
  is public (party, MPC address, field: what the operator's CLI checks); ``POST /sessions``
  creates a session from a ``SessionRequest``: the server derives the public plan itself
  (``distaim.plan``), refuses one it cannot run or whose MPC address for this server is not
  its own (409, nothing stored; a body that breaks the document: 422), and returns the plan
  digest and one bearer token per client, shown once (only hashes are kept; each server
  issues its own, so no server can upload in a client's name at another). Creation is
  idempotent by session id + plan digest (the same request again: 200, ``created=false``, no
  tokens; another plan under the same id: 409). ``DELETE /sessions/{id}`` removes a session
  that is not running (the CLI's rollback when another server refused). ``POST
  /sessions/{id}/run`` closes the intake and starts this server's MPC party as a child
  process (``python -m distaim.party``: MPyC keeps its runtime in process globals, so one
  run = one process; one run at a time per server, as the MPC address is the server's); the
  parties compare plan digests first.
* clients (their session token): ``PUT /sessions/{id}/clients/{cid}/share``; ``GET`` the
  session, its status and its result.

Bodies: ``distaim.wire``; state and logic: ``distaim.service``. Design concerns as in
``common.serving``: typed bodies, one error shape, a body limit checked before reading;
credentials from ``common.credentials``.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI, Response

from feddpsyn.common import wire
from feddpsyn.common.credentials import (
    member_check,
    own_client_check,
    read_or_create_token,
    role_check,
)
from feddpsyn.common.serving import BackgroundWorker, service_app
from feddpsyn.distaim.plan import SessionRequest
from feddpsyn.distaim.service import DistServer
from feddpsyn.distaim.wire import (
    MAX_BODY_BYTES,
    DistSessionCreated,
    DistSessionInfo,
    DistStatus,
    SeedShare,
    ServerInfo,
    ShareUpload,
    VectorShare,
)

__all__ = ["create_app"]

CREATE_HELP = (
    "Create a session from the operator's request (the same at the three servers). 422: the "
    "body breaks this document. 409: the body is well formed but this server cannot run its "
    "plan: the schema's own rules (distinct column names, min < max, distinct categories), "
    "workload indices within the schema, participation in (0, 1], a workload that fits one "
    "upload and the in-MPC selection, a plan whose least extra delta fits its reserve (the "
    "message names the largest epsilon or the delta that fits), this server's own MPC "
    "address and TLS setting; or the session id exists with another plan.")
SHARE_HELP = (
    "Upload this client's share: server 1 takes the seed, servers 2 and 3 the share vector "
    "(this document declares the one this server takes). 409: a vector of another length "
    "than the session's cells or with an element outside its field, another share already "
    "stored for this client, or the intake closed.")


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

    # One router for the paths under /sessions, each route with its caller's check: a path
    # served for several callers (GET and DELETE /sessions/{id}) is one router's.
    sessions = APIRouter(prefix="/sessions", responses=responses)
    as_operator = [Depends(operator)]

    @sessions.post("", response_model=DistSessionCreated, status_code=201, tags=["operator"],
                   dependencies=as_operator,
                   responses={200: {"description": "exists already with this plan (no "
                                                   "tokens)", "model": DistSessionCreated}},
                   description=CREATE_HELP)
    def create_session(body: SessionRequest, response: Response) -> DistSessionCreated:
        created, new = service.create(body)
        if not new:
            response.status_code = 200
        return created

    @sessions.delete("/{session_id}", status_code=204, tags=["operator"],
                     dependencies=as_operator)
    def delete_session(session_id: wire.SessionId) -> Response:
        service.delete(session_id)
        return Response(status_code=204)

    @sessions.post("/{session_id}/run", response_model=DistStatus, tags=["operator"],
                   dependencies=as_operator)
    def run(session_id: wire.SessionId) -> DistStatus:
        service.start_run(session_id)
        return service.status(session_id)

    # This server's share, and only it, is what its document declares the body to be.
    share_url = "/{session_id}/clients/{client_id}/share"
    share_route = sessions.put(share_url, response_model=wire.UploadReceipt, tags=["client"],
                               dependencies=[Depends(own_client)], description=SHARE_HELP)
    if service.x == 1:
        @share_route
        def upload_seed(session_id: wire.SessionId, client_id: wire.ClientId,
                        body: SeedShare) -> wire.UploadReceipt:
            return service.store(session_id, client_id, ShareUpload(seed_hex=body.seed_hex))
    else:
        @share_route
        def upload_vector(session_id: wire.SessionId, client_id: wire.ClientId,
                          body: VectorShare) -> wire.UploadReceipt:
            return service.store(session_id, client_id,
                                 ShareUpload(vector_b64=body.vector_b64))

    as_member = [Depends(member)]

    @sessions.get("/{session_id}", response_model=DistSessionInfo, tags=["client"],
                  dependencies=as_member)
    def info(session_id: wire.SessionId) -> DistSessionInfo:
        return service.info(session_id)

    @sessions.get("/{session_id}/status", response_model=DistStatus, tags=["client"],
                  dependencies=as_member)
    def status(session_id: wire.SessionId) -> DistStatus:
        return service.status(session_id)

    @sessions.get("/{session_id}/result", tags=["client"], dependencies=as_member)
    def result(session_id: wire.SessionId) -> dict:
        return service.result(session_id)

    @app.get("/server", response_model=ServerInfo, tags=["health"])
    def server() -> ServerInfo:
        from feddpsyn.distaim.plan import PLAN_VERSION
        return ServerInfo(role=f"distaim-server-{service.x}", party=service.x,
                          mpc_address=service.mpc_address, modulus=str(service.modulus),
                          mpc_channel_tls=bool(service.mpc_tls), plan_version=PLAN_VERSION)

    @app.get("/health", tags=["health"])
    def health() -> dict[str, str]:
        return {"status": "ok", "role": f"distaim-server-{service.x}"}

    app.include_router(sessions)
    return app
