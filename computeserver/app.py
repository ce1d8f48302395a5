"""The compute server's HTTP API (FastAPI): client seed uploads and session status.

Everything else it does (fetching plans, circuits, evaluation keys and ciphertexts from the
key server; running Primitive 1 with noise; requesting decryption) is its background job,
which resumes from the durable state after a restart.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from computeserver.service import ComputeServer, ServiceError
from feddpsyn import wire
from feddpsyn.serving import BackgroundWorker, bearer

log = logging.getLogger("feddpsyn.computeserver")

MAX_BODY_BYTES = 1024 * 1024


def create_app(state_dir: Path, keyserver_url: str, peer_token: str, *,
               job_interval: float = 0.5) -> FastAPI:
    service = ComputeServer(state_dir, keyserver_url, peer_token)
    worker = BackgroundWorker("compute-job", service.step, job_interval)

    app = FastAPI(title="feddpsyn compute server", version="1",
                  description="Evaluation keys only: encrypted aggregation (FedDPSyn "
                              "Primitive 1) with discrete Gaussian noise under encryption.")
    app.state.service = service
    app.state.worker = worker

    @app.on_event("startup")
    def _start() -> None:
        worker.start()

    @app.on_event("shutdown")
    def _stop() -> None:
        worker.stop()
        service.close()

    @app.exception_handler(ServiceError)
    def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse(status_code=exc.status, content={"detail": exc.message})

    @app.middleware("http")
    async def _limit_body(request: Request, call_next):
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return JSONResponse(status_code=413, content={
                "detail": f"request body larger than {MAX_BODY_BYTES} bytes"})
        return await call_next(request)

    def own_client(session_id: str, client_id: str, request: Request) -> None:
        token = bearer(request)
        if not service.client_authorised(session_id, client_id, token):
            raise ServiceError(403, f"credentials are not those of client {client_id!r} "
                                    "in this session")

    responses = {403: {"model": wire.ErrorBody}, 404: {"model": wire.ErrorBody},
                 409: {"model": wire.ErrorBody}}
    clients = APIRouter(prefix="/sessions", tags=["client"], responses=responses)

    @clients.put("/{session_id}/clients/{client_id}/seed", response_model=wire.UploadReceipt,
                 dependencies=[Depends(own_client)])
    def upload_seed(session_id: str, client_id: str, body: wire.SeedUpload) -> wire.UploadReceipt:
        receipt = service.store_seed(session_id, client_id, body)
        worker.wake()
        return receipt

    @clients.get("/{session_id}/status", response_model=wire.SessionStatus)
    def status(session_id: str, request: Request) -> wire.SessionStatus:
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
