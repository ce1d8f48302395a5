"""The compute server's HTTP API (FastAPI): client seed uploads and session status.

Everything else it does (fetching plans, circuits, evaluation keys and ciphertexts from the
key server; running Primitive 1 with noise; requesting decryption) is its background job,
which resumes from the durable state after a restart.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI, Query

from feddpsyn.common import wire
from feddpsyn.common.credentials import member_check, own_client_check
from feddpsyn.common.serving import BackgroundWorker, service_app
from feddpsyn.computeserver.executor import Executor
from feddpsyn.computeserver.service import ComputeServer

log = logging.getLogger("feddpsyn.computeserver")

MAX_BODY_BYTES = 1024 * 1024


def create_app(state_dir: Path, keyserver_url: str, peer_token: str, *,
               job_interval: float = 0.5, verify: bool | str = True,
               executor: Executor | None = None) -> FastAPI:
    """``executor``: where the encrypted selection runs (``computeserver.executor``;
    default: in this process)."""
    service = ComputeServer(state_dir, keyserver_url, peer_token, verify=verify,
                            executor=executor)
    worker = BackgroundWorker("compute-job", service.step, job_interval)
    # New sessions are fetched by a job of their own: the compute job may be in a long
    # encrypted step of another session, and a client's first upload should not have to
    # fetch the session's keys inside its request.
    sync = BackgroundWorker("session-sync", service.sync_sessions, job_interval)

    def shutdown() -> None:
        sync.stop()
        service.close()

    app = service_app("feddpsyn compute server",
                      "Evaluation keys only: encrypted aggregation (FedDPSyn Primitive 1) "
                      "with discrete Gaussian noise under encryption.",
                      worker, on_shutdown=shutdown, max_body_bytes=MAX_BODY_BYTES)
    app.state.service = service

    @app.on_event("startup")
    def _start_sync() -> None:
        sync.start()

    own_client = own_client_check(service)
    any_client = member_check(service, operator_token=None)

    responses = wire.ERROR_RESPONSES
    clients = APIRouter(prefix="/sessions", tags=["client"], responses=responses)

    @clients.put("/{session_id}/clients/{client_id}/seed", response_model=wire.UploadReceipt,
                 dependencies=[Depends(own_client)])
    def upload_seed(session_id: wire.SessionId, client_id: wire.ClientId,
                    body: wire.SeedUpload,
                    replace: bool = Query(False, description=(
                        "replace this client's stored seed (and drop the ciphertexts of its "
                        "old upload) while the session's uploads are open; 409 once this "
                        "server started on them"))) -> wire.UploadReceipt:
        receipt = service.store_seed(session_id, client_id, body, replace)
        worker.wake()
        return receipt

    @clients.get("/{session_id}/status", response_model=wire.SessionStatus,
                 dependencies=[Depends(any_client)])
    def status(session_id: wire.SessionId) -> wire.SessionStatus:
        return service.status(session_id)

    @app.get("/health", tags=["health"])
    def health() -> dict[str, str]:
        return {"status": "ok", "role": "computeserver"}

    app.include_router(clients)
    return app
