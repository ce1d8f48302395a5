"""A session's preparation, off the request path: ``POST /sessions`` checks the request and
its plan and answers 202; compiling the circuits, generating the keys and drawing the noise
pool run afterwards as a job.

Design concerns:

* **An answer within a second or two, whatever the request.** The request is first held
  to this server's limits on its JSON alone (``keyserver.limits``: columns, categories,
  cells, clients; 409 naming the limit), before any schema or plan is built: a schema of a
  million categories costs the parse of its body, nothing more. Then the schema's own rules
  and the budget split (409), and the queue (503).
* **Refused at once, or accepted and failed with the reason.** The plan (its budget
  calibrated on exact privacy-loss distributions, the noise rules, the public record giving
  back the plan: ``keyserver.sessions``) is built on a planning thread; the request waits
  for it :data:`ACCEPT_WAIT_S` at most. A plan refused within that time is a 409 and
  nothing is stored. A plan that takes longer (a wide table, a server just started) is
  accepted: the job waits for the plan first, and a refusal then fails the preparation
  with the same reason, which the session's status and ``session create`` show. An
  accepted session is a row in ``session_preparation`` (state ``preparing``, the phase it
  is in, the request and, once planned, the record drafted from it) and its clients' token
  hashes, written in one transaction before the answer.
* **Off the request path, and off the interpreter.** The job runs on the server's
  :class:`common.jobs.JobQueue` (one session at a time by default; a full queue refuses
  new sessions with 503), and its heavy step, :func:`prepare_files`, in a child process
  (``common.jobs.run_in_child``): concrete's compiler holds the interpreter's lock for
  tens of seconds, which on a thread would stall every request of this server.
* **Nothing half-made is used.** The child writes into a fresh work folder; only once it
  has finished, and the compiled bootstraps are within the plan's reserve, is the folder
  renamed to the session's and the session recorded (its ``sessions`` row, and the
  preparation's state ``ready``, in one transaction). Until then every route that would use
  the session answers 409 and says to wait; the compute server is not told of it.
* **The idle core does the joint noise's first sets.** The compiler runs on one core for
  tens of seconds; once the joint circuit's keys are written, the offline pool draws and
  encrypts the sets the session's releases will want (``keyserver.coins``:
  ``JointCoins.make_ahead``) until the preparation finishes. A preparation that does not
  finish drops them (they are under its keys), and each attempt starts by dropping any a
  cut-short one left.
* **A restart never leaves a session preparing forever.** A session found ``preparing`` at
  start-up is prepared again from its stored request (its plan rebuilt and checked against
  the draft recorded at acceptance: a server whose plan rules changed in between fails it,
  with that reason), at most :data:`MAX_ATTEMPTS` times in all; after that it is failed
  with the reason. Nothing of a cut-short attempt was published or used, so starting over
  is safe; its work folder is removed.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from pathlib import Path
from typing import Protocol

from feddpsyn.common import wire
from feddpsyn.common.credentials import new_token, store_client_tokens
from feddpsyn.common.jobs import (
    ChildFailed,
    ChildProcesses,
    JobQueue,
    JobsBusy,
    JobStopped,
    run_in_child,
)
from feddpsyn.common.serving import Database, ServiceError, write_private
from feddpsyn.dp.noise_pool import draw_pool
from feddpsyn.keyserver.keys import SessionKeys
from feddpsyn.keyserver.limits import LimitExceeded, SessionLimits
from feddpsyn.keyserver.offline_pool import KeyFiles
from feddpsyn.keyserver.owner_caps import OwnerCaps
from feddpsyn.keyserver.selection import compiled_bootstraps, create_selection_files
from feddpsyn.keyserver.sessions import PlanMismatch, SessionRegistry, build_plan, confirm_published
from feddpsyn.params.schema import Schema, SchemaError
from feddpsyn.params.session_plan import SessionPlan

__all__ = ["SessionPreparation", "prepare_files", "prepare_in_child", "PrepareFiles",
           "MAX_ATTEMPTS"]

log = logging.getLogger("feddpsyn.keyserver")

# Attempts at preparing one session, counting those a server restart cut short.
MAX_ATTEMPTS = 3

QUEUED = "queued"
PLANNING = "building the plan (its budget calibrated)"

# How long ``POST /sessions`` waits for the plan before it accepts the session and leaves the
# plan to the job (module docstring).
ACCEPT_WAIT_S = 1.0

Planned = tuple[SessionPlan, wire.SessionPublic]


def prepare_files(plan: SessionPlan, n_clients: int, directory: Path, *,
                  report: Callable[[str], None] = lambda _: None) -> dict[str, int] | None:
    """The heavy part of a session's preparation, writing into ``directory``: the P1
    circuit and its keys (the secret key 0600), the selection module and its keys, and
    this server's noise pool; returns the selection's bootstraps per function call (None
    without a selection). ``report(phase)`` names each step."""
    report("compiling the aggregation circuit and generating its keys")
    _, server_zip, evaluation_keys = SessionKeys.create(plan, n_clients, directory)
    write_private(directory / "server.zip", server_zip)
    write_private(directory / "evaluation_keys.bin", evaluation_keys)
    del server_zip, evaluation_keys
    per_function = None
    if plan.selection is not None:
        report(f"compiling the {plan.selection.mode} selection module and generating its keys")
        per_function = create_selection_files(plan, directory)
    # Every noise this server may add, drawn now, before any data (dp.noise_pool).
    report("drawing this server's noise pool")
    write_private(directory / "noise_pool.npz", draw_pool(plan.noise_draws()))
    return per_function


class WhileCompiling(Protocol):
    """Work a session's preparation starts once its joint circuit's keys exist, on the
    offline pool while the selection module compiles (``keyserver.coins``)."""

    def make_ahead(self, session_id: str, plan: SessionPlan, files: KeyFiles,
                   done: threading.Event) -> int: ...

    def forget(self, session_id: str) -> None: ...


class PrepareFiles(Protocol):
    """How a job runs :func:`prepare_files`: ``report`` takes each phase, ``stop`` is set
    when the server stops (raise :class:`common.jobs.JobStopped` then)."""

    def __call__(self, plan: SessionPlan, n_clients: int, directory: Path, *,
                 report: Callable[[str], None],
                 stop: threading.Event) -> dict[str, int] | None: ...


def prepare_in_child(plan: SessionPlan, n_clients: int, directory: Path, *,
                     report: Callable[[str], None], stop: threading.Event,
                     children: ChildProcesses | None = None) -> dict[str, int] | None:
    """:func:`prepare_files` in a spawned child process (module docstring)."""
    return run_in_child(prepare_files, (plan, n_clients, directory), stop=stop,
                        on_phase=report, children=children)


class SessionPreparation:
    """Accepts sessions (:meth:`accept`), prepares them as jobs, and resumes the ones a
    restart cut short (:meth:`resume`)."""

    def __init__(self, db: Database, sessions: SessionRegistry, *,
                 prepare: PrepareFiles | None = None, workers: int = 1,
                 max_pending: int = 8, ahead: WhileCompiling | None = None,
                 limits: SessionLimits | None = None, caps: OwnerCaps | None = None):
        self.db = db
        self.sessions = sessions
        self._ahead = ahead
        self.limits = limits or SessionLimits()
        self.caps = caps or OwnerCaps(db, None)
        # Plans are built here, one at a time, so a request waits for its plan a bounded time
        # (ACCEPT_WAIT_S) and a slow one goes on for the job.
        self._planner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="planning")
        # One child spawned ahead, concrete imported: a job starts compiling at once.
        self.children = ChildProcesses(preload=(__name__,))
        self._in_child = prepare is None
        self._prepare = prepare or partial(prepare_in_child, children=self.children)
        self.jobs = JobQueue("session-preparation", workers, max_pending)

    # ------------------------------------------------------------ the request
    def accept(self, request: wire.SessionCreate) -> wire.SessionAccepted:
        """Check the request (and its plan, if it is built within :data:`ACCEPT_WAIT_S`),
        record the session as preparing, queue its job (module docstring)."""
        # The body has the documented shape (else FastAPI's 422). This server's limits are
        # checked on that JSON before anything is built from it (409); what the document
        # cannot say (the schema's own rules, pairs within it, a plan that fits the parameter
        # sets and the budget) is refused with 409, its message naming the rule or remedy.
        try:
            self.limits.check(request.schema_, len(request.clients), request.pairs)
        except LimitExceeded as exc:
            # 409, as every refusal of a request the document allows: it conflicts with this
            # server's configuration, not with the API's shape.
            raise ServiceError(409, str(exc)) from None
        try:
            Schema.from_dict(request.schema_)  # a clear message before anything else
        except SchemaError as exc:
            raise ServiceError(409, f"invalid schema: {exc}") from None
        refusal = wire.split_refusal(request.budget.split)
        if refusal is not None:
            raise ServiceError(409, refusal)
        if self.jobs.full():
            raise ServiceError(503, f"{self.jobs.pending()} sessions are being prepared at "
                                    "this key server; create this one when one of them is "
                                    "ready")
        session_id = "s-" + secrets.token_hex(8)
        planning = self._planner.submit(self._plan, session_id, request)
        draft: wire.SessionPublic | None = None
        try:
            plan, draft = planning.result(timeout=ACCEPT_WAIT_S)
        except FutureTimeout:
            plan = None  # the job waits for it, and fails with the reason if it is refused
        except ValueError as exc:
            raise ServiceError(409, str(exc)) from None
        except PlanMismatch as exc:
            raise ServiceError(500, f"session not created: {exc}") from None
        tokens = {c: new_token() for c in request.clients}
        with self.db.transaction() as conn:
            conn.execute("INSERT INTO session_preparation VALUES (?, ?, ?, ?, 'preparing', ?, "
                         "NULL, ?, NULL, 0)",
                         (session_id, request.model_dump_json(by_alias=True),
                          "" if draft is None else draft.model_dump_json(by_alias=True),
                          json.dumps(request.clients), QUEUED if plan else PLANNING,
                          time.time()))
            store_client_tokens(conn, session_id, tokens)
        if draft is not None:
            self.caps.release(session_id)  # counted from its row now
        self._submit(session_id, request, planning, force=True)
        log.info("session %s accepted: %d clients, %s; preparing", session_id,
                 len(request.clients), "planning" if plan is None
                 else f"{plan.layout.total_cells} cells")
        return wire.SessionAccepted(session_id=session_id,
                                    status_url=f"/sessions/{session_id}/status",
                                    client_tokens=tokens)

    def _plan(self, session_id: str, request: wire.SessionCreate) -> Planned:
        """The session's plan and the public record drafted from it, which must give back
        this plan, as it will after a restart (``keyserver.sessions``; the final record is
        checked again when the session is recorded), within the capped owners' lifetime
        budgets at this server (``keyserver.owner_caps``)."""
        plan = build_plan(request)
        draft = plan.to_public(session_id, request.clients)
        confirm_published(plan, draft)
        self.caps.check(draft)
        return plan, draft

    def _submit(self, session_id: str, request: wire.SessionCreate,
                planning: Future[Planned], *, force: bool = False) -> None:
        try:
            self.jobs.submit(session_id, lambda stop: self._run(session_id, request, planning,
                                                                stop), force=force)
        except JobsBusy:  # only without force; accept() checks first
            raise ServiceError(503, "too many sessions are being prepared; retry later"
                               ) from None

    # ------------------------------------------------------------ the job
    def _set(self, session_id: str, **fields: object) -> None:
        assignments = ", ".join(f"{name} = ?" for name in fields)
        with self.db.transaction() as conn:
            conn.execute(f"UPDATE session_preparation SET {assignments} WHERE id = ?",
                         (*fields.values(), session_id))

    def _fail(self, session_id: str, phase: str, reason: str) -> None:
        self._set(session_id, state="failed", phase=phase, reason=reason,
                  finished=time.time())
        log.warning("session %s: preparation failed (%s): %s", session_id, phase, reason)

    def _planned(self, session_id: str, planning: Future[Planned],
                 stop: threading.Event) -> SessionPlan | None:
        """The job's first step: the plan, once built (its draft recorded if the request did
        not wait for it); None if it was refused (the session failed with the reason) or
        the server stopped."""
        while True:  # bounded: the planning thread builds one plan, then this returns
            try:
                plan, draft = planning.result(timeout=0.5)
                break
            except FutureTimeout:
                if stop.is_set():
                    return None
            except (ValueError, PlanMismatch) as exc:
                self._fail(session_id, PLANNING, f"the plan is refused: {exc}"[:500])
                return None
        with self.db.transaction() as conn:
            conn.execute("UPDATE session_preparation SET draft_json = ? WHERE id = ? AND "
                         "draft_json = ''", (draft.model_dump_json(by_alias=True), session_id))
        self.caps.release(session_id)
        return plan

    def _run(self, session_id: str, request: wire.SessionCreate, planning: Future[Planned],
             stop: threading.Event) -> None:
        plan = self._planned(session_id, planning, stop)
        if plan is None:
            return
        with self.db.transaction() as conn:
            conn.execute("UPDATE session_preparation SET attempts = attempts + 1, phase = ? "
                         "WHERE id = ?", ("starting the preparation process", session_id))
        phase = ["starting the preparation process"]
        started = time.time()
        workdir = self.sessions.state_dir / "sessions" / f".{session_id}.{secrets.token_hex(4)}"
        # Sets a cut-short attempt made are under keys this attempt replaces.
        if self._ahead is not None:
            self._ahead.forget(session_id)
        ahead_done = threading.Event()
        helper: list[threading.Thread] = []

        def report(text: str) -> None:
            phase[0] = text
            self._set(session_id, phase=text)
            log.info("session %s: %s", session_id, text)
            if not helper and self._ahead is not None:
                helper.extend(self._start_ahead(session_id, plan, len(request.clients),
                                                workdir, ahead_done))

        try:
            per_function = self._prepare(plan, len(request.clients), workdir, report=report,
                                         stop=stop)
            # No new set from here: the pool is wanted for the uploads once the session is
            # ready; a set in flight is stored (its keys are the session's).
            ahead_done.set()
            report("recording the session")
            bootstraps = (None if per_function is None
                          else compiled_bootstraps(plan, per_function))
            public = plan.to_public(session_id, request.clients, bootstraps)
            final = self.sessions.session_dir(session_id)
            if final.exists():  # left by an attempt cut short after its rename
                shutil.rmtree(final)
            os.replace(workdir, final)

            def ready(conn: sqlite3.Connection) -> None:
                conn.execute("UPDATE session_preparation SET state = 'ready', phase = 'ready', "
                             "finished = ? WHERE id = ?", (time.time(), session_id))

            self.sessions.add(session_id, request, public, {}, plan, then=ready)
        except JobStopped:
            self._stop_ahead(session_id, helper, ahead_done)
            log.info("session %s: preparation stopped with the server (%s); it resumes at the "
                     "next start", session_id, phase[0])
        except Exception as exc:  # every other outcome is a failure, recorded with its reason
            self._stop_ahead(session_id, helper, ahead_done)
            # The half-made folder goes before the failure is recorded: whoever reads
            # "failed" finds nothing of the attempt left (seen: a status read between the
            # two found the folder).
            shutil.rmtree(workdir, ignore_errors=True)
            reason = (exc.message if isinstance(exc, ServiceError)
                      else str(exc) if isinstance(exc, ChildFailed)
                      else f"{type(exc).__name__}: {exc}")
            self._fail(session_id, phase[0], reason[:500])
        else:
            log.info("session %s ready: prepared in %.1f s, %d cells, rho_total=%s",
                     session_id, time.time() - started, plan.layout.total_cells,
                     plan.rho_total)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _start_ahead(self, session_id: str, plan: SessionPlan, n_clients: int,
                     workdir: Path, done: threading.Event) -> list[threading.Thread]:
        """Start the offline pool on the joint noise's sets (``keyserver.coins``) once the
        joint circuit's keys are written and the selection module is compiling: the
        compiler holds one core, the pool takes the other. The keys are hard-linked into a
        folder of the helper's own, so the work folder's rename cannot pull them from under
        a set in flight."""
        if plan.selection is None or not plan.joint_columns \
                or not (workdir / "evaluation_keys.bin").exists():
            return []
        own = workdir.with_name(workdir.name + ".ahead")
        own.mkdir(mode=0o700)
        for name in ("client.zip", "keys.bin"):
            os.link(workdir / name, own / name)
        files = KeyFiles(SessionKeys.load, str(own), (n_clients, True))
        ahead = self._ahead
        assert ahead is not None

        def run() -> None:
            try:
                ahead.make_ahead(session_id, plan, files, done)
            finally:
                shutil.rmtree(own, ignore_errors=True)

        thread = threading.Thread(target=run, name=f"ahead-{session_id}", daemon=True)
        thread.start()
        return [thread]

    def _stop_ahead(self, session_id: str, helper: list[threading.Thread],
                    done: threading.Event) -> None:
        """A preparation that did not finish: its sets go, once the helper stopped."""
        done.set()
        for thread in helper:
            thread.join(timeout=60)  # at most the set in flight
        if self._ahead is not None:
            self._ahead.forget(session_id)

    # ------------------------------------------------------------ restarts
    def resume(self) -> None:
        """Queue again every session found preparing (module docstring), or fail it; and
        spawn the spare child (at start-up: the server's main thread spawns it)."""
        if self._in_child:
            self.children.warm()
        with self.db.connect() as conn:
            rows = conn.execute("SELECT id, request_json, draft_json, attempts, phase FROM "
                                "session_preparation WHERE state = 'preparing' "
                                "ORDER BY created").fetchall()
        for row in rows:  # bounded: the sessions found preparing
            session_id = row["id"]
            if self.jobs.holds(session_id):
                continue
            self._clean_work_folders(session_id)
            if row["attempts"] >= MAX_ATTEMPTS:
                self._fail(session_id, row["phase"],
                           f"its preparation was cut short {row['attempts']} times (the key "
                           "server stopped while it ran); create a new session")
                continue
            request = wire.SessionCreate.model_validate_json(row["request_json"])
            if not row["draft_json"]:
                # Stopped before its plan was built: it is planned as a new one would be.
                self._set(session_id, phase=PLANNING)
                self._submit(session_id, request,
                             self._planner.submit(self._plan, session_id, request), force=True)
                continue
            try:
                plan = build_plan(request)
                again = plan.to_public(session_id, request.clients)
            except ValueError as exc:
                self._fail(session_id, row["phase"], f"its plan no longer builds under this "
                                                     f"server's rules ({exc}); create a new "
                                                     "session")
                continue
            if again != wire.SessionPublic.model_validate_json(row["draft_json"]):
                self._fail(session_id, row["phase"],
                           "this key server's plan rules changed while the session was being "
                           "prepared (its plan no longer gives the record drafted when it "
                           "was accepted); create a new session")
                continue
            self._set(session_id, phase=QUEUED)
            log.info("session %s: preparation resumed after a restart (attempt %d)",
                     session_id, row["attempts"] + 1)
            done: Future[Planned] = Future()
            done.set_result((plan, again))
            self._submit(session_id, request, done, force=True)

    def _clean_work_folders(self, session_id: str) -> None:
        for folder in (self.sessions.state_dir / "sessions").glob(f".{session_id}.*"):
            shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        self.jobs.close()
        self.children.close()
        self._planner.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------ waiting (in-process)
    def wait_ready(self, session_id: str, timeout: float = 600) -> wire.SessionPublic:
        """The session's public record once it is ready (for code that runs the key server
        in its own process: tests, benchmarks); raises on failure or after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # bounded by the deadline
            preparation = self.sessions.preparation(session_id)
            if preparation is None or preparation.state == "ready":
                return self.sessions.public(session_id)
            if preparation.state == "failed":
                raise RuntimeError(f"session {session_id} failed: {preparation.reason}")
            time.sleep(0.1)
        raise TimeoutError(f"session {session_id} not ready after {timeout} s")
