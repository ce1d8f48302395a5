"""The compute server's HTTP API (FastAPI): client seed uploads and session status.

Everything else it does (fetching plans, circuits, evaluation keys and ciphertexts from the
key server; running Primitive 1 with noise; requesting decryption) is its background job,
which resumes from the durable state after a restart.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI, Request

from common import wire
from common.serving import BackgroundWorker, ServiceError, bearer, service_app
from computeserver.service import ComputeServer

log = logging.getLogger("feddpsyn.computeserver")

MAX_BODY_BYTES = 1024 * 1024


def create_app(state_dir: Path, keyserver_url: str, peer_token: str, *,
               job_interval: float = 0.5, verify: bool | str = True) -> FastAPI:
    service = ComputeServer(state_dir, keyserver_url, peer_token, verify=verify)
    worker = BackgroundWorker("compute-job", service.step, job_interval)

    app = service_app("feddpsyn compute server",
                      "Evaluation keys only: encrypted aggregation (FedDPSyn Primitive 1) "
                      "with discrete Gaussian noise under encryption.",
                      worker, on_shutdown=service.close, max_body_bytes=MAX_BODY_BYTES)
    app.state.service = service

    def own_client(session_id: wire.SessionId, client_id: wire.ClientId,
                   request: Request) -> None:
        token = bearer(request)
        if not service.client_authorised(session_id, client_id, token):
            raise ServiceError(403, f"credentials are not those of client {client_id!r} "
                                    "in this session")

    responses = wire.ERROR_RESPONSES
    clients = APIRouter(prefix="/sessions", tags=["client"], responses=responses)

    @clients.put("/{session_id}/clients/{client_id}/seed", response_model=wire.UploadReceipt,
                 dependencies=[Depends(own_client)])
    def upload_seed(session_id: wire.SessionId, client_id: wire.ClientId,
                    body: wire.SeedUpload) -> wire.UploadReceipt:
        receipt = service.store_seed(session_id, client_id, body)
        worker.wake()
        return receipt

    @clients.get("/{session_id}/status", response_model=wire.SessionStatus)
    def status(session_id: wire.SessionId, request: Request) -> wire.SessionStatus:
        token = bearer(request)
        public = service.public(session_id)
        if not any(service.client_authorised(session_id, c, token) for c in public.clients):
            raise ServiceError(403, "client credentials of this session required")
        return service.status(session_id)

    @app.get("/health", tags=["health"])
    def health() -> dict[str, str]:
        return {"status": "ok", "role": "computeserver"}

    app.include_router(clients)
    return app
