"""The key server's logic: sessions, masked uploads, the offline encryption job, the ledger.

Design concerns:

* **Decrypt only registered, noised releases, within budget, at most once.** A decryption
  request names a release of the session's public plan. The ledger charges its rho in the
  same SQLite transaction that checks the remaining budget, bound to the SHA-256 of the
  ciphertexts: a retry with the same ciphertexts returns the stored result (no new charge,
  no second decryption with fresh noise); different ciphertexts for a charged release are
  refused, because decrypting them would give this server a second noisy view.
* **Nothing changes on refusal.** Requests are fully validated (session, release, container
  format, chunk count, every ciphertext parses) before anything is written.
* **Restart-safe.** Every state change is a committed SQLite row or an atomically renamed
  file; the encryption job is re-entrant (it encrypts whatever is stored and not yet
  encrypted).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import secrets
import threading
import time
from pathlib import Path

import numpy as np

from common import wire
from common.credentials import (CLIENT_TOKENS_SQL, new_token, store_client_tokens,
                                stored_token_hashes)
from common.serving import Database, ServiceError, already_stored, write_private
from crypto.aggregation import chunk_ranges, decode_release, publish_counts
from crypto.blobs import pack_blobs
from dp.noise_pool import draw_pool, pool_noise
from keyserver.keys import SessionKeys
from keyserver.ledger import LEDGER_SQL, PrivacyLedger
from keyserver.selection import SELECTION_SQL, SelectionRole, compiled_bootstraps
from params.schema import Schema, SchemaError
from params.session_plan import NOISE_TAIL_SIGMAS, SessionPlan

log = logging.getLogger("feddpsyn.keyserver")

_SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, request_json TEXT NOT NULL, public_json TEXT NOT NULL,
    created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS masked (
    session_id TEXT NOT NULL, client_id TEXT NOT NULL, commitment TEXT NOT NULL,
    digest TEXT NOT NULL, received REAL NOT NULL, cipher_digest TEXT,
    PRIMARY KEY (session_id, client_id));
CREATE TABLE IF NOT EXISTS manifests (
    session_id TEXT NOT NULL, release TEXT NOT NULL, manifest_json TEXT NOT NULL,
    digest TEXT NOT NULL, PRIMARY KEY (session_id, release));
CREATE TABLE IF NOT EXISTS release_chunks (
    session_id TEXT NOT NULL, release TEXT NOT NULL, chunk INTEGER NOT NULL,
    cells BLOB NOT NULL, PRIMARY KEY (session_id, release, chunk));
CREATE TABLE IF NOT EXISTS releases (
    session_id TEXT NOT NULL, release TEXT NOT NULL, result_json TEXT NOT NULL,
    completed_at REAL NOT NULL, PRIMARY KEY (session_id, release));
"""



def _build_plan(request: wire.SessionCreate) -> SessionPlan:
    return SessionPlan.build(Schema.from_dict(request.schema_), request.pairs,
                             request.budget.epsilon, request.budget.delta, request.budget.split,
                             request.parameter_set, request.max_rows,
                             selection=request.selection.mode,
                             rounds=request.selection.rounds,
                             selection_set=request.selection.parameter_set)


