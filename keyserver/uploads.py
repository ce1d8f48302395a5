"""The key server's intake: the clients' masked vectors and the offline encryption job.

Design concerns:

* **This server sees only uniform values.** A masked vector is (x + s) mod 2^k with the
  client's one-time masks s, which only the compute server can rebuild (DESIGN step 3).
* **Idempotent, and closed once anything is released.** The same upload again is answered
  ``stored=false``; a different one is refused; a new upload after the first ledger entry is
  refused, because the releases already charged would not cover it.
* **An owner may replace its upload until the compute server starts on it.** A different
  masked vector sent with ``replace=true`` takes the place of the stored one: the old vector
  and its ciphertexts are deleted, the row names the new commitment, and the replacement is
  recorded (``masked_replaced``, in the ledger view and the log). It must be masked with a
  fresh seed (a commitment this client never used here): two count vectors under the same
  masks would show this server their difference, so a reused commitment is refused and
  this server keeps seeing only uniform values. The compute server closes the uploads
  (:meth:`MaskedUploads.close`) before it sums anything, naming the commitment and
  ciphertext digest of every client's upload it holds; the close succeeds only if they are
  the current ones, and from then on nothing is replaced (409), so no release ever sums an
  old vector and no replaced upload is ever summed with its client's new seed.
* **An absent owner does not hold the session.** The operator may close the uploads
  without named owners (:meth:`MaskedUploads.leave_out`), and a session with a deadline
  closes them itself once it passes (:meth:`MaskedUploads.close_due`), if at least the
  session's quorum uploaded. An owner left out gets a vector of zeros under the public
  absent commitment (``crypto.masking.absent_commitment``), stored and encrypted as any
  upload: the compute server reads that commitment as "no seed, no mask", so the circuits,
  the sums and the releases run unchanged over the session's clients, the absent ones adding
  nothing. Its own upload is refused from then on, at both servers. The releases are of the
  union of the present owners' tables; the plan, max_rows and the accounting hold as they
  are (``docs/privacy.md``, "Owners left out").
* **Re-entrant encryption.** The job encrypts whatever is stored and not yet encrypted, so a
  restart resumes it; a vector replaced while it was being encrypted is encrypted again.
  A vector's chunks are spread over the offline pool's workers (``keyserver.offline_pool``),
  in contiguous groups, and stored together once every group is encrypted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from feddpsyn.common import wire
from feddpsyn.common.serving import Database, ServiceError, already_stored, write_private
from feddpsyn.crypto.aggregation import chunk_ranges
from feddpsyn.crypto.blobs import pack_blobs
from feddpsyn.crypto.masking import absent_commitment
from feddpsyn.keyserver.ledger import PrivacyLedger
from feddpsyn.keyserver.offline_pool import OfflinePool, split_evenly
from feddpsyn.keyserver.sessions import SessionRegistry

__all__ = ["UPLOADS_SQL", "EncryptMaskedChunks", "MaskedUploads", "closed_vectors",
           "uploads_closed"]

log = logging.getLogger("feddpsyn.keyserver")

UPLOADS_SQL = """
CREATE TABLE IF NOT EXISTS masked (
    session_id TEXT NOT NULL, client_id TEXT NOT NULL, commitment TEXT NOT NULL,
    digest TEXT NOT NULL, received REAL NOT NULL, cipher_digest TEXT,
    PRIMARY KEY (session_id, client_id));
CREATE TABLE IF NOT EXISTS masked_replaced (
    session_id TEXT NOT NULL, client_id TEXT NOT NULL, old_commitment TEXT NOT NULL,
    old_digest TEXT NOT NULL, new_digest TEXT NOT NULL, replaced REAL NOT NULL);
CREATE TABLE IF NOT EXISTS uploads_closed (
    session_id TEXT PRIMARY KEY, closed REAL NOT NULL, uploads_json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS absent (
    session_id TEXT NOT NULL, client_id TEXT NOT NULL, marked REAL NOT NULL,
    reason TEXT NOT NULL, PRIMARY KEY (session_id, client_id));
"""


def uploads_closed(conn, session_id: str) -> bool:
    """True once the compute server closed the session's uploads, or (a session closed
    before uploads were closed explicitly) once anything was charged."""
    return conn.execute("SELECT 1 FROM uploads_closed WHERE session_id = ? UNION ALL "
                        "SELECT 1 FROM ledger WHERE session_id = ? LIMIT 1",
                        (session_id, session_id)).fetchone() is not None


def _upload_digest(commitment: str, vector_bytes: bytes) -> str:
    """What the ``masked`` table records of an upload, and every reader checks its stored
    file against: SHA-256 of the seed commitment and the vector's int64 bytes."""
    return hashlib.sha256(commitment.encode() + vector_bytes).hexdigest()


