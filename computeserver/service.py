"""The compute server's logic: seeds, ciphertexts, Primitive 1 with noise, release requests.

Design concerns:

* **Evaluation keys only.** This server holds the compiled circuit and the evaluation keys
  the key server hands out; nothing here can decrypt.
* **Noise before anything leaves.** Every ciphertext sent for decryption is the output of
  the P1 circuit whose clear offset already carries this server's discrete Gaussian noise
  on every selected cell (and a fresh uniform bit above the k count bits), or, on a joint
  release, the one joint noise: the key server's encrypted bits XORed with this server's
  (``crypto.joint_noise``), so that the key server decrypts count + Z with Z unknown to it.
  The noise is used once: the circuit outputs are stored durably before the request, so a
  retry after a crash re-sends the same ciphertexts (which the key server recognises)
  instead of drawing new noise.
* **Releases on the executor.** A release's chunks are tasks on the executor the server
  was started with (``computeserver.release``), as the selection's are; its outputs are
  stored only once every chunk's task has answered, so a worker lost mid-release costs a
  rerun of its task, never a second draw of stored noise.
* **A mismatched client is never summed.** The key server forwards each masked vector's
  seed commitment; a client counts as uploaded only when its seed here matches it (until
  then the session waits, its status naming the client), and a mismatch found when the
  sums start blocks the session with a clear record.
* **Uploads close before anything is summed.** An owner may replace its upload (a fresh seed
  here with ``replace=true``, then its masked vector at the key server) until this server
  starts on the session: it then closes the uploads at the key server, naming the commitment
  and ciphertext digest of every client's upload it holds (``keyserver.uploads``). From then
  on a seed is not replaced here (409), and a close the key server refuses (an upload
  replaced since it was fetched) reopens them: the stale copy is dropped and fetched again.
  A replaced seed takes the old one's place; the ciphertexts of the old upload are dropped
  with it, so nothing of a replaced upload is ever summed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
from concrete import fhe

from feddpsyn.common import wire
from feddpsyn.common.files import sha256_of_file, write_private_stream
from feddpsyn.common.serving import Database, ServiceError, already_stored, write_private
from feddpsyn.common.version import VERSION, VERSION_HEADER, check_answer
from feddpsyn.computeserver.executor import (
    CallTask,
    Circuit,
    Executor,
    InProcessExecutor,
    map_streamed,
)
from feddpsyn.computeserver.metering import MeteredExecutor, StepCosts
from feddpsyn.computeserver.progress import ProgressReporter
from feddpsyn.computeserver.release import UploadChunks, chunk_task
from feddpsyn.computeserver.selection import SELECTION_SQL, SelectionRole
from feddpsyn.crypto.aggregation import chunk_ranges
from feddpsyn.crypto.blobs import pack_blobs, unpack_blobs
from feddpsyn.crypto.masking import absent_commitment, seed_commitment
from feddpsyn.crypto.masking import mask_sum as masks_summed
from feddpsyn.dp.noise_pool import draw_pool, pool_noise
from feddpsyn.params.release_spec import ReleaseSpec
from feddpsyn.params.session_plan import SessionPlan

log = logging.getLogger("feddpsyn.computeserver")

_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, public_json TEXT NOT NULL, token_hashes_json TEXT NOT NULL,
    blocked TEXT);
CREATE TABLE IF NOT EXISTS seeds (
    session_id TEXT NOT NULL, client_id TEXT NOT NULL, seed_hex TEXT NOT NULL,
    received REAL NOT NULL, PRIMARY KEY (session_id, client_id));
CREATE TABLE IF NOT EXISTS ciphertexts (
    session_id TEXT NOT NULL, client_id TEXT NOT NULL, commitment TEXT NOT NULL,
    digest TEXT NOT NULL, PRIMARY KEY (session_id, client_id));
CREATE TABLE IF NOT EXISTS outputs (
    session_id TEXT NOT NULL, release TEXT NOT NULL, digest TEXT NOT NULL,
    PRIMARY KEY (session_id, release));
CREATE TABLE IF NOT EXISTS releases (
    session_id TEXT NOT NULL, release TEXT NOT NULL, result_json TEXT NOT NULL,
    PRIMARY KEY (session_id, release));
CREATE TABLE IF NOT EXISTS seeds_replaced (
    session_id TEXT NOT NULL, client_id TEXT NOT NULL, replaced REAL NOT NULL);
CREATE TABLE IF NOT EXISTS uploads_closed (
    session_id TEXT PRIMARY KEY, closed REAL NOT NULL, uploads_json TEXT NOT NULL,
    confirmed INTEGER NOT NULL);
"""




