"""The key server's releases: bind a release to its ciphertexts, decrypt its chunks, add this
server's noise once and publish (a release with the joint noise, ``crypto.joint_noise``, is
published as decrypted: its one noise already protects this server's view too).

Design concerns:

* **Decrypt only registered, noised releases, within budget, at most once.** A decryption
  request names a release of the session's public plan. The ledger charges its rho in the
  same SQLite transaction that checks the remaining budget, bound to the SHA-256 of the
  ciphertexts: a retry with the same ciphertexts returns the stored result (no new charge,
  no second decryption with fresh noise); different ciphertexts for a charged release are
  refused, because decrypting them would give this server a second noisy view.
* **Nothing changes on refusal.** Requests are fully validated (session, release, container
  format, chunk count, every ciphertext parses) before anything is written.
* **Its private view does not outlive the release.** The compute-server-noised values are
  deleted when the release that adds this server's noise is published.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time

import numpy as np

from feddpsyn.common import wire
from feddpsyn.common.serving import Database, ServiceError
from feddpsyn.crypto.aggregation import decode_release, publish_counts
from feddpsyn.crypto.blobs import pack_blobs
from feddpsyn.keyserver.ledger import PrivacyLedger
from feddpsyn.keyserver.selection import SelectionRole
from feddpsyn.keyserver.sessions import SessionRegistry
from feddpsyn.keyserver.uploads import closed_vectors, uploads_closed
from feddpsyn.params.release_chunks import ReleaseChunk
from feddpsyn.params.run_time import MissingNoise
from feddpsyn.params.session_plan import SessionPlan
from feddpsyn.params.shape_record import public_shape

__all__ = ["RELEASES_SQL", "Releases"]

log = logging.getLogger("feddpsyn.keyserver")

RELEASES_SQL = """
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