def _masked_path(directory: Path, client_id: str) -> Path:
    """Where a session's folder keeps a client's masked vector (int64 bytes)."""
    return directory / "masked" / f"{client_id}.npy"


def closed_vectors(conn, directory: Path, session_id: str, clients: list[str]) -> list[np.ndarray]:
    """The clients' masked vectors as the closed uploads recorded them, in ``clients``'
    order; refuses (409) before the uploads are closed or if a stored file is not its
    recorded upload, so nothing is ever made from a vector a release would not sum."""
    if not uploads_closed(conn, session_id):
        raise ServiceError(409, "the session's uploads are not closed yet")
    vectors = []
    for client_id in clients:  # bounded: the session's clients
        row = conn.execute("SELECT commitment, digest FROM masked WHERE session_id = ? AND "
                           "client_id = ?", (session_id, client_id)).fetchone()
        data = _masked_path(directory, client_id).read_bytes() if row else b""
        if row is None or _upload_digest(row["commitment"], data) != row["digest"]:
            raise ServiceError(409, f"client {client_id}'s stored upload is not the one "
                                    "recorded")
        vectors.append(np.frombuffer(data, dtype=np.int64))
    return vectors


@dataclass(frozen=True)
class EncryptMaskedChunks:
    """An offline task: consecutive chunks of one client's masked vector (uniform values,
    padded to the chunk size), encrypted as the circuit's input ``m{position}``."""

    position: int
    chunks: tuple[np.ndarray, ...]

    def run(self, keys) -> list[bytes]:
        return [keys.encrypt_chunk(self.position, chunk) for chunk in self.chunks]


