"""What every server shares: durable SQLite access, a background worker, the error shape, a
body limit, private files, logging (credentials: ``common.credentials``).

Design concerns: **state survives a kill at any point** (SQLite in WAL mode with
synchronous=FULL, and files written to a temporary name, fsynced, then renamed);
**every background loop is bounded**
(it stops when the server stops, and each pass does a finite amount of work).
"""

from __future__ import annotations

import hmac
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Re-exported: the servers import it from here; the client agent from common.files.
from feddpsyn.common.files import write_private as write_private
from feddpsyn.common.version import VERSION, VERSION_HEADER, compatible, refusal

log = logging.getLogger("feddpsyn")


class ServiceError(Exception):
    """An error with an HTTP status and a message safe to show to the caller."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def already_stored(stored: str | None, new: str, what: str, client_id: str) -> bool:
    """Upload idempotence, shared by both servers: True if this exact upload is already
    stored (answer stored=false, change nothing); a different one is refused with 409."""
    if stored is None:
        return False
    if hmac.compare_digest(stored, new):
        return True
    raise ServiceError(409, f"client {client_id!r} already uploaded a different {what} for "
                            "this session")


def service_app(title: str, description: str, worker: BackgroundWorker,
                on_shutdown: Callable[[], None], max_body_bytes: int) -> FastAPI:
    """A FastAPI app with what both servers need: the background job's lifetime, typed
    errors as ``{"detail": ...}``, and a body-size limit checked before any body is read."""
    app = FastAPI(title=title, version="1", description=description)
    app.state.worker = worker

    @app.on_event("startup")
    def _start() -> None:
        worker.start()

    @app.on_event("shutdown")
    def _stop() -> None:
        worker.stop()
        on_shutdown()

    @app.exception_handler(ServiceError)
    def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse(status_code=exc.status, content={"detail": exc.message})

    @app.exception_handler(RequestValidationError)
    def _invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        # One error shape for every 4xx ({"detail": str}, as documented), naming each field.
        problems = []
        for error in exc.errors()[:5]:
            where = ".".join(str(part) for part in error.get("loc", ()))
            problems.append(f"{where}: {error.get('msg', 'invalid')}")
        more = len(exc.errors()) - len(problems)
        detail = "invalid request: " + "; ".join(problems) + (f"; and {more} more" if more > 0
                                                              else "")
        return JSONResponse(status_code=422, content={"detail": detail})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        # FastAPI answers a JSON body it cannot decode at all (bytes that are not UTF-8,
        # nesting too deep for the parser) with an undocumented 400; it is the same client
        # mistake as malformed JSON, which is a documented 422.
        if exc.status_code == 400 and exc.__cause__ is not None:
            reason = {UnicodeDecodeError: "not UTF-8 text",
                      RecursionError: "nested too deeply"}.get(type(exc.__cause__),
                                                               type(exc.__cause__).__name__)
            return JSONResponse(status_code=422, content={
                "detail": f"invalid request: body: not readable as JSON ({reason})"})
        if exc.status_code == 405:
            # Starlette names the methods of the first route whose path matched; a path
            # served by several routes (one per method) allows all of theirs.
            return await http_exception_handler(request, StarletteHTTPException(
                405, exc.detail, headers={"Allow": ", ".join(_allowed_methods(request))}))
        return await http_exception_handler(request, exc)

    app.state.max_body_bytes = max_body_bytes
    app.add_middleware(VersionGate)
    return app


class VersionGate:
    """ASGI middleware: a request whose :data:`VERSION_HEADER` names a version that does not
    meet this server's is refused with 409 and one line saying which versions meet, before
    any route runs; every answer carries this server's version (``common.version``)."""

    def __init__(self, app: ASGIApp):
        self.app = app
        self._header = VERSION_HEADER.lower().encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        theirs = next((value.decode("latin-1") for name, value in scope.get("headers", [])
                       if name == self._header), None)
        ours = (self._header, VERSION.encode())
        if theirs is not None and not compatible(theirs, VERSION):
            body = JSONResponse(status_code=409, content={
                "detail": refusal(theirs, "caller", VERSION)}).body
            await send({"type": "http.response.start", "status": 409,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode()), ours]})
            await send({"type": "http.response.body", "body": body})
            return

        async def send_with_version(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), ours]}
            await send(message)

        await self.app(scope, receive, send_with_version)


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app serves at the request's path."""
    allowed: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches({**request.scope, "method": "GET"})
        if match != Match.NONE:
            allowed |= getattr(route, "methods", None) or set()
    return sorted(allowed)


class BodyLimit:
    """ASGI wrapper refusing bodies over ``max_bytes`` with 413, before reading them whole.

    A declared Content-Length over the limit is refused before any byte is read; a body
    without one (chunked) is counted as it streams and refused as soon as it passes the
    limit. It wraps the whole app (outside FastAPI's error handling), so the refusal is a
    clean 413 rather than a 500.
    """

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def _refuse(self, send: Send) -> None:
        body = JSONResponse(status_code=413, content={
            "detail": f"request body larger than {self.max_bytes} bytes"}).body
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await self._refuse(send)
        received = 0
        started = refused = False

        async def counting_receive() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes and not started:
                    # Answer now; the app then sees a disconnected client and stops reading.
                    refused = True
                    await self._refuse(send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # the 413 has been sent; drop whatever the app answers afterwards
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not refused:
                raise


class Database:
    """A SQLite file opened per call (safe across uvicorn's worker threads)."""

    def __init__(self, path: Path, schema_sql: str):
        self.path = path
        self._write_lock = threading.Lock()
        # The server's tokens (hashed) and records: the owner's only, as write_private's
        # files; SQLite gives its -wal and -shm files the database file's mode.
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
        with self.connect() as conn:
            conn.executescript(schema_sql)

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        conn = self._open()
        try:
            yield conn
        finally:
            conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """An IMMEDIATE transaction: writers are serialised, so check-then-write is atomic."""
        with self._write_lock:
            conn = self._open()
            try:
                conn.execute("BEGIN IMMEDIATE")
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            finally:
                conn.close()


class BackgroundWorker:
    """Runs ``step`` every ``interval`` seconds on a daemon thread until ``stop``."""

    def __init__(self, name: str, step: Callable[[], object], interval: float = 0.5):
        self.name = name
        self._step = step
        self._interval = interval
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        # Idempotent: an app's startup hook may run more than once (e.g. under test
        # transports); one job thread per server is what we want.
        if not self._thread.is_alive() and not self._stop.is_set():
            self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 10) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as exc:  # keep serving; the step is retried next pass
                log.warning("%s: step failed: %s", self.name, _safe_error(exc))
            self._wake.wait(self._interval)
            self._wake.clear()


def _safe_error(exc: BaseException) -> str:
    # Exception text from our own code never carries key material; we still cut it short so
    # that a library message quoting a large buffer cannot flood the log.
    text = f"{type(exc).__name__}: {exc}"
    return text[:300]


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # One line per peer request at INFO would drown the job's own progress lines.
    logging.getLogger("httpx").setLevel(logging.WARNING)
