"""The compute server's part of the private selection (FedDPSyn Primitives 2 and 3).

Design concerns:

* **Scores never leave encryption.** P2 turns the key server's encrypted sums M into each
  pair's InDif digits with this server's clear offsets c = 2^(k-1) - S - K (S: the masks it
  expands from the clients' seeds; K: expected counts from the published 1-ways); chunk
  scores are added under encryption; P3 runs on the digits. Only one-hot outputs are sent.
* **Its share of the coins and the order, used once.** Each round draws a fresh uniform order
  and fresh R^CS bits from ``secrets``; the key server's encrypted priorities per position
  hide which candidates were tried first (``crypto.selection``: the output is the accepted
  candidate of least priority, so this server's order tells it nothing about the rejections);
  the outputs, put back in candidate order, are stored
  durably before they are sent, so a retry re-sends the same ciphertexts (which the key server
  recognises) instead of drawing the round again.
* **Bounded and resumable.** Candidates and every round's outputs are files; a restarted job
  continues at the first round without a recorded pair.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from concrete import fhe

from common import wire
from common.serving import write_private
from computeserver.noisy_greedy import NOISY_GREEDY_SQL, NoisyGreedyRole
from crypto.blobs import pack_blobs, unpack_blobs
from crypto.indif import digits_of, indif_offset
from crypto.masking import expand_masks
from crypto.private_selection import indif_name
from crypto.selection import SelectionShape, random_share, secure_order
from dp.pair_selection import expected_counts_for_pairs
from params.selection_plan import row_bound
from params.session_plan import SessionPlan, indif_chunks

log = logging.getLogger("feddpsyn.computeserver")

# Concurrent P2 chunks (see _candidate_scores); never more than the machine's cores.
P2_WORKERS = max(1, min(2, os.cpu_count() or 1))

SELECTION_SQL = """
CREATE TABLE IF NOT EXISTS selection_picks (
    session_id TEXT NOT NULL, round INTEGER NOT NULL, pair_json TEXT NOT NULL,
    PRIMARY KEY (session_id, round));
