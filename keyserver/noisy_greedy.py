"""The key server's part of the noisy-greedy selection (PrivSyn's rule on FedDPSyn's P2).

Protocol (``params.selection_plan``, mode ``noisy-greedy``; ``crypto.noisy_scores``). Where
the plan gives the scores **one joint noise** (``params.noise_rules.score_shape_for``),
each pair's noise is Z = sum_j w_j (a_j xor b_j) - span/2, a this server's bits
and b the compute server's:

0. offline, before any data, this server draws a per pair from ``secrets`` (``draw_bits``,
   fail closed on a short read), encrypts it as the ``joint`` function's ``a`` argument and
   keeps only the ciphertext, one set per pair, stored once and served identically on every
   retry and after a restart (``keyserver.coins.StoredOnce``, the joint releases' store: the
   compute server never gets two independent sets for one score); each pair's bits are
   drawn in the offline worker process that encrypts them (``keyserver.offline_pool``);
1. charges the selection's rho in the ledger before decrypting (as below);
2. decrypts InDif + Z (in an offline worker process, as every use of the module's keys:
   ``keyserver.selection``) and adds **no noise of its own**; the greedy rule runs on that
   value (the centring span/2 is public and already subtracted: ``decode_joint_score``).

Each view. This server's is its a (forgotten: only ciphertexts are kept), the decrypted
InDif + Z and public data; given a, a xor b is uniform (b is uniform and unknown here), so Z
has exactly the shape's law and the view is the shape's mechanism on the ``pairs``
sensitivity-1 scores, post-processed. The compute server's view is its b, ciphertexts under
this server's key (computational DP) and the chosen pairs, a function of InDif + Z computed
here; given b, a xor b is uniform again. So both views are protected by the one noise, and
the plan matched its pairs-fold conditioned curve to the selection's rho at the
conversion's orders (``SessionPlan.check_joint`` confirms the session end to end). A
compute server that deviates (e.g. zeroes this server's bits) learns exact scores from the
chosen pairs' dependence on them: semi-honest servers are assumed, as for the releases
(``THREAT_MODEL.md``).

Where the scores stay **two-server**, the compute server sends every pair's InDif + z_CS as
encrypted digits, z_CS ~ N_Z(0, sigma2) drawn by it. This server

1. charges the selection's rho in the ledger **before** decrypting, bound to the SHA-256 of
   the ciphertexts, in the transaction that checks the budget (a retry with the same
   ciphertexts returns the recorded pairs without decrypting again; other ciphertexts are
   refused with 409: a second decryption would be a second noisy view for one charge);
2. decrypts InDif + z_CS (its view: protected by z_CS, rho = pairs / (2 sigma2) against it);
3. adds its own z_KS ~ N_Z(0, sigma2) per pair (``dp.discrete_gaussian``, CSPRNG, drawn
   at session creation: ``dp.noise_pool``), so the
   compute server, which knows z_CS, sees the outcome as a function of InDif + z_KS only;
4. runs PrivSyn's greedy rule with the 2-way release's rho, priced by the allocation the
   plan gives that release (``SessionPlan.select_pairs``: PrivSyn's c^(2/3) split, the even
   one, or the publication shared with the 1-ways where the release tops them up: the rules
   the benchmark's simulation uses), and returns **only the chosen pairs**; the doubly noised
   scores stay in this server's database (audit, retries) and are never sent.

The 2-way release is then resolved to the chosen pairs (``SessionPlan.resolve``: with the
split, one joint shape per pair size, or the even two-server release where the rule refuses);
if the rule keeps none, an empty 2-way release is recorded at once (nothing to decrypt,
nothing charged).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
from concrete import fhe

from feddpsyn.common import wire
from feddpsyn.common.serving import ServiceError, write_private
from feddpsyn.crypto.blobs import pack_blobs, unpack_blobs
from feddpsyn.crypto.joint_noise import draw_bits
from feddpsyn.crypto.noisy_scores import (NoisyScoreShape, compile_noisy_scores, decode_score,
                                          noise_tail_delta)
from feddpsyn.crypto.private_selection import indif_names
from feddpsyn.keyserver.coins import StoredOnce
from feddpsyn.keyserver.keys import ScoreModuleKeys, _keys_for, module_bootstraps
from feddpsyn.keyserver.ledger import PrivacyLedger
from feddpsyn.keyserver.offline_pool import KeyFiles, OfflinePool, TaskRefused
from feddpsyn.keyserver.store import SessionStore
from feddpsyn.params.modes import SelectionMode
from feddpsyn.params.privacy_record import charged_under
from feddpsyn.params.release_spec import SCORE_NOISE
from feddpsyn.params.session_plan import SessionPlan

NOISY_GREEDY_SQL = """
CREATE TABLE IF NOT EXISTS noisy_greedy (
    session_id TEXT PRIMARY KEY, request_digest TEXT NOT NULL, pairs_json TEXT NOT NULL,
    scores_json TEXT NOT NULL, decided_at REAL NOT NULL);
