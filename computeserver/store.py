"""What the compute server's roles use of its sessions: a small protocol, so that a role is
built from the store it needs (``computeserver.selection``, ``computeserver.noisy_greedy``)
rather than mixed into the server and reaching for attributes it never declared."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import httpx
import numpy as np

from feddpsyn.common import wire
from feddpsyn.common.serving import Database
from feddpsyn.params.session_plan import SessionPlan

__all__ = ["SessionStore"]


class SessionStore(Protocol):
    """The compute server's sessions (``computeserver.service.ComputeServer`` is one)."""

    db: Database

    def plan(self, session_id: str) -> SessionPlan:
        """The session's plan, from its public record."""

    def public(self, session_id: str) -> wire.SessionPublic:
        """The session's public record."""

    def session_dir(self, session_id: str) -> Path:
        """Where the session's files live (circuits, ciphertexts, outputs, the noise pool)."""

    def pool_noise(self, session_id: str, label: str, positions: np.ndarray) -> np.ndarray:
        """This server's noise drawn when it learned the session (``dp.noise_pool``)."""

    def peer_request(self, method: str, url: str, **kw) -> httpx.Response:
        """An authenticated request to the key server."""

    def peer(self, method: str, url: str, model, **kw):
        """A request to the key server whose answer must be 200 and parse as ``model``."""

    def block(self, session_id: str, detail: str) -> None:
        """Block the session with ``detail`` as its stated reason."""

    def set_progress(self, session_id: str, detail: str | None) -> None:
        """What a long step is doing now (``None``: nothing), shown in the status."""

    def report_progress(self, session_id: str, phase: str, done: int, total: int,
                        unit: str = "tasks", note: str = "") -> None:
        """A long step's progress, counted: shown in the status, logged and sent to the key
        server at most every few seconds (``computeserver.progress``)."""
