"""The operator's side of session creation over HTTP: send the request, then follow the
session's preparation until it is ready.

``POST /sessions`` answers 202 once the key server has checked the request and its plan
(4xx otherwise, nothing stored); the circuits are compiled and the keys generated after
that, as a job (``keyserver.preparation``). :func:`create_session` does both steps and
returns the session's public record with its clients' tokens; :func:`post_session` and
:func:`wait_ready` are the two steps apart (``feddpsyn session create --no-wait``). Every
wait is bounded by the caller's timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from feddpsyn.common import wire
from feddpsyn.common.tls import UNTRUSTED, certificate_refused
from feddpsyn.common.version import VERSION, VERSION_HEADER

__all__ = ["SessionError", "SessionNotReady", "post_session", "wait_ready", "create_session",
           "DEFAULT_TIMEOUT"]

# How long `session create` waits for a session to be ready, by default: compiling a
# selection module for a wide table and generating its keys takes minutes on 2 cores.
DEFAULT_TIMEOUT = 1800.0


class SessionError(RuntimeError):
    """The key server refused the session, or its preparation failed: the message says why
    (the server's own words)."""


class SessionNotReady(SessionError):
    """The session was still preparing when the wait ran out; it goes on preparing."""


def _auth(token: str) -> dict[str, str]:
    # The version too: a key server of a version that does not meet it refuses the request
    # in one line (``common.version``).
    return {"Authorization": f"Bearer {token}", VERSION_HEADER: VERSION}


def post_session(url: str, operator_token: str, request: wire.SessionCreate, *,
                 verify: bool | str = True, timeout: float = 120) -> wire.SessionAccepted:
    """``POST /sessions``: the accepted session (202), its clients' tokens (shown once)."""
    try:
        response = httpx.post(f"{url.rstrip('/')}/sessions", verify=verify, timeout=timeout,
                              content=request.model_dump_json(by_alias=True),
                              headers={**_auth(operator_token),
                                       "Content-Type": "application/json"})
    except httpx.TransportError as exc:
        if certificate_refused(exc):
            raise SessionError(f"{url}: {UNTRUSTED}") from None
        raise SessionError(f"key server {url} unreachable ({type(exc).__name__})") from None
    if response.status_code != 202:
        raise SessionError(f"{response.status_code}: {wire.error_detail(response, 500)}")
    return wire.SessionAccepted.model_validate_json(response.content)


def wait_ready(url: str, token: str, session_id: str, *, timeout: float = DEFAULT_TIMEOUT,
               progress: Callable[[wire.SessionStatus], None] | None = None,
               verify: bool | str = True, poll: float = 1.0) -> wire.SessionPublic:
    """The session's public record once its status says ``ready`` (``token``: the
    operator's or one of its clients'). ``progress(status)`` after each poll while it is
    preparing. Raises :class:`SessionError` when its preparation failed,
    :class:`SessionNotReady` after ``timeout`` seconds; a key server that does not answer
    (or answers 5xx) is asked again until then."""
    base = url.rstrip("/")
    deadline = time.monotonic() + timeout
    last_problem = ""
    with httpx.Client(base_url=base, headers=_auth(token), verify=verify,
                      timeout=min(60.0, max(timeout, 1.0))) as http:
        while True:  # bounded by the deadline
            try:
                response = http.get(f"/sessions/{session_id}/status")
            except httpx.TransportError as exc:
                last_problem = f"key server unreachable ({type(exc).__name__})"
            else:
                if response.status_code >= 500:
                    last_problem = f"{response.status_code}: {wire.error_detail(response)}"
                elif response.status_code >= 400:
                    raise SessionError(f"{response.status_code}: "
                                       f"{wire.error_detail(response, 500)}")
                else:
                    status = wire.SessionStatus.model_validate_json(response.content)
                    if status.state == "failed":
                        raise SessionError(f"session {session_id}: {status.detail}")
                    if status.state != "preparing":
                        public = http.get(f"/sessions/{session_id}")
                        if public.status_code != 200:
                            raise SessionError(f"{public.status_code}: "
                                               f"{wire.error_detail(public, 500)}")
                        return wire.SessionPublic.model_validate_json(public.content)
                    last_problem = status.detail
                    if progress is not None:
                        progress(status)
            if time.monotonic() + poll > deadline:
                raise SessionNotReady(
                    f"session {session_id} is not ready after {timeout:.0f} s (last: "
                    f"{last_problem}); it goes on preparing: follow it with `feddpsyn "
                    f"session status --session {session_id}`")
            time.sleep(poll)


def create_session(url: str, operator_token: str, request: wire.SessionCreate, *,
                   timeout: float = DEFAULT_TIMEOUT,
                   progress: Callable[[wire.SessionStatus], None] | None = None,
                   verify: bool | str = True, poll: float = 1.0) -> wire.SessionCreated:
    """:func:`post_session`, then :func:`wait_ready`: the ready session and its tokens."""
    accepted = post_session(url, operator_token, request, verify=verify)
    public = wait_ready(url, operator_token, accepted.session_id, timeout=timeout,
                        progress=progress, verify=verify, poll=poll)
    return wire.SessionCreated(session=public, client_tokens=accepted.client_tokens)
