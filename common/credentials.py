"""Bearer credentials, issued, stored and checked one way by every server.

Design concerns: **only hashes are stored** (a server's state never holds a usable token);
**every comparison is constant-time**, and finding which client a token belongs to compares
it with every client's hash, so the time does not tell which one matched; **a check answers
404 for an unknown session before it looks at the token** where the route names a client,
so the error says what is wrong with the request first.

The routes take their checks from the factories below (``role_check``, ``own_client_check``,
``member_check``); a server only says where its hashes are (:class:`ClientTokens`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Protocol

from fastapi import HTTPException, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from feddpsyn.common import wire
from feddpsyn.common.serving import Database, ServiceError, write_private

__all__ = ["ClientTokens", "CLIENT_TOKENS_SQL", "store_client_tokens", "stored_token_hashes",
           "new_token", "token_hash", "token_matches", "read_or_create_token", "BEARER_SCHEME",
           "bearer",
           "is_client", "client_of_token", "role_check", "own_client_check", "member_check"]

# The table in which a server keeps its clients' token hashes (never the tokens).
CLIENT_TOKENS_SQL = """
CREATE TABLE IF NOT EXISTS client_tokens (
    session_id TEXT NOT NULL, client_id TEXT NOT NULL, token_hash TEXT NOT NULL,
    PRIMARY KEY (session_id, client_id));
"""


class ClientTokens(Protocol):
    """Where a server keeps its clients' token hashes."""

    def client_token_hashes(self, session_id: str) -> Mapping[str, str]:
        """client id -> token hash; ``ServiceError(404)`` for an unknown session."""


def store_client_tokens(conn: sqlite3.Connection, session_id: str,
                        tokens: Mapping[str, str]) -> None:
    """Keep the hashes of a new session's client tokens, in the caller's transaction."""
    conn.executemany("INSERT INTO client_tokens VALUES (?, ?, ?)",
                     [(session_id, c, token_hash(t)) for c, t in tokens.items()])


def stored_token_hashes(db: Database, session_id: str) -> dict[str, str]:
    """client id -> token hash of a session, from :data:`CLIENT_TOKENS_SQL`'s table."""
    with db.connect() as conn:
        return {r["client_id"]: r["token_hash"] for r in conn.execute(
            "SELECT client_id, token_hash FROM client_tokens WHERE session_id = ?",
            (session_id,))}


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(b"feddpsyn/token/v1" + token.encode()).hexdigest()


def token_matches(token: str, expected_hash: str) -> bool:
    return hmac.compare_digest(token_hash(token), expected_hash)


def read_or_create_token(path: Path) -> str:
    """A bearer token kept in a 0600 file (created on first use)."""
    if path.exists():
        token = path.read_text().strip()
        if not token:
            raise RuntimeError(f"{path} is empty")
        return token
    token = new_token()
    write_private(path, token.encode())
    return token


# The one security scheme of every server's OpenAPI document: each route that checks a
# credential declares it; the check itself (401 without a token) is ``bearer``'s.
BEARER_SCHEME = HTTPBearer(auto_error=False, scheme_name="bearer",
                           description="the operator's, a client's or the peer's token")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(BEARER_SCHEME)]


def bearer(credentials: HTTPAuthorizationCredentials | None) -> str:
    """The bearer token of a request (401 without one)."""
    token = credentials.credentials.strip() if credentials is not None else ""
    if not token:
        raise HTTPException(status_code=401, detail="missing bearer token",
                            headers={"WWW-Authenticate": "Bearer"})
    return token


def is_client(hashes: Mapping[str, str], client_id: str, token: str) -> bool:
    expected = hashes.get(client_id)
    return expected is not None and token_matches(token, expected)


def client_of_token(hashes: Mapping[str, str], token: str) -> str | None:
    """The client whose token this is, comparing with every hash (module docstring)."""
    found = None
    for client_id, expected in hashes.items():
        if token_matches(token, expected):
            found = client_id
    return found


def role_check(token: str, role: str) -> Callable[..., None]:
    """A route dependency admitting only the holder of ``token`` (the operator, the peer)."""
    expected = token_hash(token)

    def check(credentials: Credentials) -> None:
        if not token_matches(bearer(credentials), expected):
            raise ServiceError(403, f"{role} credentials required")

    return check


def own_client_check(tokens: ClientTokens) -> Callable[..., None]:
    """A route dependency admitting only the client the path names, with its own token."""

    def own_client(session_id: wire.SessionId, client_id: wire.ClientId,
                   credentials: Credentials) -> None:
        hashes = tokens.client_token_hashes(session_id)
        if not is_client(hashes, client_id, bearer(credentials)):
            raise ServiceError(403, f"credentials are not those of client {client_id!r} "
                                    "in this session")

    return own_client


def member_check(tokens: ClientTokens, operator_token: str | None) -> Callable[..., None]:
    """A route dependency admitting the operator (if given) or any client of the session."""
    operator_hash = None if operator_token is None else token_hash(operator_token)
    who = "client" if operator_hash is None else "operator or client"

    def member(session_id: wire.SessionId,
               credentials: Credentials) -> None:
        token = bearer(credentials)
        if operator_hash is not None and token_matches(token, operator_hash):
            return
        if client_of_token(tokens.client_token_hashes(session_id), token) is None:
            raise ServiceError(403, f"{who} credentials of this session required")

    return member
