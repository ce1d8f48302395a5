"""The key server's HTTP API (FastAPI). One router per caller: operator, client, peer.

Credentials: the operator's bearer token (``operator.token`` in the state directory, 0600),
the peer token shared with the compute server (``--peer-token-file``), and per-client tokens
issued at session creation (only their hashes are stored).
"""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi.responses import FileResponse
from starlette.concurrency import run_in_threadpool

from feddpsyn.common import wire
from feddpsyn.common.credentials import (
    member_check,
    own_client_check,
    read_or_create_token,
    role_check,
)
from feddpsyn.common.serving import BackgroundWorker, service_app
from feddpsyn.keyserver.limits import SessionLimits
from feddpsyn.keyserver.preparation import PrepareFiles
from feddpsyn.keyserver.service import KeyServer

log = logging.getLogger("feddpsyn.keyserver")

MAX_BODY_BYTES = 64 * 1024 * 1024
REPLACE_HELP = ("replace this client's stored masked vector (masked with a fresh seed) while "
                "the session's uploads are open; 409 once the compute server started on them")


def create_app(state_dir: Path, peer_token: str, *,
               encryption_interval: float = 0.5, prepare: PrepareFiles | None = None,
               preparation_workers: int = 1, offline_workers: int = 1,
               limits: SessionLimits | None = None,
               owner_caps: Path | None = None) -> FastAPI:
    """``prepare``: how a session's circuits, keys and noise pool are made, off the request
    path (default: in a child process; ``keyserver.preparation``); ``preparation_workers``:
    sessions prepared at once; ``offline_workers``: local processes the offline job's
    chunks are spread over (``keyserver.offline_pool``); ``limits``: what one session may
    ask (``keyserver.limits``: refused at once, 409); ``owner_caps``: lifetime caps per owner
    id across this server's sessions (``keyserver.owner_caps``)."""
    service = KeyServer(state_dir, prepare=prepare, preparation_workers=preparation_workers,
                        offline_workers=offline_workers, limits=limits, owner_caps=owner_caps)
    operator_token = read_or_create_token(state_dir / "operator.token")
    log.info("operator credentials: %s (mode 0600)", state_dir / "operator.token")
    worker = BackgroundWorker("encryption-job", service.run_encryption_job, encryption_interval)

    app = service_app("feddpsyn key server",
                      "Keys, offline encryption of masked uploads, noised decryption within a "
                      "privacy budget, and the privacy ledger.",
                      worker, on_shutdown=service.close, max_body_bytes=MAX_BODY_BYTES)
    app.state.service = service

    @app.on_event("startup")
    def _resume_preparations() -> None:
        # Sessions a stop or a crash left preparing are prepared again, or failed with the
        # reason (keyserver.preparation).
        service.preparation.resume()

    operator = role_check(operator_token, "operator")
    peer = role_check(peer_token, "peer")
    operator_or_client = member_check(service, operator_token)
    own_client = own_client_check(service)

    responses = wire.ERROR_RESPONSES

    def ready(session_id: wire.SessionId) -> None:
        """409 on a session still being prepared (after the caller's credentials)."""
        service.require_ready(session_id)

    ops = APIRouter(prefix="/sessions", tags=["operator"], responses=responses)

    @ops.post("", response_model=wire.SessionAccepted, status_code=202,
              dependencies=[Depends(operator)])
    def create_session(body: wire.SessionCreate, response: Response) -> wire.SessionAccepted:
        # Checked here (4xx, nothing stored); compiled and keyed as a job afterwards.
        accepted = service.create_session(body)
        response.headers["Location"] = accepted.status_url
        return accepted

    @ops.post("/{session_id}/uploads/close", response_model=wire.SessionStatus,
              dependencies=[Depends(operator), Depends(ready)])
    def close_without(session_id: wire.SessionId,
                      body: wire.UploadsCloseWithout) -> wire.SessionStatus:
        # The owners named are left out (none may have uploaded; the quorum must remain);
        # the session then runs on the others' uploads (keyserver.uploads).
        status = service.leave_out(session_id, body)
        worker.wake()
        return status

    @ops.get("/{session_id}/ledger", response_model=wire.LedgerView,
             dependencies=[Depends(operator), Depends(ready)])
    def ledger(session_id: wire.SessionId) -> wire.LedgerView:
        return service.ledger(session_id)

    clients = APIRouter(prefix="/sessions", tags=["client"], responses=responses)

    @clients.get("/{session_id}", response_model=wire.SessionPublic,
                 dependencies=[Depends(operator_or_client), Depends(ready)])
    def public(session_id: wire.SessionId) -> wire.SessionPublic:
        return service.public(session_id)

    @clients.get("/{session_id}/status", response_model=wire.SessionStatus,
                 dependencies=[Depends(operator_or_client)])
    def status(session_id: wire.SessionId) -> wire.SessionStatus:
        return service.status(session_id)

    @clients.get("/{session_id}/release", response_model=wire.ReleaseDocument,
                 dependencies=[Depends(operator_or_client), Depends(ready)])
    def release(session_id: wire.SessionId) -> wire.ReleaseDocument:
        return service.release_document(session_id)

    @clients.put("/{session_id}/clients/{client_id}/masked", response_model=wire.UploadReceipt,
                 dependencies=[Depends(own_client), Depends(ready)])
    def upload_masked(session_id: wire.SessionId, client_id: wire.ClientId,
                      body: wire.MaskedUpload,
                      replace: bool = Query(False, description=REPLACE_HELP)
                      ) -> wire.UploadReceipt:
        receipt = service.store_masked(session_id, client_id, body, replace)
        worker.wake()
        return receipt

    peers = APIRouter(prefix="/peer/sessions", tags=["peer"], responses=responses,
                      dependencies=[Depends(peer)])

    @peers.get("", response_model=list[str])
    def peer_sessions() -> list[str]:
        return service.session_ids()

    @peers.get("/{session_id}", response_model=wire.PeerSession)
    def peer_session(session_id: wire.SessionId) -> wire.PeerSession:
        return service.peer_session(session_id)

    @peers.get("/{session_id}/artefacts/{name}", response_class=FileResponse,
               dependencies=[Depends(ready)],
               responses={200: {"content": {"application/octet-stream": {}}}})
    def artefact(session_id: wire.SessionId, name: wire.ArtefactName) -> FileResponse:
        # Streamed from the file a block at a time: hundreds of MB of evaluation keys must
        # not hold the process while other peers' calls wait.
        return FileResponse(service.artefact_path(session_id, name),
                            media_type="application/octet-stream")

    @peers.post("/{session_id}/uploads/close", response_model=wire.UploadsClosed)
    def close_uploads(session_id: wire.SessionId, body: wire.UploadsClose) -> wire.UploadsClosed:
        return service.close_uploads(session_id, body)

    @peers.put("/{session_id}/progress", status_code=204, response_class=Response)
    def report_progress(session_id: wire.SessionId, body: wire.WorkProgress) -> Response:
        # The compute server's long step, shown in the session's status.
        service.record_progress(session_id, body)
        return Response(status_code=204)

    @peers.get("/{session_id}/ciphertexts", response_model=list[dict[str, str]])
    def ciphertext_index(session_id: wire.SessionId) -> list[dict[str, str]]:
        return service.ciphertext_index(session_id)

    @peers.get("/{session_id}/ciphertexts/{client_id}", response_class=Response,
               responses={200: {"content": {"application/octet-stream": {}}}})
    def ciphertexts(session_id: wire.SessionId, client_id: wire.ClientId) -> Response:
        return Response(service.ciphertexts(session_id, client_id),
                        media_type="application/octet-stream")

    @peers.get("/{session_id}/releases/{release}/coins/{chunk}", response_class=Response,
               responses={200: {"content": {"application/octet-stream": {}}}})
    def joint_coins(session_id: wire.SessionId, release: wire.ReleaseName,
                    chunk: int) -> Response:
        return Response(service.coins.coins(session_id, release, chunk),
                        media_type="application/octet-stream")

    @peers.get("/{session_id}/releases/{release}/inputs/{chunk}", response_class=Response,
               responses={200: {"content": {"application/octet-stream": {}}}})
    def packed_inputs(session_id: wire.SessionId, release: wire.ReleaseName,
                      chunk: int) -> Response:
        return Response(service.releases.packed_inputs(session_id, release, chunk),
                        media_type="application/octet-stream")

    @peers.put("/{session_id}/releases/{release}/manifest", response_model=wire.ReleaseProgress)
    def register_release(session_id: wire.SessionId, release: wire.ReleaseName,
                         body: wire.ReleaseManifest) -> wire.ReleaseProgress:
        return service.register_release(session_id, release, body)

    @peers.put("/{session_id}/releases/{release}/chunks/{chunk}",
               response_model=wire.ReleaseProgress,
               openapi_extra={"requestBody": {"content": {"application/octet-stream": {
                   "schema": {"type": "string", "format": "binary"}}}, "required": True}})
    async def decrypt_chunk(session_id: wire.SessionId, release: wire.ReleaseName,
                            chunk: int,
                            request: Request) -> wire.ReleaseProgress:
        body = await request.body()
        await run_in_threadpool(service.decrypt_chunk, session_id, release, chunk, body)
        return await run_in_threadpool(service.release_progress, session_id, release)

    @peers.get("/{session_id}/selection/inputs", response_class=Response,
               responses={200: {"content": {"application/octet-stream": {}}}})
    def selection_inputs(session_id: wire.SessionId) -> Response:
        return Response(service.selection.inputs(session_id),
                        media_type="application/octet-stream")

    @peers.post("/{session_id}/selection/rounds/{round_}/randomness", response_class=Response,
                responses={200: {"content": {"application/octet-stream": {}}}})
    def selection_randomness(session_id: wire.SessionId, round_: wire.RoundIndex) -> Response:
        return Response(service.selection.randomness(session_id, round_),
                        media_type="application/octet-stream")

    @peers.put("/{session_id}/selection/rounds/{round_}", response_model=wire.SelectionRound,
               openapi_extra={"requestBody": {"content": {"application/octet-stream": {
                   "schema": {"type": "string", "format": "binary"}}}, "required": True}})
    async def decide_round(session_id: wire.SessionId, round_: wire.RoundIndex,
                           request: Request) -> wire.SelectionRound:
        body = await request.body()
        return await run_in_threadpool(service.selection.decide_round, session_id, round_, body)

    @peers.get("/{session_id}/selection/score-bits", response_class=Response,
               responses={200: {"content": {"application/octet-stream": {}}}})
    def noisy_score_bits(session_id: wire.SessionId) -> Response:
        return Response(service.selection.noisy_greedy.score_bits(session_id),
                        media_type="application/octet-stream")

    @peers.put("/{session_id}/selection/noisy-scores", response_model=wire.NoisyGreedyDecision,
               openapi_extra={"requestBody": {"content": {"application/octet-stream": {
                   "schema": {"type": "string", "format": "binary"}}}, "required": True}})
    async def decide_noisy_greedy(session_id: wire.SessionId,
                                  request: Request) -> wire.NoisyGreedyDecision:
        body = await request.body()
        return await run_in_threadpool(service.selection.noisy_greedy.decide, session_id,
                                     body)

    @peers.post("/{session_id}/releases/{release}/finalize", response_model=wire.ReleaseResult)
    def finalize_release(session_id: wire.SessionId,
                         release: wire.ReleaseName) -> wire.ReleaseResult:
        return service.finalize_release(session_id, release)

    @app.get("/health", tags=["health"])
    def health() -> dict[str, str]:
        return {"status": "ok", "role": "keyserver"}

    app.include_router(ops)
    app.include_router(clients)
    app.include_router(peers)
    return app