def _check_key_server_version(response: httpx.Response) -> None:
    check_answer(response.headers, "key server", VERSION)

class ComputeServer:
    """The compute server's sessions and its job; its selection is :attr:`selection`, built
    from this server as its store (``computeserver.store.SessionStore``) and the executor
    its encrypted work runs on (default: in this process)."""

    def __init__(self, state_dir: Path, keyserver_url: str, peer_token: str,
                 timeout: float = 600, verify: bool | str = True,
                 executor: Executor | None = None):
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        state_dir.chmod(0o700)
        self.db = Database(state_dir / "computeserver.sqlite", _SCHEMA_SQL + SELECTION_SQL)
        # Every peer call names this server's version, and an answer of a key server whose
        # version does not meet it stops the call (``common.version``): the two must derive
        # the same plan from the public record.
        self._http_options = dict(base_url=keyserver_url, timeout=timeout, verify=verify,
                                  headers={"Authorization": f"Bearer {peer_token}",
                                           VERSION_HEADER: VERSION},
                                  event_hooks={"response": [_check_key_server_version]})
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        self._plans: dict[str, SessionPlan] = {}
        self._release_circuits: dict[str, Circuit] = {}
        self._sync_locks: dict[str, threading.Lock] = {}
        # What a long step is doing now, for status (progress of the encrypted selection);
        # logged and reported to the key server at most every so often (computeserver.progress).
        self._progress: dict[str, str] = {}
        self._work: dict[str, wire.WorkProgress] = {}
        self.progress = ProgressReporter(self._push_progress)
        # Every step's CPU and bootstraps, per session, for its status (computeserver.metering).
        self.costs = StepCosts()
        self.executor = MeteredExecutor(executor or InProcessExecutor(), self.costs)
        self.selection = SelectionRole(self, self.executor)

    @property
    def _http(self) -> httpx.Client:
        # (Re)opened on demand: an app's shutdown hook closes it, and an ASGI test transport
        # may run startup and shutdown around every request.
        if self._client is None or self._client.is_closed:
            self._client = httpx.Client(**self._http_options)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self.executor.close()

    def session_dir(self, session_id: str) -> Path:
        return self.state_dir / "sessions" / session_id

    # ------------------------------------------------------------ session sync
    def known_sessions(self) -> list[str]:
        with self.db.connect() as conn:
            return [r["id"] for r in conn.execute("SELECT id FROM sessions")]

    def sync_sessions(self) -> None:
        """One pass of the session-sync job: fetch every session the key server has ready
        and this server does not know yet (bounded: one pass over its list). A job of its
        own, so that a new session is fetched while the compute job runs another's long
        encrypted step, and a client's first upload finds it here."""
        response = self._http.get("/peer/sessions")
        response.raise_for_status()
        known = set(self.known_sessions())
        for session_id in response.json():
            if session_id not in known:
                self.sync_session(session_id)

    def _sync_lock(self, session_id: str) -> threading.Lock:
        with self._lock:
            return self._sync_locks.setdefault(session_id, threading.Lock())

    def sync_session(self, session_id: str) -> None:
        """Fetch a session's public plan, circuit and evaluation keys from the key server
        (once: a request and the sync job asking at once share one fetch)."""
        if session_id in self.known_sessions():
            return
        with self._sync_lock(session_id):
            if session_id not in self.known_sessions():
                self._fetch_session(session_id)

    def _fetch_artefact(self, session_id: str, name: str, digest: str, path: Path) -> None:
        """One artefact of the session, streamed to its 0600 file and kept only when its
        SHA-256 is the one the key server announced (a truncated transfer keeps nothing)."""
        if path.exists() and sha256_of_file(path) == digest:
            return  # fetched before a restart
        url = f"/peer/sessions/{session_id}/artefacts/{name}"
        try:
            with self._http.stream("GET", url) as response:
                if response.status_code != 200:
                    response.read()
                    raise ServiceError(503, f"the key server refused the session's {name}: "
                                            f"{wire.error_detail(response, 400)}; retry later")
                write_private_stream(path, response.iter_bytes(1 << 20), digest)
        except httpx.TransportError as exc:
            raise ServiceError(503, f"the key server's {name} did not arrive "
                                    f"({type(exc).__name__}); retry later") from None
        except ValueError as exc:
            raise ServiceError(503, f"{exc}; retry later") from None

    def _fetch_session(self, session_id: str) -> None:
        try:
            response = self._http.get(f"/peer/sessions/{session_id}")
        except httpx.TransportError as exc:
            raise ServiceError(503, "the key server is unreachable, so this session cannot "
                                    f"be looked up now ({type(exc).__name__}); retry later"
                               ) from None
        if response.status_code == 404:
            raise ServiceError(404, f"unknown session {session_id!r}")
        if response.status_code == 409:  # still being prepared, or failed: the key server says
            raise ServiceError(409, f"key server: {wire.error_detail(response, 400)}")
        response.raise_for_status()
        peer = wire.PeerSession.model_validate_json(response.content)
        directory = self.session_dir(session_id)
        for name, digest in peer.artefacts.items():
            self._fetch_artefact(session_id, name, digest, directory / name)
        # Every noise this server may add, drawn now, before any client uploads
        # (dp.noise_pool): no run time later depends on a noise value.
        write_private(directory / "noise_pool.npz",
                      draw_pool(SessionPlan.from_public(peer.session).noise_draws()))
        with self.db.transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO sessions VALUES (?, ?, ?, NULL)",
                         (session_id, peer.session.model_dump_json(by_alias=True),
                          json.dumps(peer.client_token_hashes)))
        log.info("session %s: received plan, circuit and evaluation keys", session_id)

    def public(self, session_id: str) -> wire.SessionPublic:
        with self.db.connect() as conn:
            row = conn.execute("SELECT public_json FROM sessions WHERE id = ?",
                               (session_id,)).fetchone()
        if row is None:
            self.sync_session(session_id)
            return self.public(session_id)
        return wire.SessionPublic.model_validate_json(row["public_json"])

    def plan(self, session_id: str) -> SessionPlan:
        with self._lock:
            if session_id in self._plans:
                return self._plans[session_id]
        plan = SessionPlan.from_public(self.public(session_id))
        with self._lock:
            self._plans[session_id] = plan
        return plan

    def client_token_hashes(self, session_id: str) -> dict[str, str]:
        """The session's client token hashes, as the key server sent them
        (``common.credentials.ClientTokens``)."""
        self.public(session_id)
        with self.db.connect() as conn:
            row = conn.execute("SELECT token_hashes_json FROM sessions WHERE id = ?",
                               (session_id,)).fetchone()
        return json.loads(row["token_hashes_json"])

    # ------------------------------------------------------------ client seeds
    def store_seed(self, session_id: str, client_id: str, upload: wire.SeedUpload,
                   replace: bool = False) -> wire.UploadReceipt:
        self.public(session_id)
        if client_id in self.absent_clients(session_id):
            raise ServiceError(409, wire.left_out_message(session_id, client_id))
        digest = hashlib.sha256(bytes.fromhex(upload.seed_hex)).hexdigest()
        with self.db.transaction() as conn:
            row = conn.execute("SELECT seed_hex FROM seeds WHERE session_id = ? AND "
                               "client_id = ?", (session_id, client_id)).fetchone()
            try:
                if already_stored(row and row["seed_hex"], upload.seed_hex, "seed", client_id):
                    return wire.UploadReceipt(session_id=session_id, client_id=client_id,
                                              stored=False, digest=digest)
            except ServiceError as exc:
                if not replace:
                    raise ServiceError(409, f"{exc.message}; to replace it before the session "
                                            "computes on it, upload again with replace=true "
                                            "(feddpsyn client upload --replace)") from None
            # An identical retry is answered above even after release; anything new is late.
            if conn.execute("SELECT 1 FROM releases WHERE session_id = ?",
                            (session_id,)).fetchone():
                raise ServiceError(409, "session already released; uploads are closed")
            if row is None:
                conn.execute("INSERT INTO seeds VALUES (?, ?, ?, ?)",
                             (session_id, client_id, upload.seed_hex, time.time()))
                return wire.UploadReceipt(session_id=session_id, client_id=client_id,
                                          stored=True, digest=digest)
            if conn.execute("SELECT 1 FROM uploads_closed WHERE session_id = ?",
                            (session_id,)).fetchone():
                raise ServiceError(409, f"client {client_id!r}: this server has started on the "
                                        "session's uploads, so the stored seed can no longer "
                                        "be replaced")
            conn.execute("UPDATE seeds SET seed_hex = ?, received = ? WHERE session_id = ? "
                         "AND client_id = ?", (upload.seed_hex, time.time(), session_id,
                                               client_id))
            # The old upload's ciphertexts go with its seed; the new ones are fetched when
            # the key server holds them.
            conn.execute("DELETE FROM ciphertexts WHERE session_id = ? AND client_id = ?",
                         (session_id, client_id))
            conn.execute("INSERT INTO seeds_replaced VALUES (?, ?, ?)",
                         (session_id, client_id, time.time()))
            (self.session_dir(session_id) / "ciphertexts" / f"{client_id}.bin").unlink(
                missing_ok=True)
        log.info("session %s: client %s replaced its seed; its old ciphertexts are dropped",
                 session_id, client_id)
        return wire.UploadReceipt(session_id=session_id, client_id=client_id, stored=True,
                                  digest=digest)

    def releases_done(self, session_id: str) -> list[str]:
        with self.db.connect() as conn:
            return [r["release"] for r in conn.execute(
                "SELECT release FROM releases WHERE session_id = ?", (session_id,))]

    def _matched(self, session_id: str) -> tuple[set[str], list[str]]:
        """(the clients whose seed here matches the commitment of the ciphertexts held, or
        who were left out of the session, the clients with both whose seed does not: a
        replacement under way)."""
        with self.db.connect() as conn:
            seeds = {r["client_id"]: bytes.fromhex(r["seed_hex"]) for r in conn.execute(
                "SELECT client_id, seed_hex FROM seeds WHERE session_id = ?", (session_id,))}
            commitments = {r["client_id"]: r["commitment"] for r in conn.execute(
                "SELECT client_id, commitment FROM ciphertexts WHERE session_id = ?",
                (session_id,))}
        absent = self._absent(session_id, commitments)
        both = sorted(set(seeds) & set(commitments) - absent)
        matched = {c for c in both
                   if seed_commitment(seeds[c], session_id, c) == commitments[c]}
        return matched | absent, [c for c in both if c not in matched]

    @staticmethod
    def _absent(session_id: str, commitments: dict[str, str]) -> set[str]:
        """The clients the key server left out of the session (``keyserver.uploads``): their
        ciphertexts are of zeros, under the public absent commitment; no seed, no mask."""
        return {c for c, commitment in commitments.items()
                if commitment == absent_commitment(session_id, c)}

    def absent_clients(self, session_id: str) -> list[str]:
        with self.db.connect() as conn:
            commitments = {r["client_id"]: r["commitment"] for r in conn.execute(
                "SELECT client_id, commitment FROM ciphertexts WHERE session_id = ?",
                (session_id,))}
        return sorted(self._absent(session_id, commitments))

    def status(self, session_id: str) -> wire.SessionStatus:
        public = self.public(session_id)
        with self.db.connect() as conn:
            blocked = conn.execute("SELECT blocked FROM sessions WHERE id = ?",
                                   (session_id,)).fetchone()["blocked"]
        ready, waiting = self._matched(session_id)
        absent = self.absent_clients(session_id)
        done = self.releases_done(session_id)
        detail = blocked or self._progress.get(session_id, "")
        if blocked:
            state = "blocked"
        elif len(done) == len(public.releases):
            state = "released"
        elif len(ready) < len(public.clients):
            state = "collecting"
            if waiting:
                detail = (f"clients {waiting}: the seed here and the masked vector at the key "
                          "server are of different uploads (a replacement under way): waiting "
                          "for the matching one")
        else:
            state = "computing"
        return wire.SessionStatus(
            session_id=session_id, state=state,
            clients_uploaded=sorted(ready - set(absent)),
            clients_missing=[c for c in public.clients if c not in ready],
            clients_absent=absent, releases_done=done, detail=detail,
            progress=self._work.get(session_id) if state == "computing" else None,
            costs=self.costs.of(session_id) or None)

    # ------------------------------------------------------------ the job
    def step(self) -> None:
        """One pass of the job: sync sessions, fetch ciphertexts, run due releases."""
        response = self._http.get("/peer/sessions")
        response.raise_for_status()
        for session_id in response.json():
            self.sync_session(session_id)
            status = self.status(session_id)
            if status.state in ("released", "blocked"):
                continue
            if not self._uploads_closed(session_id):
                self._fetch_ciphertexts(session_id)
            if self.status(session_id).state == "computing" and self._close_uploads(session_id):
                self._run_releases(session_id)

    def _uploads_closed(self, session_id: str) -> bool:
        with self.db.connect() as conn:
            row = conn.execute("SELECT confirmed FROM uploads_closed WHERE session_id = ?",
                               (session_id,)).fetchone()
        return row is not None and bool(row["confirmed"])

    def _close_uploads(self, session_id: str) -> bool:
        """Close the session's uploads at the key server on the ones held here (module
        docstring): True once closed; False (reopened, stale copies dropped) if the key
        server holds another upload of some client."""
        if self._uploads_closed(session_id):
            return True
        with self.db.transaction() as conn:
            # From here no seed is replaced, until the key server refuses the close.
            held = {r["client_id"]: {"commitment": r["commitment"], "digest": r["digest"]}
                    for r in conn.execute("SELECT client_id, commitment, digest FROM "
                                          "ciphertexts WHERE session_id = ?", (session_id,))}
            conn.execute("INSERT OR REPLACE INTO uploads_closed VALUES (?, ?, ?, 0)",
                         (session_id, time.time(), json.dumps(held, sort_keys=True)))
        ready, _ = self._matched(session_id)
        directory = self.session_dir(session_id) / "ciphertexts"
        intact = {c for c, h in held.items() if (directory / f"{c}.bin").exists() and
                  hashlib.sha256((directory / f"{c}.bin").read_bytes()).hexdigest()
                  == h["digest"]}
        if ready != set(held) or intact != set(held) \
                or set(held) != set(self.public(session_id).clients):
            # A seed replaced between the status and the close, or a copy not as recorded.
            with self.db.transaction() as conn:
                for client_id in set(held) - intact:
                    conn.execute("DELETE FROM ciphertexts WHERE session_id = ? AND "
                                 "client_id = ?", (session_id, client_id))
            self._reopen(session_id)
            return False
        response = self.peer_request("POST", f"/peer/sessions/{session_id}/uploads/close",
                                     content=wire.UploadsClose.model_validate(
                                         {"uploads": held}).model_dump_json(),
                                     headers={"Content-Type": "application/json"})
        if response.status_code == 409:
            log.info("session %s: the key server holds newer uploads (%s); fetching them",
                     session_id, wire.error_detail(response, 300))
            self._reopen(session_id)
            self._fetch_ciphertexts(session_id)
            return False
        if response.status_code != 200:
            raise RuntimeError(f"key server answered the close of the uploads: "
                               f"{response.status_code} {wire.error_detail(response, 300)}")
        with self.db.transaction() as conn:
            conn.execute("UPDATE uploads_closed SET confirmed = 1 WHERE session_id = ?",
                         (session_id,))
        log.info("session %s: uploads closed (%d clients)", session_id, len(held))
        return True

    def _reopen(self, session_id: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM uploads_closed WHERE session_id = ? AND confirmed = 0",
                         (session_id,))

    def _fetch_ciphertexts(self, session_id: str) -> None:
        """Bring the copies here in line with the key server's index: a copy of an upload
        the key server no longer lists (replaced) is dropped, a listed one fetched."""
        index = self._http.get(f"/peer/sessions/{session_id}/ciphertexts")
        index.raise_for_status()
        listed = {entry["client_id"]: entry["digest"] for entry in index.json()}
        with self.db.connect() as conn:
            have = {r["client_id"]: r["digest"] for r in conn.execute(
                "SELECT client_id, digest FROM ciphertexts WHERE session_id = ?",
                (session_id,))}
        stale = [c for c, digest in have.items() if listed.get(c) != digest]
        if stale:
            with self.db.transaction() as conn:
                if conn.execute("SELECT 1 FROM uploads_closed WHERE session_id = ?",
                                (session_id,)).fetchone():
                    return  # closing on the copies held: the key server decides
                for client_id in stale:
                    conn.execute("DELETE FROM ciphertexts WHERE session_id = ? AND "
                                 "client_id = ? AND digest = ?",
                                 (session_id, client_id, have[client_id]))
            log.info("session %s: dropped the replaced ciphertexts of clients %s", session_id,
                     sorted(stale))
        for entry in index.json():
            client_id = entry["client_id"]
            if client_id in have and client_id not in stale:
                continue
            blob = self._http.get(f"/peer/sessions/{session_id}/ciphertexts/{client_id}")
            blob.raise_for_status()
            if hashlib.sha256(blob.content).hexdigest() != entry["digest"]:
                raise RuntimeError(f"ciphertexts of {client_id} do not match their digest")
            self._validate_ciphertexts(session_id, client_id, blob.content)
            with self.db.transaction() as conn:
                # The file and its row together: a seed replaced meanwhile drops both.
                if conn.execute("SELECT 1 FROM ciphertexts WHERE session_id = ? AND "
                                "client_id = ?", (session_id, client_id)).fetchone():
                    continue
                write_private(self.session_dir(session_id) / "ciphertexts" /
                              f"{client_id}.bin", blob.content)
                conn.execute("INSERT INTO ciphertexts VALUES (?, ?, ?, ?)",
                             (session_id, client_id, entry["commitment"], entry["digest"]))

    def _validate_ciphertexts(self, session_id: str, client_id: str, data: bytes) -> None:
        """Refuse (and never store) a container with the wrong chunk count or unparsable values."""
        plan = self.plan(session_id)
        expected = len(chunk_ranges(plan.layout.total_cells, plan.parameters.chunk_cells))
        for item in unpack_blobs(data, expected=expected):
            try:
                fhe.Value.deserialize(item)
            except Exception:
                raise RuntimeError(f"ciphertexts of {client_id}: a chunk is not a concrete "
                                   "value") from None

    def _check_commitments(self, session_id: str) -> dict[str, bytes | None]:
        """Each client's seed, checked against its upload's commitment; None for a client
        left out of the session (its masked vector is zeros and it has no mask: a seed it
        sent anyway is not used)."""
        with self.db.connect() as conn:
            seeds: dict[str, bytes | None] = {
                r["client_id"]: bytes.fromhex(r["seed_hex"]) for r in conn.execute(
                    "SELECT client_id, seed_hex FROM seeds WHERE session_id = ?",
                    (session_id,))}
            commitments = {r["client_id"]: r["commitment"] for r in conn.execute(
                "SELECT client_id, commitment FROM ciphertexts WHERE session_id = ?",
                (session_id,))}
        for client_id in self._absent(session_id, commitments):
            seeds[client_id] = None
        bad = [c for c, seed in seeds.items() if seed is not None
               and seed_commitment(seed, session_id, c) != commitments.get(c)]
        if bad:
            detail = (f"clients {bad}: the seed uploaded here does not match the commitment "
                      "sent with their masked vector; their data is not summed")
            self.block(session_id, detail)
            raise RuntimeError(detail)
        return seeds

    def block(self, session_id: str, detail: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE sessions SET blocked = ? WHERE id = ?", (detail, session_id))

    def set_progress(self, session_id: str, detail: str | None) -> None:
        if detail is None:
            self._progress.pop(session_id, None)
            self._work.pop(session_id, None)
            self.progress.clear(session_id)
        else:
            self._progress[session_id] = detail

    def report_progress(self, session_id: str, phase: str, done: int, total: int,
                        unit: str = "tasks", note: str = "") -> None:
        """A long step's progress: shown in this server's status at once, logged and sent
        to the key server (its status shows it) at most every few seconds."""
        progress = wire.WorkProgress(phase=phase, done=done, total=total, unit=unit)
        self.set_progress(session_id, progress.text() + (f" ({note})" if note else ""))
        self._work[session_id] = progress
        self.progress.update(session_id, progress)

    def _push_progress(self, session_id: str, progress: wire.WorkProgress) -> None:
        response = self.peer_request("PUT", f"/peer/sessions/{session_id}/progress",
                                     content=progress.model_dump_json(exclude_none=True),
                                     headers={"Content-Type": "application/json"}, timeout=10)
        if response.status_code >= 300:
            raise RuntimeError(f"{response.status_code} {wire.error_detail(response, 200)}")

    def pool_noise(self, session_id: str, label: str, positions: np.ndarray) -> np.ndarray:
        """This server's noise drawn when it learned the session (``dp.noise_pool``)."""
        blob = (self.session_dir(session_id) / "noise_pool.npz").read_bytes()
        return pool_noise(blob, label, positions)

    def release_circuit(self, session_id: str) -> Circuit:
        """The session's release circuit and its evaluation keys, named by their digest (what
        the executor's workers load)."""
        with self._lock:
            if session_id in self._release_circuits:
                return self._release_circuits[session_id]
        directory = self.session_dir(session_id)
        circuit = Circuit.of_files(session_id, directory / "server.zip",
                                   directory / "evaluation_keys.bin")
        with self._lock:
            return self._release_circuits.setdefault(session_id, circuit)

    def _run_releases(self, session_id: str) -> None:
        plan = self.plan(session_id)
        done = set(self.releases_done(session_id))
        seeds = self._check_commitments(session_id)
        for spec in plan.releases:
            if spec.name in done:
                continue
            if not spec.marginal_keys:  # a selected release: its pairs come from the rounds
                spec = plan.resolve(spec, self.selection.run(session_id, plan, seeds))
                if not spec.marginal_keys:  # nothing chosen: the key server recorded it empty
                    result = self.peer("POST", f"/peer/sessions/{session_id}/releases/"
                                        f"{spec.name}/finalize", wire.ReleaseResult)
                    with self.db.transaction() as conn:
                        conn.execute("INSERT OR IGNORE INTO releases VALUES (?, ?, ?)",
                                     (session_id, spec.name, result.model_dump_json()))
                    continue
            path = self.session_dir(session_id) / "outputs" / f"{spec.name}.bin"
            with self.db.connect() as conn:
                stored = conn.execute("SELECT digest FROM outputs WHERE session_id = ? AND "
                                      "release = ?", (session_id, spec.name)).fetchone()
            if stored is None:
                body = self._aggregate(session_id, plan, spec, seeds)
                write_private(path, body)
                with self.db.transaction() as conn:
                    conn.execute("INSERT INTO outputs VALUES (?, ?, ?)",
                                 (session_id, spec.name, hashlib.sha256(body).hexdigest()))
            result = self._request_decryption(session_id, spec, plan, path)
            with self.db.transaction() as conn:
                conn.execute("INSERT OR IGNORE INTO releases VALUES (?, ?, ?)",
                             (session_id, spec.name, result.model_dump_json()))
            log.info("session %s: release %s published", session_id, spec.name)

    def _request_decryption(self, session_id: str, spec: ReleaseSpec, plan: SessionPlan,
                            path: Path) -> wire.ReleaseResult:
        """Register the manifest (the key server charges its ledger), send chunks, finalize."""
        name = spec.name
        outputs = unpack_blobs(path.read_bytes())
        chunks = [c.index for c in plan.release_chunks(spec)]
        manifest = wire.ReleaseManifest(
            chunks=chunks, digests=[hashlib.sha256(o).hexdigest() for o in outputs],
            noise=plan.noise_statement(spec))
        base = f"/peer/sessions/{session_id}/releases/{name}"
        progress = self.peer("PUT", f"{base}/manifest", wire.ReleaseProgress,
                              content=manifest.model_dump_json(),
                              headers={"Content-Type": "application/json"})
        if not progress.published:
            for chunk, output in zip(chunks, outputs):
                if chunk in progress.missing_chunks:
                    self.peer("PUT", f"{base}/chunks/{chunk}", wire.ReleaseProgress,
                               content=output,
                               headers={"Content-Type": "application/octet-stream"})
        return self.peer("POST", f"{base}/finalize", wire.ReleaseResult)

    def peer_request(self, method: str, url: str, **kw) -> httpx.Response:
        return self._http.request(method, url, **kw)

    def peer(self, method: str, url: str, model, **kw):
        response = self.peer_request(method, url, **kw)
        if response.status_code != 200:
            raise RuntimeError(f"key server answered {method} {url}: {response.status_code} "
                               f"{wire.error_detail(response, 300)}")
        return model.model_validate_json(response.content)

    def _aggregate(self, session_id, plan, spec, seeds) -> bytes:
        """Primitive 1 over the release's chunks, with this server's noise (module
        docstring), or, for a joint release, this server's half of the one joint noise
        (``crypto.joint_noise``: its clear bits b, drawn here, used once, never stored; a
        split release's cells each take their group's shape, ``SessionPlan.cell_noises``):
        one task per chunk on the server's executor, a window of chunks at a time
        (``computeserver.release``)."""
        public = self.public(session_id)
        k = plan.parameters.count_bits
        chunk = plan.parameters.chunk_cells
        total = plan.layout.total_cells
        columns = plan.joint_columns
        mask_sum = np.zeros(-(-total // chunk) * chunk, dtype=np.int64)
        mask_sum[:total] = masks_summed(seeds, session_id, public.clients, total, k)
        uploads = UploadChunks([self.session_dir(session_id) / "ciphertexts" / f"{c}.bin"
                                for c in public.clients], len(chunk_ranges(total, chunk)))
        cells = plan.layout.cells_of(plan.slots_of(spec))
        noise_full = np.zeros_like(mask_sum)
        # Each cell's joint shape: one for the release, or its group's in a split release.
        shape_full: list = [None] * len(mask_sum)
        if spec.joint is None:
            noise_full[cells] = self.pool_noise(session_id, plan.noise_label(spec), cells)
        else:
            for positions, shape in plan.cell_noises(spec):
                for position in positions.tolist():
                    shape_full[position] = shape
        # Layout chunks, or a selected release's cells packed C at a time
        # (``params.release_chunks``): a chunk's cells sit at their places in its vector.
        release_chunks = plan.release_chunks(spec)

        def tasks() -> Iterator[CallTask]:
            for part in release_chunks:
                window_mask, select = np.zeros(chunk, np.int64), np.zeros(chunk, np.int64)
                window_noise = np.zeros(chunk, np.int64)
                window_shapes: list = [None] * chunk
                window_mask[part.places] = mask_sum[part.cells]
                select[part.places] = 1
                window_noise[part.places] = noise_full[part.cells]
                for place, cell in zip(part.places.tolist(), part.cells.tolist()):
                    window_shapes[place] = shape_full[cell]
                masked = (self._packed_inputs(session_id, spec.name, part.index,
                                              len(public.clients))
                          if part.packed else uploads.chunk(part.index))
                yield chunk_task(
                    masked, window_mask, select, k,
                    noise=window_noise if spec.joint is None else None,
                    shapes=None if spec.joint is None else window_shapes,
                    columns=columns,
                    coins=self._joint_coins(session_id, spec.name, part.index) if columns
                    else None)

        phase, description = f"release {spec.name}", self.executor.description

        def progress(done: int, count: int) -> None:
            self.report_progress(session_id, phase, done, count, "chunks", description)

        progress(0, len(release_chunks))
        outputs = map_streamed(self.executor, self.release_circuit(session_id), tasks(),
                               len(release_chunks), progress)
        self.set_progress(session_id, None)
        return pack_blobs([out[0] for out in outputs])

    def _packed_inputs(self, session_id: str, release: str, chunk: int,
                       clients: int) -> list[bytes]:
        """The key server's encryptions of the clients' masked values at a packed chunk's
        cells (``keyserver.releases.Releases.packed_inputs``), in the clients' order."""
        response = self.peer_request(
            "GET", f"/peer/sessions/{session_id}/releases/{release}/inputs/{chunk}")
        if response.status_code != 200:
            raise RuntimeError(f"key server refused the inputs of {release} chunk {chunk}: "
                               f"{response.status_code} {wire.error_detail(response, 300)}")
        return unpack_blobs(response.content, expected=clients)

    def _joint_coins(self, session_id: str, release: str, chunk: int) -> bytes:
        """The key server's encrypted bits for one chunk (``keyserver.coins``)."""
        response = self.peer_request(
            "GET", f"/peer/sessions/{session_id}/releases/{release}/coins/{chunk}")
        if response.status_code != 200:
            raise RuntimeError(f"key server refused the joint noise's bits of {release} chunk "
                               f"{chunk}: {response.status_code} "
                               f"{wire.error_detail(response, 300)}")
        return response.content