class MaskedUploads:
    """The masked vectors of a server's sessions and their ciphertexts for the compute
    server."""

    def __init__(self, sessions: SessionRegistry, ledger: PrivacyLedger,
                 pool: OfflinePool):
        self._sessions = sessions
        self._ledger = ledger
        self._pool = pool
        self.db: Database = sessions.db
        self._mismatched: set[str] = set()  # upload digests whose file is another's, logged

    def store_masked(self, session_id: str, client_id: str, upload: wire.MaskedUpload,
                     replace: bool = False) -> wire.UploadReceipt:
        public = self._sessions.public(session_id)
        k = public.parameter_set["count_bits"]
        # The session's shape, not the body's (wire.MaskedUpload): 409, as HTTP has it for a
        # request that conflicts with the state of its target.
        if len(upload.values) != public.total_cells:
            raise ServiceError(409, f"this session expects {public.total_cells} masked values, "
                                    f"got {len(upload.values)}")
        values = np.asarray(upload.values, dtype=object)
        if any(v >= (1 << k) for v in upload.values):
            raise ServiceError(409, f"this session's masked values are integers in [0, 2^{k})")
        vector = values.astype(np.int64)
        digest = _upload_digest(upload.commitment, vector.tobytes())
        directory = self._sessions.session_dir(session_id)
        path = _masked_path(directory, client_id)
        with self.db.transaction() as conn:
            if self._is_absent(conn, session_id, client_id):
                raise ServiceError(409, wire.left_out_message(session_id, client_id))
            row = conn.execute("SELECT commitment, digest FROM masked WHERE session_id = ? AND "
                               "client_id = ?", (session_id, client_id)).fetchone()
            try:
                if already_stored(row and row["digest"], digest, "masked vector", client_id):
                    # An identical retry is answered even after release; anything new is late.
                    return wire.UploadReceipt(session_id=session_id, client_id=client_id,
                                              stored=False, digest=digest)
            except ServiceError as exc:
                if not replace:
                    raise ServiceError(409, f"{exc.message}; to replace it before the session "
                                            "computes on it, upload again with replace=true "
                                            "(feddpsyn client upload --replace)") from None
            if row is None and self._ledger.has_entries(conn, session_id):
                raise ServiceError(409, "session already released; uploads are closed")
            if row is not None:
                self._check_replaceable(conn, session_id, client_id, upload.commitment)
            write_private(path, vector.tobytes())
            if row is None:
                conn.execute("INSERT INTO masked VALUES (?, ?, ?, ?, ?, NULL)",
                             (session_id, client_id, upload.commitment, digest, time.time()))
            else:
                conn.execute("UPDATE masked SET commitment = ?, digest = ?, received = ?, "
                             "cipher_digest = NULL WHERE session_id = ? AND client_id = ?",
                             (upload.commitment, digest, time.time(), session_id, client_id))
                conn.execute("INSERT INTO masked_replaced VALUES (?, ?, ?, ?, ?, ?)",
                             (session_id, client_id, row["commitment"], row["digest"], digest,
                              time.time()))
                (directory / "ciphertexts" / f"{client_id}.bin").unlink(missing_ok=True)
        if row is not None:
            log.info("session %s: client %s replaced its masked vector (digest %s... -> "
                     "%s...); the old one and its ciphertexts are deleted", session_id,
                     client_id, row["digest"][:12], digest[:12])
        return wire.UploadReceipt(session_id=session_id, client_id=client_id, stored=True,
                                  digest=digest)

    @staticmethod
    def _check_replaceable(conn, session_id: str, client_id: str, commitment: str) -> None:
        """409 unless a stored upload may be replaced by one with ``commitment``."""
        if uploads_closed(conn, session_id):
            raise ServiceError(409, f"client {client_id!r}: the compute server has started on "
                                    "this session's uploads, so the stored masked vector can "
                                    "no longer be replaced")
        used = {r["old_commitment"] for r in conn.execute(
            "SELECT old_commitment FROM masked_replaced WHERE session_id = ? AND "
            "client_id = ?", (session_id, client_id))}
        current = conn.execute("SELECT commitment FROM masked WHERE session_id = ? AND "
                               "client_id = ?", (session_id, client_id)).fetchone()
        if commitment in used or commitment == current["commitment"]:
            raise ServiceError(409, f"client {client_id!r}: a replacement must be masked with a "
                                    "fresh seed (this commitment was used before): the same "
                                    "masks on two count vectors would show this server their "
                                    "difference")

    def close(self, session_id: str, uploads: wire.UploadsClose) -> wire.UploadsClosed:
        """Close the session's uploads on the compute server's word that it holds exactly
        these (commitment, ciphertext digest) per client, before it sums anything. 409 if any
        is not the current one (replaced since it was fetched, or not encrypted yet): nothing
        closes, and the compute server fetches again. Idempotent."""
        public = self._sessions.public(session_id)
        named = {c: (u.commitment, u.digest) for c, u in uploads.uploads.items()}
        if sorted(named) != sorted(public.clients):
            raise ServiceError(409, f"the uploads to close must name every client of the "
                                    f"session {public.clients}, no other")
        with self.db.transaction() as conn:
            closed = conn.execute("SELECT closed, uploads_json FROM uploads_closed WHERE "
                                  "session_id = ?", (session_id,)).fetchone()
            if closed is not None:
                if {c: tuple(v) for c, v in json.loads(closed["uploads_json"]).items()} \
                        != named:
                    raise ServiceError(409, "the session's uploads were closed on other "
                                            "uploads than these")
                return wire.UploadsClosed(session_id=session_id, closed=closed["closed"])
            current = {r["client_id"]: (r["commitment"], r["cipher_digest"]) for r in
                       conn.execute("SELECT client_id, commitment, cipher_digest FROM masked "
                                    "WHERE session_id = ?", (session_id,))}
            stale = sorted(c for c in public.clients if current.get(c) != named[c])
            if stale:
                raise ServiceError(409, f"uploads of clients {stale} are not the current ones "
                                        "(replaced, or not encrypted yet): fetch them again")
            now = time.time()
            conn.execute("INSERT INTO uploads_closed VALUES (?, ?, ?)",
                         (session_id, now, json.dumps(named, sort_keys=True)))
        log.info("session %s: uploads closed (%d clients); none can be replaced from now on",
                 session_id, len(named))
        return wire.UploadsClosed(session_id=session_id, closed=now)

    # ------------------------------------------------------------ owners left out
    @staticmethod
    def _is_absent(conn, session_id: str, client_id: str) -> bool:
        return conn.execute("SELECT 1 FROM absent WHERE session_id = ? AND client_id = ?",
                            (session_id, client_id)).fetchone() is not None

    def absent(self, session_id: str) -> list[str]:
        """The owners left out of the session, in the order of its clients."""
        clients = self._sessions.public(session_id).clients
        with self.db.connect() as conn:
            left = {r["client_id"] for r in conn.execute(
                "SELECT client_id FROM absent WHERE session_id = ?", (session_id,))}
        return [c for c in clients if c in left]

    def policy(self, session_id: str) -> tuple[float | None, int]:
        """(the session's upload deadline or None, its quorum), as the operator asked."""
        with self.db.connect() as conn:
            row = conn.execute("SELECT request_json FROM session_preparation WHERE id = ?",
                               (session_id,)).fetchone()
        clients = self._sessions.public(session_id).clients
        if row is None:  # a session created before preparation was a job: every owner
            return None, len(clients)
        request = wire.SessionCreate.model_validate_json(row["request_json"])
        return request.upload_deadline, request.min_owners()

    def leave_out(self, session_id: str, clients: list[str], reason: str) -> list[str]:
        """Close the session's uploads without ``clients``, none of whom uploaded: each gets
        a vector of zeros under the absent commitment (module docstring). 409 if one of them
        uploaded or is not the session's, if the uploads are closed, or if fewer owners than
        the quorum would be left. Idempotent for owners already left out. Returns every
        owner left out so far."""
        public = self._sessions.public(session_id)
        _, quorum = self.policy(session_id)
        unknown = sorted(set(clients) - set(public.clients))
        if unknown:
            raise ServiceError(409, f"clients {unknown} are not in session {session_id} "
                                    f"{public.clients}")
        directory = self._sessions.session_dir(session_id)
        zeros = np.zeros(public.total_cells, dtype=np.int64)
        with self.db.transaction() as conn:
            if uploads_closed(conn, session_id):
                raise ServiceError(409, "the session's uploads are already closed; it runs "
                                        "on the uploads it has")
            left = {r["client_id"] for r in conn.execute(
                "SELECT client_id FROM absent WHERE session_id = ?", (session_id,))}
            uploaded = {r["client_id"] for r in conn.execute(
                "SELECT client_id FROM masked WHERE session_id = ?", (session_id,))} - left
            sent = sorted(set(clients) & uploaded)
            if sent:
                raise ServiceError(409, f"clients {sent} have uploaded to the session: an "
                                        "owner who uploaded is not left out")
            new = [c for c in public.clients if c in set(clients) - left]
            present = len(public.clients) - len(left) - len(new)
            if present < quorum:
                raise ServiceError(409, f"leaving out {new} would leave {present} of the "
                                        f"session's {len(public.clients)} owners, fewer than "
                                        f"its quorum of {quorum}")
            now = time.time()
            for client_id in new:  # bounded: the session's clients
                commitment = absent_commitment(session_id, client_id)
                write_private(_masked_path(directory, client_id), zeros.tobytes())
                conn.execute("INSERT INTO masked VALUES (?, ?, ?, ?, ?, NULL)",
                             (session_id, client_id, commitment,
                              _upload_digest(commitment, zeros.tobytes()), now))
                conn.execute("INSERT INTO absent VALUES (?, ?, ?, ?)",
                             (session_id, client_id, now, reason))
        if new:
            log.info("session %s: uploads closed without %s (%s); their uploads are refused "
                     "from now on", session_id, new, reason)
        return self.absent(session_id)

    def close_due(self, session_ids: list[str], now: float | None = None) -> int:
        """The offline job's step: every session whose upload deadline has passed leaves out
        its owners without an upload, if at least its quorum uploaded (else it goes on
        waiting, its status says so). Returns how many sessions it closed."""
        now = time.time() if now is None else now
        closed = 0
        for session_id in session_ids:  # bounded: the server's sessions
            deadline, quorum = self.policy(session_id)
            if deadline is None or now < deadline:
                continue
            public = self._sessions.public(session_id)
            with self.db.connect() as conn:
                if uploads_closed(conn, session_id):
                    continue
                have = {r["client_id"] for r in conn.execute(
                    "SELECT client_id FROM masked WHERE session_id = ?", (session_id,))}
            missing = [c for c in public.clients if c not in have]
            if not missing or len(public.clients) - len(missing) < quorum:
                continue
            try:
                self.leave_out(session_id, missing, "its upload deadline passed")
            except ServiceError as exc:  # an upload arrived meanwhile: the next pass sees it
                log.info("session %s: deadline close deferred: %s", session_id, exc.message)
                continue
            closed += 1
        return closed

    def replacements(self, session_id: str) -> list[wire.UploadReplacement]:
        """Every replaced upload of the session, in order."""
        with self.db.connect() as conn:
            rows = conn.execute("SELECT client_id, old_digest, new_digest, replaced FROM "
                                "masked_replaced WHERE session_id = ? ORDER BY replaced",
                                (session_id,)).fetchall()
        return [wire.UploadReplacement(client_id=r["client_id"], old_digest=r["old_digest"],
                                       new_digest=r["new_digest"], at=r["replaced"])
                for r in rows]

    def run_encryption_job(self) -> int:
        """Encrypt every stored masked vector not yet encrypted. Returns how many it did."""
        with self.db.connect() as conn:
            todo = conn.execute("SELECT session_id, client_id, commitment, digest FROM masked "
                                "WHERE cipher_digest IS NULL").fetchall()
        done = 0
        for row in todo:
            if self._encrypt_client(row["session_id"], row["client_id"], row["commitment"],
                                    row["digest"]):
                done += 1
        return done

    def _encrypt_client(self, session_id: str, client_id: str, commitment: str,
                        digest: str) -> bool:
        """Encrypt the stored vector of upload ``digest``; False (nothing written) if the
        file is not that upload or the upload was replaced meanwhile."""
        public = self._sessions.public(session_id)
        params = public.parameter_set
        position = public.clients.index(client_id)
        directory = self._sessions.session_dir(session_id)
        data = _masked_path(directory, client_id).read_bytes()
        if _upload_digest(commitment, data) != digest:
            # A replacement cut short between its file and its record: the client's retry
            # of the replacement writes both again.
            if digest not in self._mismatched:
                self._mismatched.add(digest)
                log.warning("session %s: the stored masked vector of client %s is not the "
                            "one recorded; waiting for its upload again", session_id,
                            client_id)
            return False
        vector = np.frombuffer(data, dtype=np.int64)
        chunk = params["chunk_cells"]
        started = time.time()
        chunks = []
        for c in chunk_ranges(len(vector), chunk):
            padded = np.zeros(chunk, dtype=np.int64)
            padded[:c.stop - c.start] = vector[c.start:c.stop]
            chunks.append(padded)
        tasks = [EncryptMaskedChunks(position, tuple(group))
                 for group in split_evenly(chunks, self._pool.workers)]
        encrypted = self._pool.map(self._sessions.key_files(session_id), tasks,
                                   f"session {session_id}: encrypting client {client_id}'s "
                                   "masked vector")
        packed = pack_blobs([blob for group in encrypted for blob in group])
        with self.db.transaction() as conn:
            # Written only if the upload is still the one encrypted (not replaced meanwhile).
            current = conn.execute("SELECT digest FROM masked WHERE session_id = ? AND "
                                   "client_id = ?", (session_id, client_id)).fetchone()
            if current is None or current["digest"] != digest:
                log.info("session %s: client %s replaced its upload during its encryption; "
                         "encrypting the new one", session_id, client_id)
                return False
            write_private(directory / "ciphertexts" / f"{client_id}.bin", packed)
            conn.execute("UPDATE masked SET cipher_digest = ? WHERE session_id = ? AND "
                         "client_id = ?", (hashlib.sha256(packed).hexdigest(), session_id,
                                           client_id))
        log.info("session %s: encrypted client %s (%d values, %.2f s)", session_id, client_id,
                 len(vector), time.time() - started)
        return True

    def ciphertext_index(self, session_id: str) -> list[dict]:
        self._sessions.public(session_id)
        with self.db.connect() as conn:
            rows = conn.execute("SELECT client_id, commitment, cipher_digest FROM masked "
                                "WHERE session_id = ? AND cipher_digest IS NOT NULL",
                                (session_id,)).fetchall()
        return [{"client_id": r["client_id"], "commitment": r["commitment"],
                 "digest": r["cipher_digest"]} for r in rows]

    def ciphertexts(self, session_id: str, client_id: str) -> bytes:
        path = self._sessions.session_dir(session_id) / "ciphertexts" / f"{client_id}.bin"
        if not path.exists():
            raise ServiceError(404, f"no ciphertexts for client {client_id!r} yet")
        return path.read_bytes()

    def uploaded_clients(self, session_id: str) -> list[str]:
        """The owners whose upload is stored (not those left out)."""
        with self.db.connect() as conn:
            return [r["client_id"] for r in conn.execute(
                "SELECT client_id FROM masked WHERE session_id = ? AND client_id NOT IN "
                "(SELECT client_id FROM absent WHERE session_id = ?)",
                (session_id, session_id))]
