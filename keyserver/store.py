"""What the key server's roles read of its sessions: a small protocol, so that a role is
built from the store it needs (``keyserver.selection``, ``keyserver.noisy_greedy``) rather
than mixed into the server and reaching for attributes it never declared."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from feddpsyn.common import wire
from feddpsyn.common.serving import Database
from feddpsyn.params.session_plan import SessionPlan

__all__ = ["SessionStore"]


class SessionStore(Protocol):
    """The key server's sessions (``keyserver.service.KeyServer`` is one)."""

    db: Database

    def plan(self, session_id: str) -> SessionPlan:
        """The session's plan; ``ServiceError(404)`` for an unknown session."""

    def public(self, session_id: str) -> wire.SessionPublic:
        """The session's public record."""

    def session_dir(self, session_id: str) -> Path:
        """Where the session's files live (keys, masked vectors, the noise pool)."""

    def uploaded_clients(self, session_id: str) -> list[str]:
        """The clients whose masked vectors are stored (not those left out)."""

    def absent_clients(self, session_id: str) -> list[str]:
        """The clients left out of the session (their masked vectors are zeros)."""

    def releases_done(self, session_id: str) -> list[str]:
        """The names of the releases already published."""

    def pool_noise(self, session_id: str, label: str, positions: np.ndarray) -> np.ndarray:
        """This server's noise drawn at session creation (``dp.noise_pool``)."""
