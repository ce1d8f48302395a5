"""The compute server's part of the noisy-greedy selection (PrivSyn's rule on FedDPSyn's P2).

Design concerns:

* **Joint scores** (where the plan gives them one joint noise;
  ``params.noise_rules.score_shape_for``): this server fetches the key server's encrypted
  bits a (one set per pair, the same bytes on every request), draws its own bits b per pair
  from ``secrets`` (``crypto.joint_noise.draw_bits``, fail closed), and runs
  ``crypto.noisy_scores``'s ``joint``: Enc(InDif + sum_j w_j (a_j xor b_j)), the noise
  uniform-shaped given b (its view: b, ciphertexts, the chosen pairs, a function of
  InDif + Z). b is used once and never stored; it adds no Gaussian of its own.
* **Its noise before anything leaves** (two-server scores). Every pair's encrypted InDif
  (P2 and chunk sums, shared with ``em``: ``computeserver.selection``) gets
  z_CS ~ N_Z(0, sigma2) from ``dp.discrete_gaussian`` (CSPRNG, drawn when the session is
  learned: ``dp.noise_pool``) under encryption (``crypto.noisy_scores``'s ``noise``),
  so the key server, which decrypts, sees InDif + z_CS only. A draw outside the circuit's
  offset fails closed (the session is blocked, nothing is sent; probability below
  2 exp(-800) a draw, counted in the session's delta).
* **Noise used once.** The noisy ciphertexts are stored durably before they are sent, so a
  retry re-sends the same bytes (which the key server recognises by digest) instead of
  drawing new noise; the draws themselves are never stored.
* **Only the chosen pairs come back** (``keyserver.noisy_greedy``); they are recorded, and a
  restarted job continues from them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import numpy as np

from feddpsyn.common import wire
from feddpsyn.common.serving import write_private
from feddpsyn.computeserver.executor import CallTask, Circuit, Executor
from feddpsyn.computeserver.store import SessionStore
from feddpsyn.crypto.blobs import pack_blobs, unpack_blobs
from feddpsyn.crypto.joint_noise import draw_bits
from feddpsyn.crypto.noisy_scores import NoiseOutOfRange, NoisyScoreShape, noise_operand
from feddpsyn.params.release_spec import SCORE_NOISE
from feddpsyn.params.session_plan import SessionPlan

__all__ = ["NoisyGreedyRole", "NOISY_GREEDY_SQL"]

log = logging.getLogger("feddpsyn.computeserver")

NOISY_GREEDY_SQL = """
CREATE TABLE IF NOT EXISTS noisy_greedy_picks (
    session_id TEXT PRIMARY KEY, pairs_json TEXT NOT NULL);
"""

CandidateScores = Callable[[str, SessionPlan, dict[str, bytes]], list[bytes]]


class NoisyGreedyRole:
    """The compute server's part of a noisy-greedy selection; the encrypted scores come
    from ``candidate_scores`` (P2, shared with ``em``: ``computeserver.selection``)."""

    def __init__(self, store: SessionStore, executor: Executor,
                 circuit: Callable[[str], Circuit], candidate_scores: CandidateScores):
        self._store = store
        self._executor = executor
        self._circuit = circuit
        self._candidate_scores = candidate_scores

    def picks(self, session_id: str) -> list[tuple[int, int]] | None:
        with self._store.db.connect() as conn:
            row = conn.execute("SELECT pairs_json FROM noisy_greedy_picks WHERE "
                               "session_id = ?", (session_id,)).fetchone()
        return None if row is None else [tuple(p) for p in json.loads(row["pairs_json"])]

    def _noise_tasks(self, session_id: str, shape: NoisyScoreShape,
                     scores: list[bytes]) -> list[CallTask]:
        """Two-server scores: z_CS from the pool under encryption (fails closed)."""
        noise = self._store.pool_noise(session_id, SCORE_NOISE, np.arange(len(scores)))
        try:
            operands = [noise_operand(int(z), shape) for z in noise]
        except NoiseOutOfRange as exc:
            self._store.block(session_id, f"noisy-greedy: {exc}")
            raise
        return [CallTask("noise", (score, operand)) for score, operand in zip(scores, operands)]

    def _joint_tasks(self, session_id: str, shape: NoisyScoreShape,
                     scores: list[bytes]) -> list[CallTask]:
        """Joint scores: the key server's encrypted bits and this server's fresh bits."""
        response = self._store.peer_request(
            "GET", f"/peer/sessions/{session_id}/selection/score-bits")
        if response.status_code != 200:
            raise RuntimeError(f"key server answered the score bits: {response.status_code} "
                               f"{wire.error_detail(response, 300)}")
        ks_bits = unpack_blobs(response.content, expected=len(scores))
        cs_bits = draw_bits(len(scores), shape.joint)
        return [CallTask("joint", (score, a, b))
                for score, a, b in zip(scores, ks_bits, cs_bits)]

    def run(self, session_id: str, plan: SessionPlan,
            seeds: dict[str, bytes]) -> list[tuple[int, int]]:
        """Noise every encrypted score, send them, record the chosen pairs (module docstring)."""
        picks = self.picks(session_id)
        if picks is not None:
            return picks
        path = self._store.session_dir(session_id) / "outputs" / "noisy_scores.bin"
        if not path.exists():
            shape = plan.selection.noisy_shape(plan.used_chunk_sizes())
            scores = self._candidate_scores(session_id, plan, seeds)
            if shape.joint is not None:
                tasks = self._joint_tasks(session_id, shape, scores)
            else:
                tasks = self._noise_tasks(session_id, shape, scores)
            phase = "noisy-greedy scores: noise under encryption"
            description = self._executor.description

            def progress(done: int, total: int) -> None:
                self._store.report_progress(session_id, phase, done, total, "scores",
                                            description)

            progress(0, len(tasks))
            noisy = self._executor.map(self._circuit(session_id), tasks, progress)
            del tasks  # b (joint) or the operands: used once, never stored
            write_private(path, pack_blobs([outputs[0] for outputs in noisy]))
        self._store.set_progress(session_id, "waiting for the key server's greedy selection")
        decided = self._store.peer("PUT", f"/peer/sessions/{session_id}/selection/noisy-scores",
                                   wire.NoisyGreedyDecision, content=path.read_bytes(),
                                   headers={"Content-Type": "application/octet-stream"})
        picks = [tuple(p) for p in decided.pairs]
        with self._store.db.transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO noisy_greedy_picks VALUES (?, ?)",
                         (session_id, json.dumps([list(p) for p in picks])))
        self._store.set_progress(session_id, None)
        log.info("session %s: noisy-greedy selection chose %s", session_id, picks)
        return picks
