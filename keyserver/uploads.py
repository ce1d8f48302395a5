"""The key server's intake: the clients' masked vectors and the offline encryption job.

Design concerns:

* **This server sees only uniform values.** A masked vector is (x + s) mod 2^k with the
  client's one-time masks s, which only the compute server can rebuild (DESIGN step 3).
* **Idempotent, and closed once anything is released.** The same upload again is answered
  ``stored=false``; a different one is refused; a new upload after the first ledger entry is
  refused, because the releases already charged would not cover it.
* **Re-entrant encryption.** The job encrypts whatever is stored and not yet encrypted, so a
  restart resumes it.
"""

from __future__ import annotations

import hashlib
import logging
import time

import numpy as np

from common import wire
from common.serving import Database, ServiceError, already_stored, write_private
from crypto.aggregation import chunk_ranges
from crypto.blobs import pack_blobs
from keyserver.ledger import PrivacyLedger
from keyserver.sessions import SessionRegistry

__all__ = ["UPLOADS_SQL", "MaskedUploads"]

log = logging.getLogger("feddpsyn.keyserver")

UPLOADS_SQL = """
CREATE TABLE IF NOT EXISTS masked (
    session_id TEXT NOT NULL, client_id TEXT NOT NULL, commitment TEXT NOT NULL,
    digest TEXT NOT NULL, received REAL NOT NULL, cipher_digest TEXT,
    PRIMARY KEY (session_id, client_id));
"""


class MaskedUploads:
    """The masked vectors of a server's sessions and their ciphertexts for the compute
    server."""

    def __init__(self, sessions: SessionRegistry, ledger: PrivacyLedger):
        self._sessions = sessions
        self._ledger = ledger
        self.db: Database = sessions.db

    def store_masked(self, session_id: str, client_id: str,
                     upload: wire.MaskedUpload) -> wire.UploadReceipt:
        public = self._sessions.public(session_id)
        k = public.parameter_set["count_bits"]
        if len(upload.values) != public.total_cells:
            raise ServiceError(422, f"expected {public.total_cells} masked values, "
                                    f"got {len(upload.values)}")
        values = np.asarray(upload.values, dtype=object)
        if any((not isinstance(v, int)) or v < 0 or v >= (1 << k) for v in upload.values):
            raise ServiceError(422, f"masked values must be integers in [0, 2^{k})")
        vector = values.astype(np.int64)
        digest = hashlib.sha256(upload.commitment.encode() + vector.tobytes()).hexdigest()
        path = self._sessions.session_dir(session_id) / "masked" / f"{client_id}.npy"
        with self.db.transaction() as conn:
            row = conn.execute("SELECT digest FROM masked WHERE session_id = ? AND "
                               "client_id = ?", (session_id, client_id)).fetchone()
            if already_stored(row and row["digest"], digest, "masked vector", client_id):
                return wire.UploadReceipt(session_id=session_id, client_id=client_id,
                                          stored=False, digest=digest)
            # An identical retry is answered above even after release; anything new is late.
            if self._ledger.has_entries(conn, session_id):
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
        public = self._sessions.public(session_id)
        params = public.parameter_set
        position = public.clients.index(client_id)
        directory = self._sessions.session_dir(session_id)
        vector = np.frombuffer((directory / "masked" / f"{client_id}.npy").read_bytes(),
                               dtype=np.int64)
        keys = self._sessions.keys(session_id)
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
        with self.db.connect() as conn:
            return [r["client_id"] for r in conn.execute(
                "SELECT client_id FROM masked WHERE session_id = ?", (session_id,))]