""" + NOISY_GREEDY_SQL


def selection_shape(public: wire.SessionPublic) -> SelectionShape:
    chosen = public.selection
    return SelectionShape(candidates=len(public.pairs), score_bits=chosen.score_bits,
                          drop_bits=0, nb=chosen.nb, kappa_prime=tuple(chosen.kappa_prime))


class SelectionRole(NoisyGreedyRole):
    """Mixed into :class:`computeserver.service.ComputeServer`."""

    def _store_selection_artefacts(self, peer: wire.PeerSession, directory) -> None:
        if peer.selection_server_zip_b64 is None:
            return
        write_private(directory / "selection_server.zip",
                      base64.b64decode(peer.selection_server_zip_b64))
        write_private(directory / "selection_evaluation_keys.bin",
                      base64.b64decode(peer.selection_evaluation_keys_b64))

    def _selection_server(self, session_id: str) -> tuple[fhe.Server, fhe.EvaluationKeys]:
        cache_key = f"selection:{session_id}"
        with self._lock:
            if cache_key in self._servers:
                return self._servers[cache_key]
        directory = self.session_dir(session_id)
        server = fhe.Server.load(directory / "selection_server.zip")
        keys = fhe.EvaluationKeys.deserialize(
            (directory / "selection_evaluation_keys.bin").read_bytes())
        with self._lock:
            self._servers[cache_key] = (server, keys)
        return server, keys

    def selection_picks(self, session_id: str) -> list[tuple[int, int]]:
        with self.db.connect() as conn:
            rows = conn.execute("SELECT round, pair_json FROM selection_picks WHERE "
                                "session_id = ? ORDER BY round", (session_id,)).fetchall()
        return [tuple(json.loads(r["pair_json"])) for r in rows]

    def _one_way_release(self, session_id: str, plan: SessionPlan) -> list[np.ndarray]:
        with self.db.connect() as conn:
            row = conn.execute("SELECT result_json FROM releases WHERE session_id = ? AND "
                               "release = 'one_way'", (session_id,)).fetchone()
        result = wire.ReleaseResult.model_validate_json(row["result_json"])
        return [np.asarray(result.marginals[slot.key].counts, dtype=float)
                for slot in plan.layout.one_way]

    def _check_row_bound(self, session_id: str, plan: SessionPlan) -> None:
        """Refuse the selection when the union may exceed max_rows (a score could wrap):
        checked on the published 1-ways (``params.selection_plan.row_bound``); the session
        is blocked with the reason, and nothing is sent to the key server."""
        public = self.public(session_id)
        check = row_bound(self._one_way_release(session_id, plan),
                          plan.release("one_way").sigma2, 2, public.selection.max_rows,
                          public.selection.row_bound_delta)
        if not check.holds:
            with self.db.transaction() as conn:
                conn.execute("UPDATE sessions SET blocked = ? WHERE id = ?",
                             (f"selection refused: {check.message()}", session_id))
            raise RuntimeError(check.message())

    def _candidate_scores(self, session_id: str, plan: SessionPlan,
                          seeds: dict[str, bytes]) -> list[fhe.Value]:
        """Every pair's encrypted InDif digits (P2 per chunk, then chunk sums)."""
        path = self.session_dir(session_id) / "outputs" / "selection_candidates.bin"
        if path.exists():
            return [fhe.Value.deserialize(b) for b in unpack_blobs(path.read_bytes())]
        self._check_row_bound(session_id, plan)
        public = self.public(session_id)
        chosen = public.selection
        k, k2 = plan.parameters.count_bits, chosen.indif_bits
        total = plan.layout.total_cells
        mask_sum = np.zeros(total, dtype=np.int64)
        for client_id in public.clients:
            mask_sum += expand_masks(seeds[client_id], session_id, client_id, total, k)
        pairs = [slot.attrs for slot in plan.layout.two_way]
        expected = expected_counts_for_pairs(self._one_way_release(session_id, plan), pairs,
                                             chosen.max_rows)
        chunks = indif_chunks(plan.layout, tuple(chosen.parameter_set["chunk_sizes"]))
        response = self._http.get(f"/peer/sessions/{session_id}/selection/inputs")
        if response.status_code != 200:
            raise RuntimeError(f"key server refused the selection inputs: "
                               f"{response.status_code} {response.text[:300]}")
        inputs = unpack_blobs(response.content, expected=len(chunks))
        server, keys = self._selection_server(session_id)
        by_pair: dict[int, list] = {}
        for (index, cells, size), blob in zip(chunks, inputs):
            by_pair.setdefault(index, []).append((cells, size, blob))
        scores: list = [None] * len(pairs)
        done, lock = [0], threading.Lock()

        def score_pair(index: int) -> None:
            slot = plan.layout.two_way[index]
            total = None
            for cells, size, blob in by_pair[index]:
                offset = np.full(size, 1 << (k2 - 1), dtype=np.int64)  # padding: |C - K| = 0
                offset[:len(cells)] = indif_offset(
                    mask_sum[cells], expected[slot.attrs][cells - slot.offset], k2)
                score = server.run(fhe.Value.deserialize(blob), digits_of(offset, k2),
                                   evaluation_keys=keys, function_name=indif_name(size))
                total = score if total is None else server.run(
                    total, score, evaluation_keys=keys, function_name="add")
                with lock:
                    done[0] += 1
                    self._progress[session_id] = (f"dependency scores under encryption: "
                                                  f"chunk {done[0]} of {len(chunks)}")
            scores[index] = total

        # Pairs in P2_WORKERS threads: concrete parallelises a chunk's per-cell lookups, but
        # its digit conversion is sequential and leaves the other core idle (measured: the
        # second thread does 60% of the first's work), so two chunks at a time fill it.
        with ThreadPoolExecutor(max_workers=P2_WORKERS) as pool:
            for future in [pool.submit(score_pair, index) for index in sorted(by_pair)]:
                future.result()  # re-raises a failed chunk's error
        write_private(path, pack_blobs([s.serialize() for s in scores]))
        log.info("session %s: dependency scores of %d pairs computed under encryption",
                 session_id, len(pairs))
        return scores

    def _run_selection(self, session_id: str, plan: SessionPlan,
                       seeds: dict[str, bytes]) -> list[tuple[int, int]]:
        """Every selection round not yet recorded (module docstring)."""
        public = self.public(session_id)
        if public.selection.mode == "noisy-greedy":
            return self._run_noisy_greedy(session_id, plan, seeds)
        picks = self.selection_picks(session_id)
        if len(picks) >= public.selection.rounds:
            return picks[:public.selection.rounds]
        shape = selection_shape(public)
        candidates = self._candidate_scores(session_id, plan, seeds)
        pairs = [slot.attrs for slot in plan.layout.two_way]
        server, keys = self._selection_server(session_id)
        base = f"/peer/sessions/{session_id}/selection/rounds"
        for round_ in range(len(picks), public.selection.rounds):
            path = self.session_dir(session_id) / "outputs" / f"select-{round_}.bin"
            self._progress[session_id] = (f"encrypted selection: round {round_} of "
                                          f"{public.selection.rounds}")
            if not path.exists():
                response = self._http.post(f"{base}/{round_}/randomness")
                if response.status_code != 200:
                    raise RuntimeError(f"key server refused round {round_}'s randomness: "
                                       f"{response.status_code} {response.text[:300]}")
                r_ks, priority = (fhe.Value.deserialize(b)
                                  for b in unpack_blobs(response.content, expected=2))
                order = secure_order(len(pairs))
                active = np.array([0 if pairs[i] in picks else 1 for i in order])
                r_cs = random_share(shape)
                outputs = server.run(*[candidates[i] for i in order], active, r_ks, priority,
                                     2 * r_cs, r_cs, evaluation_keys=keys,
                                     function_name="select")
                back: list = [None] * len(pairs)
                for position, candidate in enumerate(order):
                    back[candidate] = outputs[position]
                write_private(path, pack_blobs([v.serialize() for v in back]))
            decided = self._peer("PUT", f"{base}/{round_}", wire.SelectionRound,
                                 content=path.read_bytes(),
                                 headers={"Content-Type": "application/octet-stream"})
            with self.db.transaction() as conn:
                conn.execute("INSERT OR IGNORE INTO selection_picks VALUES (?, ?, ?)",
                             (session_id, round_, json.dumps(list(decided.pair))))
            picks.append(tuple(decided.pair))
            log.info("session %s: selection round %d chose %s", session_id, round_,
                     decided.pair)
        self._progress.pop(session_id, None)
        return picks
