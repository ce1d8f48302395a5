"""The key server: its parts composed, the session's creation across them, and the views
that read every part (status, the release document, the peer's copy of a session).

The parts, each its own idea: ``keyserver.sessions`` (requests, plans, keys, tokens),
``keyserver.uploads`` (masked vectors and the offline encryption job),
``keyserver.releases`` (register, decrypt, noise, publish), ``keyserver.ledger`` (the
privacy ledger) and ``keyserver.selection`` (its part of the private selection). The
server is the :class:`keyserver.store.SessionStore` the selection is built from.

Restart-safe: every state change is a committed SQLite row or an atomically renamed file.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from feddpsyn.common import wire
from feddpsyn.common.credentials import CLIENT_TOKENS_SQL
from feddpsyn.common.files import sha256_of_file
from feddpsyn.common.serving import Database, ServiceError
from feddpsyn.common.version import VERSION
from feddpsyn.keyserver.coins import COINS_SQL, JointCoins
from feddpsyn.keyserver.keys import SessionKeys
from feddpsyn.keyserver.ledger import LEDGER_SQL, PrivacyLedger
from feddpsyn.keyserver.limits import SessionLimits
from feddpsyn.keyserver.offline_pool import OfflinePool
from feddpsyn.keyserver.owner_caps import OwnerCaps
from feddpsyn.keyserver.preparation import PrepareFiles, SessionPreparation
from feddpsyn.keyserver.releases import RELEASES_SQL, Releases
from feddpsyn.keyserver.selection import SELECTION_SQL, SelectionRole
from feddpsyn.keyserver.sessions import SESSIONS_SQL, SessionRegistry
from feddpsyn.keyserver.uploads import UPLOADS_SQL, MaskedUploads
from feddpsyn.params.modes import NoiseMode, SelectionMode
from feddpsyn.params.session_plan import SessionPlan
from feddpsyn.params.shape_record import public_shape

log = logging.getLogger("feddpsyn.keyserver")


class KeyServer:
    """Sessions (:attr:`sessions`), uploads (:attr:`uploads`), releases (:attr:`releases`),
    the ledger (:attr:`privacy_ledger`) and the selection (:attr:`selection`)."""

    def __init__(self, state_dir: Path, *, prepare: PrepareFiles | None = None,
                 preparation_workers: int = 1, offline_workers: int = 1,
                 limits: SessionLimits | None = None, owner_caps: Path | None = None):
        """``prepare``: how a session's circuits, keys and noise pool are made (default: in a
        child process, ``keyserver.preparation.prepare_in_child``); ``offline_workers``: the
        local processes the offline job's chunks are spread over, never the server's own
        (``keyserver.offline_pool``); ``limits``: what one session may ask
        (``keyserver.limits``); ``owner_caps``: a file of lifetime caps per owner id
        (``keyserver.owner_caps``)."""
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        state_dir.chmod(0o700)
        self.db = Database(state_dir / "keyserver.sqlite",
                           CLIENT_TOKENS_SQL + SESSIONS_SQL + UPLOADS_SQL + RELEASES_SQL
                           + LEDGER_SQL + SELECTION_SQL + COINS_SQL)
        self.privacy_ledger = PrivacyLedger(self.db)
        self.sessions = SessionRegistry(self.db, state_dir)
        self.offline_pool = OfflinePool(offline_workers)
        self.uploads = MaskedUploads(self.sessions, self.privacy_ledger, self.offline_pool)
        self.selection = SelectionRole(self, self.privacy_ledger, self.offline_pool)
        self.releases = Releases(self.sessions, self.privacy_ledger, self.selection)
        self.coins = JointCoins(self.sessions, self.offline_pool, self.releases.decided_chunks)
        self.preparation = SessionPreparation(self.db, self.sessions, prepare=prepare,
                                              workers=preparation_workers, ahead=self.coins,
                                              limits=limits,
                                              caps=OwnerCaps(self.db, owner_caps))
        # The compute server's latest report of a long step, per session (status only).
        self._progress: dict[str, tuple[wire.WorkProgress, float]] = {}
        self._progress_lock = threading.Lock()
        # Each ready session's artefacts' SHA-256 (:meth:`peer_session`).
        self._digests: dict[tuple[str, str], str] = {}
        self._digest_lock = threading.Lock()

    def create_session(self, request: wire.SessionCreate) -> wire.SessionAccepted:
        """Check the request and its plan, accept the session and queue its preparation
        (``keyserver.preparation``): 202 before anything is compiled."""
        return self.preparation.accept(request)

    def require_ready(self, session_id: str) -> None:
        """409 for a session still being prepared, or whose preparation failed."""
        self.sessions.require_ready(session_id)

    def close(self) -> None:
        """Stop the preparation jobs (a child process is terminated; the session resumes at
        the next start) and the offline job's worker processes."""
        self.preparation.close()
        self.offline_pool.close()

    def record_progress(self, session_id: str, progress: wire.WorkProgress) -> None:
        """The compute server's report of a long step (shown in :meth:`status`)."""
        self.public(session_id)
        with self._progress_lock:
            self._progress[session_id] = (progress, time.monotonic())

    def _peer_progress(self, session_id: str) -> wire.WorkProgress | None:
        with self._progress_lock:
            held = self._progress.get(session_id)
        if held is None:
            return None
        progress, at = held
        return progress.model_copy(update={"age": round(time.monotonic() - at, 1)})

    # ------------------------------------------- the parts, as the routes and roles call them
    def session_dir(self, session_id: str) -> Path:
        return self.sessions.session_dir(session_id)

    def public(self, session_id: str) -> wire.SessionPublic:
        return self.sessions.public(session_id)

    def session_ids(self) -> list[str]:
        return self.sessions.session_ids()

    def plan(self, session_id: str) -> SessionPlan:
        return self.sessions.plan(session_id)

    def keys(self, session_id: str) -> SessionKeys:
        return self.sessions.keys(session_id)

    def client_token_hashes(self, session_id: str) -> dict[str, str]:
        return self.sessions.client_token_hashes(session_id)

    def pool_noise(self, session_id: str, label: str, positions: np.ndarray) -> np.ndarray:
        return self.sessions.pool_noise(session_id, label, positions)

    def store_masked(self, session_id: str, client_id: str, upload: wire.MaskedUpload,
                     replace: bool = False) -> wire.UploadReceipt:
        return self.uploads.store_masked(session_id, client_id, upload, replace)

    def close_uploads(self, session_id: str, uploads: wire.UploadsClose) -> wire.UploadsClosed:
        return self.uploads.close(session_id, uploads)

    def run_encryption_job(self) -> int:
        """One pass of the offline job: clients' masked vectors first (they gate the
        compute server), then at most one firm chunk of joint-noise bits a worker of the
        offline pool (``keyserver.coins``), else at most one pair's bits a worker of
        noisy-greedy's joint scores (``keyserver.noisy_greedy``; needed as soon as P2 ends).
        A selected release's chunks are guessed only while the session is prepared
        (``JointCoins.make_ahead``). A pass with nothing to do ends the pool's workers once
        they have been idle long enough (their keys' memory is freed)."""
        # Sessions whose upload deadline passed close without their absent owners first:
        # their zero vectors are then encrypted in this same pass.
        self.uploads.close_due(self.sessions.runnable_session_ids())
        done = self.uploads.run_encryption_job()
        if done == 0 and self.coins.prepare_one():
            done = 1
        if done == 0 and self.selection.noisy_greedy.prepare_one(
                self.sessions.runnable_session_ids()):
            done = 1
        if done == 0:
            self.offline_pool.end_idle()
        return done

    def ciphertext_index(self, session_id: str) -> list[dict]:
        return self.uploads.ciphertext_index(session_id)

    def ciphertexts(self, session_id: str, client_id: str) -> bytes:
        return self.uploads.ciphertexts(session_id, client_id)

    def uploaded_clients(self, session_id: str) -> list[str]:
        return self.uploads.uploaded_clients(session_id)

    def absent_clients(self, session_id: str) -> list[str]:
        return self.uploads.absent(session_id)

    def leave_out(self, session_id: str,
                  body: wire.UploadsCloseWithout) -> wire.SessionStatus:
        """The operator closes the uploads without the owners named (``keyserver.uploads``)."""
        self.uploads.leave_out(session_id, body.without, "the operator closed the uploads "
                                                         "without it")
        return self.status(session_id)

    def register_release(self, session_id: str, name: str,
                         manifest: wire.ReleaseManifest) -> wire.ReleaseProgress:
        return self.releases.register_release(session_id, name, manifest)

    def release_progress(self, session_id: str, name: str) -> wire.ReleaseProgress:
        return self.releases.release_progress(session_id, name)

    def decrypt_chunk(self, session_id: str, name: str, chunk: int, body: bytes) -> None:
        self.releases.decrypt_chunk(session_id, name, chunk, body)

    def finalize_release(self, session_id: str, name: str) -> wire.ReleaseResult:
        return self.releases.finalize_release(session_id, name)

    def _charge(self, session_id: str, spec, manifest: wire.ReleaseManifest) -> None:
        self.releases.charge(session_id, spec, manifest)

    def releases_done(self, session_id: str) -> list[str]:
        return self.releases.releases_done(session_id)

    # ------------------------------------------------------------- views over every part
    def ledger(self, session_id: str) -> wire.LedgerView:
        view = self.privacy_ledger.view(session_id, self.public(session_id))
        return view.model_copy(update={"uploads_replaced": self.uploads.replacements(session_id),
                                       "clients_absent": self.absent_clients(session_id)})

    def status(self, session_id: str) -> wire.SessionStatus:
        preparation = self.sessions.preparation(session_id)
        if preparation is not None and preparation.state != "ready":
            return self._preparation_status(session_id, preparation)
        public = self.public(session_id)
        uploaded = self.uploaded_clients(session_id)
        absent = self.absent_clients(session_id)
        deadline, quorum = self.uploads.policy(session_id)
        done = self.releases_done(session_id)
        planned = [r.name for r in public.releases]
        detail = ""
        if set(done) == set(planned):
            state = "released"
        elif len(uploaded) + len(absent) < len(public.clients):
            state = "collecting"
            if deadline is not None and time.time() >= deadline and len(uploaded) < quorum:
                detail = (f"the upload deadline passed with {len(uploaded)} of "
                          f"{len(public.clients)} owners, fewer than the quorum of {quorum}: "
                          "waiting for more uploads")
        else:
            state = "computing"
        progress = self._peer_progress(session_id) if state == "computing" else None
        if (public.selection is not None and public.selection.mode == SelectionMode.NOISY_GREEDY
                and state == "computing" and "one_way" in done):
            detail = ("noisy-greedy selection decided"
                      if self.selection.noisy_greedy.pairs(session_id) is not None
                      else "waiting for the noisy dependency scores")
        elif public.selection is not None and state == "computing" and "one_way" in done:
            detail = (f"selection round {len(self.selection.decided(session_id))} of "
                      f"{public.selection.rounds} decided")
        if progress is not None:
            # What the compute server is doing now, as it last reported it (at most every
            # few seconds): noisy-greedy's scores done of their total, em's batch tasks.
            detail = "; ".join(filter(None, [
                detail, f"compute server: {progress.text()} ({progress.age:.0f} s ago)"]))
        return wire.SessionStatus(session_id=session_id, state=state, clients_uploaded=uploaded,
                                  clients_missing=[c for c in public.clients
                                                   if c not in uploaded and c not in absent],
                                  clients_absent=absent, upload_deadline=deadline,
                                  quorum=quorum,
                                  releases_done=done, detail=detail, preparation=preparation,
                                  progress=progress,
                                  offline=None if state == "released"
                                  else self._offline_progress(session_id))

    def _offline_progress(self, session_id: str) -> wire.WorkProgress | None:
        """The offline job's sets for this session (``SessionStatus.offline``): the joint
        releases' chunks and noisy-greedy's joint score pairs, one count of sets."""
        try:
            chunks, chunks_needed = self.coins.readiness(session_id)
            pairs, pairs_needed = self.selection.noisy_greedy.readiness(session_id)
        except ServiceError:
            # A session this server no longer plans (its rules changed) prepares nothing
            # more; its status stays readable.
            return None
        if chunks_needed + pairs_needed == 0:
            return None
        return wire.WorkProgress(phase="joint noise encrypted", done=chunks + pairs,
                                 total=chunks_needed + pairs_needed, unit="sets")

    def _preparation_status(self, session_id: str,
                            preparation: wire.Preparation) -> wire.SessionStatus:
        """The status of a session not ready yet: its clients are all still to upload."""
        with self.db.connect() as conn:
            row = conn.execute("SELECT clients_json FROM session_preparation WHERE id = ?",
                               (session_id,)).fetchone()
        if preparation.state == "failed":
            detail = f"preparation failed ({preparation.phase}): {preparation.reason}"
        else:
            detail = f"{preparation.phase} ({preparation.elapsed:.0f} s)"
        return wire.SessionStatus(session_id=session_id, state=preparation.state,
                                  clients_uploaded=[],
                                  clients_missing=json.loads(row["clients_json"]),
                                  releases_done=[], detail=detail, preparation=preparation)

    def release_document(self, session_id: str) -> wire.ReleaseDocument:
        public = self.public(session_id)
        status = self.status(session_id)
        if status.state != "released":
            raise ServiceError(409, f"session not released yet (state: {status.state})")
        published = self.releases.published(session_id)
        results = [published[r.name] for r in public.releases]
        ledger = self.ledger(session_id)
        return wire.ReleaseDocument(
            session_id=session_id, schema=public.schema_, parameter_set=public.parameter_set,
            noise=self._noise_summary(public, results),
            accounting=wire.ReleaseAccounting(
                neighbouring="add/remove one record of the union",
                rho_total=ledger.rho_total, rho_spent=ledger.rho_spent,
                epsilon_spent=ledger.epsilon_spent, delta=ledger.delta,
                delta_conversion=public.conversion_delta(), epsilon_budget=public.epsilon,
                conversion="zCDP -> (eps, delta_conversion): Canonne-Kamath-Steinke 2020, "
                           "rounded up; delta_total = delta_conversion + the selection's "
                           "reserved terms + the joint noise's conditioning mass <= delta; "
                           "a joint release's exact Renyi curve (conditioned) is below "
                           "alpha rho at the orders of the conversion, confirmed end to end",
                entries=ledger.entries,
                selection=self.selection.accounting(session_id, public),
                delta_total=(None if public.selection is None and not public.joint_delta
                             else public.delivered_delta())),
            releases=results, version=VERSION,
            contributors=[c for c in public.clients if c not in ledger.clients_absent],
            absent=ledger.clients_absent)

    @staticmethod
    def _noise_summary(public: wire.SessionPublic,
                       results: list[wire.ReleaseResult]) -> dict:
        """What noise the published counts carry, per release and in one word: ``kind`` is
        "joint" when one noise neither server knows protects both views on every release,
        "two-server" when each server added its own, "mixed" otherwise;
        ``per_count_variance`` is Var(published - true) per count by release (a split
        release: the mean over its counts) and by group of a split release."""
        published = {r.release: r for r in results}
        # A split release may fall back to two-server at run time: its result says which.
        kinds = {r.name: published[r.name].noise
                 if r.name in published and published[r.name].marginals else r.noise
                 for r in public.releases}
        kind = next(iter(set(kinds.values()))) if len(set(kinds.values())) == 1 else "mixed"
        releases = {}
        for r in public.releases:
            result = published.get(r.name)
            if result is not None and result.allocation == "privsyn":
                groups: dict[str, dict] = {}
                for key, m in result.marginals.items():
                    # Named as the plan names the group: the release, then its pair size
                    # ("two_way/one_way/<cells>": a 1-way top-up's, ``params.run_time``).
                    prefix = f"{r.name}/one_way" if len(m.attrs) == 1 else r.name
                    name = f"{prefix}/{len(m.counts)}"
                    group = groups.setdefault(name, {
                        **m.joint.model_dump(),
                        "per_count_variance": float(Fraction(m.per_count_variance)),
                        "marginals": []})
                    group["marginals"].append(key)
                releases[r.name] = {
                    "kind": "joint", "mechanism": "xor-shared uniform bits, summed",
                    "allocation": "privsyn", "groups": groups,
                    "note": "PrivSyn's c^(2/3) split of the release's rho over the kept "
                            "pairs (and the 1-ways' top-ups where the session asked for them: "
                            "a second measurement of those 1-ways), one joint shape per "
                            "marginal size (its group's budget); each count carries exactly "
                            "its group's shape given either server's bits"}
            elif kinds[r.name] == NoiseMode.JOINT:
                releases[r.name] = {
                    "kind": "joint", "mechanism": "xor-shared uniform bits, summed",
                    **public_shape(r.joint).model_dump(),
                    "note": "each server draws uniform bits; the count carries sum_j w_j "
                            "(a_j xor b_j) - span/2, exactly this shape given either "
                            "server's bits"}
            else:
                releases[r.name] = {
                    "kind": "two-server", "mechanism": "discrete_gaussian",
                    "sigma2_per_server": (r.sigma2 if result is None
                                          else result.sigma2_per_server),
                    "note": "each server adds independent N_Z(0, sigma2_per_server); each "
                            "server's view is rho-zCDP on its own"}
        # From the published results: a noisy-greedy 2-way's variance depends on how many
        # pairs were kept.
        variance = {r.release: float(Fraction(r.per_count_variance
                                              or 2 * Fraction(r.sigma2_per_server)))
                    for r in results}
        # A split release's counts differ by group: its entry is their mean over its counts,
        # and each group has its own entry ("two_way/12": the pairs of 12 cells).
        for summary in releases.values():
            for name, group in summary.get("groups", {}).items():
                variance[name] = group["per_count_variance"]
        return {"kind": kind, "per_count_variance": variance, "releases": releases}

    def peer_session(self, session_id: str) -> wire.PeerSession:
        """The session for the compute server: its artefacts named with their SHA-256 (the
        files themselves are fetched one by one, :meth:`artefact_path`)."""
        public = self.public(session_id)
        return wire.PeerSession(
            session=public, client_token_hashes=self.client_token_hashes(session_id),
            artefacts={name: self._artefact_digest(session_id, name)
                       for name in self._artefact_names(session_id)})

    def _artefact_names(self, session_id: str) -> list[str]:
        names = ["server.zip", "evaluation_keys.bin"]
        if self.sessions.plan(session_id).selection is not None:
            names += ["selection_server.zip", "selection_evaluation_keys.bin"]
        return names

    def artefact_path(self, session_id: str, name: str) -> Path:
        """The file of one of a ready session's artefacts (404 for one it does not have):
        compiled server modules and evaluation keys, never a secret key."""
        self.require_ready(session_id)
        if name not in self._artefact_names(session_id):
            raise ServiceError(404, f"session {session_id!r} has no artefact {name!r}")
        return self.session_dir(session_id) / name

    def _artefact_digest(self, session_id: str, name: str) -> str:
        # The files never change once the session is ready: hashed once (a block at a time,
        # off the GIL), then remembered.
        key = (session_id, name)
        with self._digest_lock:
            known = self._digests.get(key)
        if known is None:
            known = sha256_of_file(self.session_dir(session_id) / name)
            with self._digest_lock:
                self._digests[key] = known
        return known