"""

# The ledger entry of the scores, the name the privacy record maps them to.
LEDGER_NAME = charged_under("selection_scores")


@dataclass(frozen=True)
class DrawAndEncryptScoreBits:
    """An offline task: one pair's bits a of its joint score noise, drawn from the CSPRNG
    in the process that encrypts them; only the ciphertext leaves the task."""

    columns: int

    def run(self, keys) -> list[bytes]:
        bits = draw_bits(1, self.columns)[0]
        ciphertext = keys.encrypt_score_bits(bits)
        del bits  # this server's share of the noise: only its ciphertext is kept
        return [ciphertext]


@dataclass(frozen=True)
class DecryptNoisyScores:
    """A task: every pair's charged noisy score decrypted, in pair order (int64 bytes)."""

    scores: tuple[bytes, ...]

    def run(self, keys) -> list[bytes]:
        try:
            decrypted = [keys.decrypt_noisy_score(keys.parse(item)) for item in self.scores]
        except Exception:
            raise TaskRefused("the noisy scores do not decrypt under this session's "
                              "selection keys") from None
        return [np.asarray(decrypted, dtype="<i8").tobytes()]


class NoisyScoreKeys(ScoreModuleKeys):
    """The key server's handle on a session's noisy-score module (P2 + chunk sums + noise)."""

    def __repr__(self) -> str:  # never print key material, even by accident
        return f"NoisyScoreKeys(score_bits={self.shape.score_bits})"

    @staticmethod
    def create(shape: NoisyScoreShape, p_error: float,
               directory: Path) -> tuple[NoisyScoreKeys, bytes, bytes]:
        module = compile_noisy_scores(shape, p_error)
        client, server_zip, evaluation_keys = _keys_for(module, directory, "selection_")
        keys = NoisyScoreKeys(client, shape)
        keys.bootstraps_per_function = module_bootstraps(
            module, indif_names(shape.chunk_sizes, shape.widths)
            + ["add", shape.noise_function])
        return keys, server_zip, evaluation_keys

    def decrypt_noisy_score(self, value: fhe.Value) -> int:
        """InDif + z_CS (two-server) or InDif + Z, centred (joint)."""
        digits = np.asarray(self._client.decrypt(
            value, function_name=self.shape.noise_function)).ravel()
        if digits.shape != (self.shape.out_bits,) or not set(digits.tolist()) <= {0, 1}:
            raise ValueError("not a noisy score of this module")
        return decode_score(digits.tolist(), self.shape)

    def encrypt_score_bits(self, bits: np.ndarray) -> bytes:
        """One pair's bits a as the ``joint`` function's encrypted ``a`` argument."""
        if self.shape.joint is None:
            raise RuntimeError("this session's scores carry no joint noise")
        encrypted = self._client.encrypt(None, np.asarray(bits, dtype=np.int64), None,
                                         function_name="joint")
        return encrypted[1].serialize()


def create_noisy_score_files(plan: SessionPlan, directory: Path) -> dict[str, int]:
    """Compile and key the session's noisy-score module, writing its files into
    ``directory``; its bootstraps per function call."""
    keys, server_zip, evaluation_keys = NoisyScoreKeys.create(
        plan.selection.noisy_shape(plan.used_chunk_sizes()), plan.selection.p_error,
        directory)
    write_private(directory / "selection_server.zip", server_zip)
    write_private(directory / "selection_evaluation_keys.bin", evaluation_keys)
    return keys.bootstraps_per_function