class KeyServer:
    """Sessions, uploads, the encryption job and releases; the ledger
    (:attr:`privacy_ledger`) and the selection (:attr:`selection`) are its parts."""

    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        state_dir.chmod(0o700)
        self.db = Database(state_dir / "keyserver.sqlite",
                           CLIENT_TOKENS_SQL + _SCHEMA_SQL + LEDGER_SQL + SELECTION_SQL)
        self.privacy_ledger = PrivacyLedger(self.db)
        self.selection = SelectionRole(self, self.privacy_ledger)
        self._keys: dict[str, SessionKeys] = {}
        self._plans: dict[str, SessionPlan] = {}
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- sessions
    def session_dir(self, session_id: str) -> Path:
        return self.state_dir / "sessions" / session_id

    def create_session(self, request: wire.SessionCreate) -> wire.SessionCreated:
        try:
            Schema.from_dict(request.schema_)  # a clear 422 before anything else
        except SchemaError as exc:
            raise ServiceError(422, f"invalid schema: {exc}") from None
        try:
            plan = _build_plan(request)
        except ValueError as exc:
            raise ServiceError(422, str(exc)) from None
        session_id = "s-" + secrets.token_hex(8)
        directory = self.session_dir(session_id)
        keys, server_zip, evaluation_keys = SessionKeys.create(plan, len(request.clients),
                                                               directory)
        per_function = self.selection.create(plan, directory)
        bootstraps = None if per_function is None else compiled_bootstraps(plan, per_function)
        # Every noise this server may add, drawn now, before any data (dp.noise_pool).
        write_private(directory / "noise_pool.npz", draw_pool(plan.noise_draws()))
        write_private(directory / "server.zip", server_zip)
        write_private(directory / "evaluation_keys.bin", evaluation_keys)
        public = plan.to_public(session_id, request.clients, bootstraps)
        tokens = {c: new_token() for c in request.clients}
        with self.db.transaction() as conn:
            conn.execute("INSERT INTO sessions VALUES (?, ?, ?, ?)",
                         (session_id, request.model_dump_json(by_alias=True),
                          public.model_dump_json(by_alias=True), time.time()))
            store_client_tokens(conn, session_id, tokens)
        with self._lock:
            self._keys[session_id] = keys
            self._plans[session_id] = plan
        log.info("session %s created: %d clients, %d cells, rho_total=%s", session_id,
                 len(request.clients), plan.layout.total_cells, plan.rho_total)
        return wire.SessionCreated(session=public, client_tokens=tokens)

    def public(self, session_id: str) -> wire.SessionPublic:
        with self.db.connect() as conn:
            row = conn.execute("SELECT public_json FROM sessions WHERE id = ?",
                               (session_id,)).fetchone()
        if row is None:
            raise ServiceError(404, f"unknown session {session_id!r}")
        return wire.SessionPublic.model_validate_json(row["public_json"])

    def session_ids(self) -> list[str]:
        with self.db.connect() as conn:
            return [r["id"] for r in conn.execute("SELECT id FROM sessions ORDER BY created")]

    def plan(self, session_id: str) -> SessionPlan:
        with self._lock:
            if session_id in self._plans:
                return self._plans[session_id]
        with self.db.connect() as conn:
            row = conn.execute("SELECT request_json FROM sessions WHERE id = ?",
                               (session_id,)).fetchone()
        if row is None:
            raise ServiceError(404, f"unknown session {session_id!r}")
        plan = _build_plan(wire.SessionCreate.model_validate_json(row["request_json"]))
        with self._lock:
            self._plans[session_id] = plan
        return plan

    def keys(self, session_id: str) -> SessionKeys:
        with self._lock:
            if session_id in self._keys:
                return self._keys[session_id]
        public = self.public(session_id)
        keys = SessionKeys.load(self.session_dir(session_id), len(public.clients))
        with self._lock:
            self._keys[session_id] = keys
        return keys

    def client_token_hashes(self, session_id: str) -> dict[str, str]:
        """The session's client token hashes (``common.credentials.ClientTokens``)."""
        self.public(session_id)
        return stored_token_hashes(self.db, session_id)

    # ---------------------------------------------------------------- uploads
    def store_masked(self, session_id: str, client_id: str,
                     upload: wire.MaskedUpload) -> wire.UploadReceipt:
        public = self.public(session_id)
        k = public.parameter_set["count_bits"]
        if len(upload.values) != public.total_cells:
            raise ServiceError(422, f"expected {public.total_cells} masked values, "
                                    f"got {len(upload.values)}")
        values = np.asarray(upload.values, dtype=object)
        if any((not isinstance(v, int)) or v < 0 or v >= (1 << k) for v in upload.values):
            raise ServiceError(422, f"masked values must be integers in [0, 2^{k})")
        vector = values.astype(np.int64)
        digest = hashlib.sha256(upload.commitment.encode() + vector.tobytes()).hexdigest()
        path = self.session_dir(session_id) / "masked" / f"{client_id}.npy"
        with self.db.transaction() as conn:
            row = conn.execute("SELECT digest FROM masked WHERE session_id = ? AND "
                               "client_id = ?", (session_id, client_id)).fetchone()
            if already_stored(row and row["digest"], digest, "masked vector", client_id):
                return wire.UploadReceipt(session_id=session_id, client_id=client_id,
                                          stored=False, digest=digest)
            # An identical retry is answered above even after release; anything new is late.
            if self.privacy_ledger.has_entries(conn, session_id):
                raise ServiceError(409, "session already released; uploads are closed")
            write_private(path, vector.tobytes())
            conn.execute("INSERT INTO masked VALUES (?, ?, ?, ?, ?, NULL)",
                         (session_id, client_id, upload.commitment, digest, time.time()))
        return wire.UploadReceipt(session_id=session_id, client_id=client_id, stored=True,
                                  digest=digest)

    def run_encryption_job(self) -> int:
        """Encrypt every stored masked vector not yet encrypted. Returns how many it did."""
        with self.db.connect() as conn:
            todo = conn.execute("SELECT session_id, client_id FROM masked "
                                "WHERE cipher_digest IS NULL").fetchall()
        done = 0
        for row in todo:
            self._encrypt_client(row["session_id"], row["client_id"])
            done += 1
        return done

    def _encrypt_client(self, session_id: str, client_id: str) -> None:
        public = self.public(session_id)
        params = public.parameter_set
        position = public.clients.index(client_id)
        directory = self.session_dir(session_id)
        vector = np.frombuffer((directory / "masked" / f"{client_id}.npy").read_bytes(),
                               dtype=np.int64)
        keys = self.keys(session_id)
        chunk = params["chunk_cells"]
        started = time.time()
        blobs = []
        for c in chunk_ranges(len(vector), chunk):
            padded = np.zeros(chunk, dtype=np.int64)
            padded[:c.stop - c.start] = vector[c.start:c.stop]
            blobs.append(keys.encrypt_chunk(position, padded))
        data = pack_blobs(blobs)
        write_private(directory / "ciphertexts" / f"{client_id}.bin", data)
        with self.db.transaction() as conn:
            conn.execute("UPDATE masked SET cipher_digest = ? WHERE session_id = ? AND "
                         "client_id = ?", (hashlib.sha256(data).hexdigest(), session_id,
                                           client_id))
        log.info("session %s: encrypted client %s (%d values, %.2f s)", session_id, client_id,
                 len(vector), time.time() - started)

    def ciphertext_index(self, session_id: str) -> list[dict]:
        self.public(session_id)
        with self.db.connect() as conn:
            rows = conn.execute("SELECT client_id, commitment, cipher_digest FROM masked "
                                "WHERE session_id = ? AND cipher_digest IS NOT NULL",
                                (session_id,)).fetchall()
        return [{"client_id": r["client_id"], "commitment": r["commitment"],
                 "digest": r["cipher_digest"]} for r in rows]

    def ciphertexts(self, session_id: str, client_id: str) -> bytes:
        path = self.session_dir(session_id) / "ciphertexts" / f"{client_id}.bin"
        if not path.exists():
            raise ServiceError(404, f"no ciphertexts for client {client_id!r} yet")
        return path.read_bytes()

    def uploaded_clients(self, session_id: str) -> list[str]:
        with self.db.connect() as conn:
            return [r["client_id"] for r in conn.execute(
                "SELECT client_id FROM masked WHERE session_id = ?", (session_id,))]

    # ---------------------------------------------------------------- releases
    def release_chunks(self, session_id: str, plan: SessionPlan, name: str) -> tuple[list[int], np.ndarray]:
        """Chunk indices a release touches, and its cells' positions in the full vector."""
        spec = self._release_spec(session_id, plan, name)
        cells = plan.layout.cells_of(plan.slots_of(spec))
        chunks = sorted(set((cells // plan.parameters.chunk_cells).tolist()))
        return chunks, cells

    def _release_spec(self, session_id: str, plan: SessionPlan, name: str):
        try:
            spec = plan.release(name)
        except KeyError:
            raise ServiceError(404, f"release {name!r} is not registered for this session; "
                                    f"registered: {[r.name for r in plan.releases]}") from None
        if spec.marginal_keys or plan.selection is None:
            return spec
        selected = self.selection.selected_pairs(session_id)
        if selected is None:
            raise ServiceError(409, f"release {name!r} waits for the selection rounds")
        return plan.resolve(spec, selected)

    def register_release(self, session_id: str, name: str,
                         manifest: wire.ReleaseManifest) -> wire.ReleaseProgress:
        """Step 1 of a release: bind it to its ciphertexts' digests.

        Only ciphertexts listed here are ever decrypted for this release. The budget is
        checked now (early refusal) and charged when the first chunk is accepted, before it
        is decrypted; from then on the manifest is fixed, and a different one is refused.
        """
        plan = self.plan(session_id)
        spec = self._release_spec(session_id, plan, name)
        chunks, _ = self.release_chunks(session_id, plan, name)
        if manifest.chunks != chunks:
            raise ServiceError(422, f"release {name!r} covers chunks {chunks}, manifest lists "
                                    f"{manifest.chunks}")
        with self.db.transaction() as conn:
            if not self.privacy_ledger.charged_for(conn, session_id, name, manifest.digest()):
                self.privacy_ledger.check_budget(conn, plan, session_id, name, spec.rho)
                conn.execute("INSERT OR REPLACE INTO manifests VALUES (?, ?, ?, ?)",
                             (session_id, name, manifest.model_dump_json(), manifest.digest()))
        return self.release_progress(session_id, name)

    def _manifest(self, session_id: str, name: str) -> wire.ReleaseManifest:
        with self.db.connect() as conn:
            row = conn.execute("SELECT manifest_json FROM manifests WHERE session_id = ? AND "
                               "release = ?", (session_id, name)).fetchone()
        if row is None:
            raise ServiceError(409, f"release {name!r} has no registered manifest yet")
        return wire.ReleaseManifest.model_validate_json(row["manifest_json"])

    def release_progress(self, session_id: str, name: str) -> wire.ReleaseProgress:
        manifest = self._manifest(session_id, name)
        with self.db.connect() as conn:
            have = {r["chunk"] for r in conn.execute(
                "SELECT chunk FROM release_chunks WHERE session_id = ? AND release = ?",
                (session_id, name))}
        return wire.ReleaseProgress(release=name,
                                    missing_chunks=[c for c in manifest.chunks if c not in have],
                                    published=name in self.releases_done(session_id))

    def decrypt_chunk(self, session_id: str, name: str, chunk: int, body: bytes) -> None:
        """Step 2: decrypt one registered chunk; keep only the release's cells, CS-noised."""
        plan = self.plan(session_id)
        spec = self._release_spec(session_id, plan, name)
        manifest = self._manifest(session_id, name)
        if chunk not in manifest.chunks:
            raise ServiceError(404, f"chunk {chunk} is not part of release {name!r}")
        expected = manifest.digests[manifest.chunks.index(chunk)]
        if not secrets.compare_digest(hashlib.sha256(body).hexdigest(), expected):
            raise ServiceError(409, f"chunk {chunk} does not match the registered manifest; "
                                    "only the registered ciphertexts are ever decrypted")
        if name in self.releases_done(session_id):
            # finalize deleted the decrypted chunks; storing one again would bring back a
            # value of this server's private view next to the release it replaced.
            raise ServiceError(409, f"release {name!r} is already published; its chunks are "
                                    "not taken any more")
        with self.db.connect() as conn:
            if conn.execute("SELECT 1 FROM release_chunks WHERE session_id = ? AND release = ? "
                            "AND chunk = ?", (session_id, name, chunk)).fetchone():
                return
        keys = self.keys(session_id)
        try:
            value = keys.parse(body)
        except Exception:
            # No detail: a library message here could quote ciphertext bytes.
            raise ServiceError(422, f"chunk {chunk} is not a ciphertext of this circuit "
                                    "(truncated or corrupted?)") from None
        # Charged before the first decryption, once per release (idempotent afterwards).
        self._charge(session_id, spec, manifest)
        try:
            decrypted = keys.decrypt_value(value)
        except Exception:
            raise ServiceError(422, "ciphertext does not decrypt under this session's "
                                    "keys") from None
        _, cells = self.release_chunks(session_id, plan, name)
        size = plan.parameters.chunk_cells
        mine = cells[cells // size == chunk] - chunk * size
        if decrypted.shape != (size,):
            raise ServiceError(422, f"ciphertext holds {decrypted.shape}, expected ({size},)")
        # Residues mod 2^k: the noise is added before centring (crypto.aggregation.publish_counts).
        values = decrypted[mine] % (1 << plan.parameters.count_bits)
        self._check_plausible(plan, spec, values, chunk)
        with self.db.transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO release_chunks VALUES (?, ?, ?, ?)",
                         (session_id, name, chunk, values.astype("<i8").tobytes()))

    @staticmethod
    def _check_plausible(plan: SessionPlan, spec, residues: np.ndarray, chunk: int) -> None:
        """An honest compute server's chunk decodes to counts (>= 0) plus its noise, never
        below -NOISE_TAIL_SIGMAS sigmas (probability < 2e-347 a cell, whatever the data).
        A chunk with the masks left in, or one client's masked vector, decodes to uniform
        residues and is refused here, before anything is stored or published. Only the
        lower side is checked: how far above max_rows a count lies depends on the data, so
        refusing there would itself leak. A cheap check, not a proof (THREAT_MODEL.md)."""
        slack = NOISE_TAIL_SIGMAS * float(spec.sigma2) ** 0.5
        centred = decode_release(residues, plan.parameters.count_bits)
        if len(centred) and centred.min() < -slack:
            raise ServiceError(422, f"chunk {chunk} does not decode to noisy counts (a value "
                                    f"below -{NOISE_TAIL_SIGMAS} noise sigmas); it is not "
                                    "published")

    def finalize_release(self, session_id: str, name: str) -> wire.ReleaseResult:
        """Step 3: once every chunk is in, add this server's noise once and publish."""
        plan = self.plan(session_id)
        spec = self._release_spec(session_id, plan, name)
        with self.db.connect() as conn:
            done = conn.execute("SELECT result_json FROM releases WHERE session_id = ? AND "
                                "release = ?", (session_id, name)).fetchone()
            if done is not None:
                return wire.ReleaseResult.model_validate_json(done["result_json"])
            parts = {r["chunk"]: np.frombuffer(r["cells"], dtype="<i8") for r in conn.execute(
                "SELECT chunk, cells FROM release_chunks WHERE session_id = ? AND release = ?",
                (session_id, name))}
        missing = self.release_progress(session_id, name).missing_chunks
        if missing:
            raise ServiceError(409, f"release {name!r} still misses chunks {missing}")
        noised_by_cs = np.concatenate([parts[c] for c in sorted(parts)])
        _, cells = self.release_chunks(session_id, plan, name)
        noise = self.pool_noise(session_id, plan.noise_label(spec), cells)
        released = publish_counts(noised_by_cs, noise, plan.parameters.count_bits)
        result = self._result(session_id, plan, spec, released)
        with self.db.transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO releases VALUES (?, ?, ?, ?)",
                         (session_id, name, result.model_dump_json(), time.time()))
            row = conn.execute("SELECT result_json FROM releases WHERE session_id = ? AND "
                               "release = ?", (session_id, name)).fetchone()
            # The CS-noised values were this server's private view; the release replaces them.
            conn.execute("DELETE FROM release_chunks WHERE session_id = ? AND release = ?",
                         (session_id, name))
        log.info("session %s: release %s decrypted and noised (%d cells)", session_id, name,
                 len(released))
        return wire.ReleaseResult.model_validate_json(row["result_json"])

    def _charge(self, session_id: str, spec, manifest: wire.ReleaseManifest) -> None:
        """Charge the ledger for ``spec`` once, bound to ``manifest``; refuse overspending."""
        plan = self.plan(session_id)
        digest = manifest.digest()
        with self.db.transaction() as conn:
            if self.privacy_ledger.charged_for(conn, session_id, spec.name, digest):
                return
            # The charge must bind the manifest that is registered at this instant: a peer
            # replacing it between a chunk's check and this charge would otherwise get chunks
            # of two different manifests decrypted under one charge.
            registered = conn.execute("SELECT digest FROM manifests WHERE session_id = ? AND "
                                      "release = ?", (session_id, spec.name)).fetchone()
            if registered is not None and registered["digest"] != digest:
                raise ServiceError(409, f"the manifest of release {spec.name!r} changed while "
                                        "this chunk was being checked; send it again")
            self.privacy_ledger.charge(conn, plan, session_id, spec.name, spec.rho, digest,
                                       manifest.model_dump_json())

    @staticmethod
    def _result(session_id, plan, spec, released) -> wire.ReleaseResult:
        marginals = {}
        pos = 0
        for slot in plan.slots_of(spec):
            marginals[slot.key] = wire.ReleasedMarginal(
                attrs=[plan.schema.names[a] for a in slot.attrs], shape=list(slot.shape),
                counts=released[pos:pos + slot.size].tolist())
            pos += slot.size
        return wire.ReleaseResult(session_id=session_id, release=spec.name, rho=str(spec.rho),
                                  sigma2_per_server=str(spec.sigma2), marginals=marginals)

    def pool_noise(self, session_id: str, label: str, positions: np.ndarray) -> np.ndarray:
        """This server's noise drawn at session creation (``dp.noise_pool``)."""
        blob = (self.session_dir(session_id) / "noise_pool.npz").read_bytes()
        return pool_noise(blob, label, positions)

    def releases_done(self, session_id: str) -> list[str]:
        with self.db.connect() as conn:
            return [r["release"] for r in conn.execute(
                "SELECT release FROM releases WHERE session_id = ?", (session_id,))]

    def ledger(self, session_id: str) -> wire.LedgerView:
        return self.privacy_ledger.view(session_id, self.plan(session_id))

    def status(self, session_id: str) -> wire.SessionStatus:
        public = self.public(session_id)
        uploaded = self.uploaded_clients(session_id)
        done = self.releases_done(session_id)
        planned = [r.name for r in public.releases]
        if set(done) == set(planned):
            state = "released"
        elif len(uploaded) < len(public.clients):
            state = "collecting"
        else:
            state = "computing"
        detail = ""
        if (public.selection is not None and public.selection.mode == "noisy-greedy"
                and state == "computing" and "one_way" in done):
            detail = ("noisy-greedy selection decided"
                      if self.selection.noisy_greedy.pairs(session_id) is not None
                      else "waiting for the noisy dependency scores")
        elif public.selection is not None and state == "computing" and "one_way" in done:
            detail = (f"selection round {len(self.selection.decided(session_id))} of "
                      f"{public.selection.rounds} decided")
        return wire.SessionStatus(session_id=session_id, state=state, clients_uploaded=uploaded,
                                  clients_missing=[c for c in public.clients if c not in uploaded],
                                  releases_done=done, detail=detail)

    def release_document(self, session_id: str) -> wire.ReleaseDocument:
        public = self.public(session_id)
        status = self.status(session_id)
        if status.state != "released":
            raise ServiceError(409, f"session not released yet (state: {status.state})")
        with self.db.connect() as conn:
            rows = {r["release"]: r["result_json"] for r in conn.execute(
                "SELECT release, result_json FROM releases WHERE session_id = ?",
                (session_id,))}
        results = [wire.ReleaseResult.model_validate_json(rows[r.name]) for r in public.releases]
        ledger = self.ledger(session_id)
        return wire.ReleaseDocument(
            session_id=session_id, schema=public.schema_, parameter_set=public.parameter_set,
            noise={"mechanism": "discrete_gaussian",
                   "servers": ["compute_server", "key_server"],
                   "note": "each server adds independent N_Z(0, sigma2_per_server); the "
                           "published counts carry both (variance 2 sigma2); each server's "
                           "view is rho-zCDP on its own"},
            accounting=wire.ReleaseAccounting(
                neighbouring="add/remove one record of the union",
                rho_total=ledger.rho_total, rho_spent=ledger.rho_spent,
                epsilon_spent=ledger.epsilon_spent, delta=ledger.delta,
                delta_conversion=public.conversion_delta(), epsilon_budget=public.epsilon,
                conversion="zCDP -> (eps, delta_conversion): Canonne-Kamath-Steinke 2020, "
                           "rounded up; delta_total = delta_conversion + the selection's "
                           "reserved terms <= delta",
                entries=ledger.entries,
                selection=self.selection.accounting(session_id, public),
                delta_total=None if public.selection is None else public.delivered_delta()),
            releases=results)

    def peer_session(self, session_id: str) -> wire.PeerSession:
        public = self.public(session_id)
        directory = self.session_dir(session_id)
        return wire.PeerSession(
            session=public, client_token_hashes=self.client_token_hashes(session_id),
            server_zip_b64=base64.b64encode((directory / "server.zip").read_bytes()).decode(),
            evaluation_keys_b64=base64.b64encode(
                (directory / "evaluation_keys.bin").read_bytes()).decode(),
            **self.selection.peer_artefacts(session_id))