class Releases:
    """A session's releases in three steps (register, decrypt chunks, finalize), charged to
    the ledger; a selected release waits for the selection (:class:`SelectionRole`)."""

    def __init__(self, sessions: SessionRegistry, ledger: PrivacyLedger,
                 selection: SelectionRole):
        self._sessions = sessions
        self._ledger = ledger
        self._selection = selection
        self.db: Database = sessions.db

    def release_chunks(self, session_id: str, plan: SessionPlan,
                       name: str) -> list[ReleaseChunk]:
        """A release's chunks and the cells each carries (``params.release_chunks``)."""
        return plan.release_chunks(self._release_spec(session_id, plan, name))

    def decided_chunks(self, session_id: str, plan: SessionPlan, name: str) -> list[int] | None:
        """The chunks a release touches once its marginals are known (a fixed release's
        always, a selected one's once its pairs are chosen), else None."""
        spec = plan.release(name)
        if not spec.marginal_keys and plan.selection is not None \
                and self._selection.selected_pairs(session_id) is None:
            return None
        try:
            return [c.index for c in self.release_chunks(session_id, plan, name)]
        except (ValueError, ServiceError):
            return []  # a release that cannot resolve is refused when asked: nothing firm

    def packed_inputs(self, session_id: str, name: str, chunk: int) -> bytes:
        """A packed chunk's inputs (``params.release_chunks``): each client's masked values at
        the chunk's cells, padded with 0, encrypted as the circuit's ``m{i}``, in one
        container in the clients' order. They are the values of the uploads the compute
        server already holds, under the same key, so it learns nothing new; encrypted on
        request (a few hundred values), from the closed uploads only."""
        plan = self._sessions.plan(session_id)
        found = [c for c in self.release_chunks(session_id, plan, name)
                 if c.index == chunk and c.packed]
        if not found:
            raise ServiceError(404, f"release {name!r} has no packed chunk {chunk}")
        cells = found[0].cells
        clients = self._sessions.public(session_id).clients
        with self.db.connect() as conn:
            vectors = closed_vectors(conn, self._sessions.session_dir(session_id), session_id,
                                     clients)
        keys = self._sessions.keys(session_id)
        blobs = []
        for position, vector in enumerate(vectors):  # bounded: the session's clients
            values = np.zeros(plan.parameters.chunk_cells, dtype=np.int64)
            values[:len(cells)] = vector[cells]
            blobs.append(keys.encrypt_chunk(position, values))
        return pack_blobs(blobs)

    def _release_spec(self, session_id: str, plan: SessionPlan, name: str):
        try:
            spec = plan.release(name)
        except KeyError:
            raise ServiceError(404, f"release {name!r} is not registered for this session; "
                                    f"registered: {[r.name for r in plan.releases]}") from None
        if spec.marginal_keys or plan.selection is None:
            return spec
        selected = self._selection.selected_pairs(session_id)
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
        plan = self._sessions.plan(session_id)
        spec = self._release_spec(session_id, plan, name)
        chunks = [c.index for c in self.release_chunks(session_id, plan, name)]
        if manifest.chunks != chunks:
            raise ServiceError(409, f"release {name!r} covers chunks {chunks}, manifest lists "
                                    f"{manifest.chunks}")
        if len(manifest.digests) != len(chunks):
            raise ServiceError(409, f"release {name!r} has {len(chunks)} chunks, the manifest "
                                    f"lists {len(manifest.digests)} digests (one per chunk)")
        self._check_noise_statement(plan, name, spec, manifest)
        with self.db.transaction() as conn:
            if not uploads_closed(conn, session_id):
                # Every release sums closed uploads only (keyserver.uploads): none replaced.
                raise ServiceError(409, "the session's uploads are not closed: the compute "
                                        "server closes them before it sums anything")
            if not self._ledger.charged_for(conn, session_id, name, manifest.digest()):
                self._ledger.check_budget(conn, plan, session_id, name, spec.rho)
                conn.execute("INSERT OR REPLACE INTO manifests VALUES (?, ?, ?, ?)",
                             (session_id, name, manifest.model_dump_json(), manifest.digest()))
        return self.release_progress(session_id, name)

    @staticmethod
    def _check_noise_statement(plan: SessionPlan, name: str, spec,
                               manifest: wire.ReleaseManifest) -> None:
        """A release whose noise is decided at run time (a privsyn split, or its even
        two-server fallback) is decrypted only if the compute server decided alike: were it
        to add its Gaussian where this server adds nothing, it would know the published
        noise. Both decide from public data (``SessionPlan.split_release``); this compares."""
        planned = plan.release(name)
        if planned.allocation != "privsyn" and manifest.noise is None:
            return
        mine = plan.noise_statement(spec)
        if manifest.noise != mine:
            raise ServiceError(409, f"release {name!r}: the compute server's noise "
                                    f"({manifest.noise!r:.200}) is not this server's "
                                    f"({mine!r:.200}); nothing is decrypted")

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
        plan = self._sessions.plan(session_id)
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
        keys = self._sessions.keys(session_id)
        try:
            value = keys.parse(body)
        except Exception:
            # No detail: a library message here could quote ciphertext bytes.
            raise ServiceError(422, f"chunk {chunk} is not a ciphertext of this circuit "
                                    "(truncated or corrupted?)") from None
        # Charged before the first decryption, once per release (idempotent afterwards).
        self.charge(session_id, spec, manifest)
        try:
            decrypted = keys.decrypt_value(value)
        except Exception:
            raise ServiceError(422, "ciphertext does not decrypt under this session's "
                                    "keys") from None
        places = next(c.places for c in self.release_chunks(session_id, plan, name)
                      if c.index == chunk)
        size = plan.parameters.chunk_cells
        if decrypted.shape != (size,):
            raise ServiceError(422, f"ciphertext holds {decrypted.shape}, expected ({size},)")
        # Residues mod 2^k: the noise is added before centring (crypto.aggregation.publish_counts).
        values = decrypted[places] % (1 << plan.parameters.count_bits)
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
        refusing there would itself leak. A cheap check, not a proof (THREAT_MODEL.md).
        With the joint noise the floor is exact: |Z| <= span/2 always."""
        slack = spec.key_server_noise_bound
        centred = decode_release(residues, plan.parameters.count_bits)
        if len(centred) and centred.min() < -slack:
            raise ServiceError(422, f"chunk {chunk} does not decode to noisy counts (a value "
                                    f"below -{slack:.0f}, the noise's bound); it is not "
                                    "published")

    def finalize_release(self, session_id: str, name: str) -> wire.ReleaseResult:
        """Step 3: once every chunk is in, add this server's noise once and publish."""
        plan = self._sessions.plan(session_id)
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
        # Manifest order is release order: layout chunks ascending, or packed 0, 1, ...
        noised_by_cs = np.concatenate([parts[c] for c in sorted(parts)])
        cells = np.concatenate([c.cells for c in self.release_chunks(session_id, plan, name)])
        try:
            # Fail closed: every count of a joint release has its shape (a missing one is an
            # error, nothing published), and a two-server one its pool noise (below).
            plan.cell_noises(spec)
        except MissingNoise as exc:
            raise ServiceError(500, str(exc)) from None
        if spec.joint is not None:
            # One noise neither server knows is already in: nothing of this server's to add.
            released = decode_release(noised_by_cs, plan.parameters.count_bits)
        else:
            noise = self._sessions.pool_noise(session_id, plan.noise_label(spec), cells)
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

    def charge(self, session_id: str, spec, manifest: wire.ReleaseManifest) -> None:
        """Charge the ledger for ``spec`` once, bound to ``manifest``; refuse overspending."""
        plan = self._sessions.plan(session_id)
        digest = manifest.digest()
        with self.db.transaction() as conn:
            if self._ledger.charged_for(conn, session_id, spec.name, digest):
                return
            # The charge must bind the manifest that is registered at this instant: a peer
            # replacing it between a chunk's check and this charge would otherwise get chunks
            # of two different manifests decrypted under one charge.
            registered = conn.execute("SELECT digest FROM manifests WHERE session_id = ? AND "
                                      "release = ?", (session_id, spec.name)).fetchone()
            if registered is not None and registered["digest"] != digest:
                raise ServiceError(409, f"the manifest of release {spec.name!r} changed while "
                                        "this chunk was being checked; send it again")
            self._ledger.charge(conn, plan, session_id, spec.name, spec.rho, digest,
                                       manifest.model_dump_json())

    @staticmethod
    def _result(session_id, plan, spec, released) -> wire.ReleaseResult:
        # A split release states each marginal's own noise (its group's shape and variance).
        group = {key: part for part in spec.parts for key in part.marginal_keys}
        marginals = {}
        pos = 0
        for slot in plan.slots_of(spec):
            part = group.get(slot.key)
            if spec.parts and (part is None or (spec.joint is not None and part.joint is None)):
                # A split release states each count's noise; one it cannot is not published.
                raise ServiceError(500, str(MissingNoise(
                    f"release {spec.name!r}: marginal {slot.key} is in no group with a joint "
                    "shape; nothing is released")))
            marginals[slot.key] = wire.ReleasedMarginal(
                attrs=[plan.schema.names[a] for a in slot.attrs], shape=list(slot.shape),
                counts=released[pos:pos + slot.size].tolist(),
                per_count_variance=None if part is None else str(part.per_count_variance),
                joint=None if part is None else public_shape(part.joint))
            pos += slot.size
        joint = None if spec.parts else spec.joint
        return wire.ReleaseResult(
            session_id=session_id, release=spec.name, rho=str(spec.rho),
            sigma2_per_server="0" if spec.joint is not None else str(spec.sigma2),
            noise=spec.noise_kind, per_count_variance=str(plan.per_count_variance(spec)),
            joint=None if joint is None else public_shape(joint),
            allocation=spec.allocation if spec.parts else "even", marginals=marginals)

    def published(self, session_id: str) -> dict[str, wire.ReleaseResult]:
        """The session's published releases by name."""
        with self.db.connect() as conn:
            return {r["release"]: wire.ReleaseResult.model_validate_json(r["result_json"])
                    for r in conn.execute("SELECT release, result_json FROM releases WHERE "
                                          "session_id = ?", (session_id,))}

    def releases_done(self, session_id: str) -> list[str]:
        with self.db.connect() as conn:
            return [r["release"] for r in conn.execute(
                "SELECT release FROM releases WHERE session_id = ?", (session_id,))]