class NoisyGreedyRole:
    """The key server's part of a noisy-greedy selection, built from its sessions, its
    ledger, the row-bound check, and the offline pool with where its workers find the
    selection's keys (``keyserver.selection``: every use of them is a task there)."""

    def __init__(self, store: SessionStore, ledger: PrivacyLedger,
                 check_row_bound: Callable[[str, SessionPlan], object], pool: OfflinePool,
                 key_files: Callable[[str], KeyFiles]):
        self._store = store
        self._ledger = ledger
        self._check_row_bound = check_row_bound
        self._sets = StoredOnce(store.db)  # the joint releases' once-only store, per pair
        self._pool = pool
        self._key_files = key_files
        self._making = threading.Lock()

    def score_bits(self, session_id: str) -> bytes:
        """This server's encrypted bits of every pair's joint score noise, packed in pair
        order: the stored sets, made now for any pair the offline job has not reached."""
        plan = self._store.plan(session_id)
        greedy = plan.noisy_greedy
        if greedy is None or greedy.score_joint is None:
            raise ServiceError(404, "this session's scores carry no joint noise")
        missing = [pair for pair in range(greedy.pairs)  # bounded: one pass per pair
                   if self._stored_bits(session_id, pair) is None]
        if missing:
            self._make_bits(session_id, plan, missing)
        return pack_blobs([self._stored_bits(session_id, pair)
                           for pair in range(greedy.pairs)])

    def prepare_one(self, session_ids: list[str]) -> bool:
        """Encrypt missing pairs' bits of one of these sessions' joint scores, at most one
        pair per worker of the offline pool; False if none is missing (bounded: that many
        pairs a call)."""
        for session_id in session_ids:
            plan = self._store.plan(session_id)
            greedy = plan.noisy_greedy
            if greedy is None or greedy.score_joint is None:
                continue  # no joint scores: an em session, or two servers' Gaussians
            have = self._sets.held(session_id)
            missing = [pair for pair in range(greedy.pairs) if (SCORE_NOISE, pair) not in have]
            if missing:
                self._make_bits(session_id, plan, missing[:self._pool.workers])
                return True
        return False

    def readiness(self, session_id: str) -> tuple[int, int]:
        """(pairs whose joint score bits are encrypted, pairs) for one session; (0, 0)
        without joint scores."""
        greedy = self._store.plan(session_id).noisy_greedy
        if greedy is None or greedy.score_joint is None:
            return 0, 0
        have = self._sets.held(session_id)
        return sum(1 for p in range(greedy.pairs) if (SCORE_NOISE, p) in have), greedy.pairs

    def _stored_bits(self, session_id: str, pair: int) -> bytes | None:
        return self._sets.get(session_id, SCORE_NOISE, pair)

    def _make_bits(self, session_id: str, plan: SessionPlan, pairs: list[int]) -> None:
        """Draw, encrypt and store these pairs' bits that no one has stored yet, one task
        each (stored once). The lock spans the check and the store, so a request for the
        pairs an offline pass is encrypting waits for them instead of encrypting them again
        (``keyserver.coins.JointCoins`` does the same for the releases' chunks)."""
        with self._making:
            have = self._sets.held(session_id)
            missing = [pair for pair in pairs if (SCORE_NOISE, pair) not in have]
            if not missing:
                return
            task = DrawAndEncryptScoreBits(plan.selection.score_joint)
            encrypted = self._pool.map(self._key_files(session_id), [task] * len(missing),
                                       f"session {session_id}: encrypting the joint score "
                                       "noise's bits")
            for pair, ciphertexts in zip(missing, encrypted, strict=True):
                self._sets.put(session_id, SCORE_NOISE, pair, ciphertexts[0])

    def _row(self, session_id: str):
        with self._store.db.connect() as conn:
            return conn.execute("SELECT request_digest, pairs_json FROM noisy_greedy WHERE "
                                "session_id = ?", (session_id,)).fetchone()

    def pairs(self, session_id: str) -> list[tuple[int, int]] | None:
        """The chosen pairs once decided, else None."""
        row = self._row(session_id)
        return None if row is None else [tuple(p) for p in json.loads(row["pairs_json"])]

    def decide(self, session_id: str, body: bytes) -> wire.NoisyGreedyDecision:
        """Charge, decrypt InDif + z_CS and add z_KS (two-server) or decrypt InDif + Z
        (joint), choose greedily (module docstring)."""
        plan = self._store.plan(session_id)
        if plan.selection is None:
            raise ServiceError(404, "this session has no private selection")
        if plan.selection.mode != SelectionMode.NOISY_GREEDY:
            raise ServiceError(404, "this session's selection is not noisy-greedy")
        rho = plan.selection.rho_charged
        digest = hashlib.sha256(body).hexdigest()
        row = self._row(session_id)
        if row is not None:
            if not secrets.compare_digest(row["request_digest"], digest):
                raise ServiceError(409, "the selection was decided on other noisy scores; a "
                                        "second decryption would be a second noisy view")
            return wire.NoisyGreedyDecision(pairs=self.pairs(session_id), rho=str(rho))
        self._check_row_bound(session_id, plan)
        pairs = [slot.attrs for slot in plan.layout.two_way]
        try:
            scores = unpack_blobs(body, expected=len(pairs))
            for item in scores:  # parsed here too: a malformed body is refused uncharged
                NoisyScoreKeys.parse(item)
        except Exception:
            raise ServiceError(422, f"the noisy scores are {len(pairs)} ciphertexts of this "
                                    "session's selection module") from None
        with self._store.db.transaction() as conn:
            self._ledger.charge(conn, plan, session_id, LEDGER_NAME, rho, digest)
        # A refusal there is a 422 too: charged, the budget is spent on what this server
        # may have seen.
        [[blob]] = self._pool.map(self._key_files(session_id), [DecryptNoisyScores(tuple(scores))],
                                  f"session {session_id}: decrypting the noisy scores")
        decrypted = np.frombuffer(blob, dtype="<i8").astype(np.int64)
        if plan.selection.score_joint is not None:
            noisy = decrypted  # InDif + Z: the one noise protects this view too
        else:
            noisy = decrypted + self._store.pool_noise(session_id, SCORE_NOISE,
                                                       np.arange(len(pairs)))
        chosen = plan.select_pairs({p: int(v) for p, v in zip(pairs, noisy)})
        with self._store.db.transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO noisy_greedy VALUES (?, ?, ?, ?, ?)",
                         (session_id, digest, json.dumps([list(p) for p in chosen]),
                          json.dumps(noisy.tolist()), time.time()))
            if not chosen:  # nothing to release: the 2-way release is empty and free
                empty = wire.ReleaseResult(session_id=session_id, release="two_way", rho="0",
                                           sigma2_per_server="0", marginals={})
                conn.execute("INSERT OR IGNORE INTO releases VALUES (?, ?, ?, ?)",
                             (session_id, "two_way", empty.model_dump_json(), time.time()))
        # A concurrent identical request may have recorded first: answer what is recorded.
        return wire.NoisyGreedyDecision(pairs=self.pairs(session_id), rho=str(rho))

    def accounting(self, session_id: str,
                   public: wire.SessionPublic) -> wire.NoisyGreedySelectionAccounting:
        """The selection's part of the release document's accounting."""
        chosen = public.selection
        if chosen.joint is not None:
            return wire.NoisyGreedySelectionAccounting(
                **chosen.model_dump(), selected_pairs=self.pairs(session_id),
                rho_charged=chosen.rho, noise_tail_delta=0.0,
                note="PrivSyn's greedy rule on InDif + Z, Z one joint noise per score "
                     "(the sum of 'joint' uniforms from both servers' XOR-shared bits, "
                     "centred) that neither server knows; its exact pairs-fold curve is "
                     "matched to rho_charged at the conversion's orders and its conditioning "
                     "mass (joint_failure) is a delta term; only the chosen pairs are "
                     "published. delta_terms (a bootstrap failure, a union above max_rows "
                     "passing the row bound, the joint scores' mass) are reserved out of "
                     "the requested delta")
        tail = noise_tail_delta(Fraction(chosen.noise_sigma2), chosen.noise_bits,
                                len(public.pairs), public.epsilon)
        return wire.NoisyGreedySelectionAccounting(
            **chosen.model_dump(), selected_pairs=self.pairs(session_id),
            rho_charged=chosen.rho, noise_tail_delta=tail,
            note="PrivSyn's greedy rule on InDif + z_CS + z_KS, each noise N_Z(0, "
                 "noise_sigma2) (L2 sensitivity sqrt(pairs)); each server's view is "
                 "rho-zCDP by the other's noise; only the chosen pairs are published. "
                 "delta_terms (a bootstrap failure, a union above max_rows passing the row "
                 "bound, the compute server's bounded noise failing closed) are reserved "
                 "out of the requested delta")
