"""The compute server's part of the private selection (FedDPSyn Primitives 2 and 3).

Design concerns:

* **Scores never leave encryption.** P2 turns the key server's encrypted sums M into each
  pair's InDif digits with this server's clear offsets c = 2^(w-1) - S - K (S: the masks it
  expands from the clients' seeds; K: expected counts from the published 1-ways; w: the
  chunk's width from the same 1-ways, ``params.indif_widths``); chunk scores are added
  under encryption; P3 runs on the digits. Only one-hot outputs are sent.
* **Its share of the coins and the order, used once.** Each round draws a fresh uniform order
  and fresh R^CS bits from ``secrets``; the key server's encrypted priorities per position hide
  which candidates were tried first (``crypto.tfhe_permute_and_flip``: the output is the
  accepted candidate of least priority, so this server's order tells it nothing about the
  rejections); the outputs, put back in candidate order, are stored
  durably before they are sent, so a retry re-sends the same ciphertexts (which the key server
  recognises) instead of drawing the round again.
* **Bounded and resumable.** Candidates and every round's outputs are files; a restarted job
  continues at the first round without a recorded pair.
* **Anywhere the executor runs it.** P2 is one task per chunk plus a tree of encrypted adds
  per pair; a round's P3 is one ``select`` task, or, when the plan cuts the candidates into
  batches, one task per batch for each batch stage and one for each combine
  (:func:`batched_select`); all on the executor the server was started with
  (``computeserver.executor``). Tasks are pure,
  so where they ran changes no decryption, and the files above are written only once every
  task of the step has answered.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import replace

import numpy as np

from feddpsyn.common import wire
from feddpsyn.common.serving import write_private
from feddpsyn.computeserver.executor import CallTask, Circuit, Executor, map_summed
from feddpsyn.computeserver.noisy_greedy import NOISY_GREEDY_SQL, NoisyGreedyRole
from feddpsyn.computeserver.store import SessionStore
from feddpsyn.crypto.blobs import pack_blobs, unpack_blobs
from feddpsyn.crypto.indif import digits_of, indif_offset
from feddpsyn.crypto.masking import mask_sum as masks_summed
from feddpsyn.crypto.private_selection import batch_names, indif_name
from feddpsyn.crypto.selection_batches import BatchLayout
from feddpsyn.crypto.selection_randomness import random_share, secure_order
from feddpsyn.dp.pair_selection import expected_counts_for_pairs
from feddpsyn.params.modes import SelectionMode
from feddpsyn.params.session_plan import SessionPlan

__all__ = ["SelectionRole", "SELECTION_SQL", "batched_select"]

log = logging.getLogger("feddpsyn.computeserver")

SELECTION_SQL = """
CREATE TABLE IF NOT EXISTS selection_picks (
    session_id TEXT NOT NULL, round INTEGER NOT NULL, pair_json TEXT NOT NULL,
    PRIMARY KEY (session_id, round));
""" + NOISY_GREEDY_SQL


def batched_select(executor: Executor, circuit: Circuit, layout: BatchLayout,
                   candidates: list[bytes], active: np.ndarray, shares: list[bytes],
                   r_cs: np.ndarray, progress=None) -> list[bytes]:
    """One P3 round by candidate batches (``crypto.selection_batches``): the
    outputs of the real positions, in position order.

    ``candidates``: the S encrypted scores in this server's order (position i holds
    ``candidates[i]``); ``active``: per position, padding included (0 there); ``shares``: the
    key server's encrypted (R^KS, priorities) per batch, interleaved; ``r_cs``: this server's
    bits, (1, positions, sum kappa'). Five steps, each one ``map``: the batch maxima (one task
    a batch), their maximum (one task), each batch's acceptances and least accepted priority
    (one task a batch), the batch holding the least (one task), each batch's one-hot kept
    where it was chosen (one task a batch). The padding positions take any candidate's
    ciphertext: they are inactive, so it never counts."""
    names = batch_names(layout)
    n, count = layout.size, layout.count
    if len(candidates) != layout.candidates or len(shares) != 2 * count:
        raise ValueError("a batched round takes every candidate and two shares per batch")
    padded = list(candidates) + [candidates[0]] * (layout.positions - layout.candidates)
    active = np.asarray(active, dtype=np.int64)
    total, done = 3 * count + 2, 0

    def step(tasks: list[CallTask]) -> list:
        nonlocal done
        base = done
        report = None if progress is None else (lambda d, _: progress(base + d, total))
        out = executor.map(circuit, tasks, report)
        done += len(tasks)
        return out

    batches = [layout.batch(b) for b in range(count)]
    maxima = step([CallTask(names["maximum"], (*padded[part], active[part]))
                   for part in batches])
    top = step([CallTask(names["combine_maximum"], (*[m[0] for m in maxima],
                                                    np.ones(count, dtype=np.int64)))])[0][0]
    picks = step([CallTask(names["pick"], (*padded[part], top, active[part], shares[2 * b],
                                           shares[2 * b + 1], 2 * r_cs[:, part],
                                           r_cs[:, part]))
                  for b, part in enumerate(batches)])
    chosen = step([CallTask(names["least"], tuple(pick[1] for pick in picks))])[0]
    masked = step([CallTask(names["mask"], (pick[0], chosen[b]))
                   for b, pick in enumerate(picks)])
    return [out for outputs in masked for out in outputs][:layout.candidates]


class SelectionRole:
    """The compute server's part of a session's selection, built from its sessions and the
    executor its encrypted work runs on; noisy-greedy's part is :attr:`noisy_greedy`."""

    def __init__(self, store: SessionStore, executor: Executor):
        self._store = store
        self.executor = executor
        self._circuits: dict[str, Circuit] = {}
        self._lock = threading.Lock()
        self.noisy_greedy = NoisyGreedyRole(store, executor, self.circuit,
                                            self.candidate_scores)

    def circuit(self, session_id: str) -> Circuit:
        """The selection module's files, named by their digest (what workers load)."""
        with self._lock:
            if session_id not in self._circuits:
                directory = self._store.session_dir(session_id)
                self._circuits[session_id] = Circuit.of_files(
                    session_id, directory / "selection_server.zip",
                    directory / "selection_evaluation_keys.bin")
            return self._circuits[session_id]

    def picks(self, session_id: str) -> list[tuple[int, int]]:
        with self._store.db.connect() as conn:
            rows = conn.execute("SELECT round, pair_json FROM selection_picks WHERE "
                                "session_id = ? ORDER BY round", (session_id,)).fetchall()
        return [tuple(json.loads(r["pair_json"])) for r in rows]

    def _one_way_release(self, session_id: str, plan: SessionPlan) -> list[np.ndarray]:
        with self._store.db.connect() as conn:
            row = conn.execute("SELECT result_json FROM releases WHERE session_id = ? AND "
                               "release = 'one_way'", (session_id,)).fetchone()
        result = wire.ReleaseResult.model_validate_json(row["result_json"])
        return [np.asarray(result.marginals[slot.key].counts, dtype=float)
                for slot in plan.layout.one_way]

    def _check_row_bound(self, session_id: str, plan: SessionPlan) -> list[np.ndarray]:
        """Refuse the selection when the union may exceed max_rows (a score could wrap):
        checked on the published 1-ways (``SessionPlan.check_row_bound``); the session is
        blocked with the reason, and nothing is sent to the key server. The 1-ways."""
        one_way = self._one_way_release(session_id, plan)
        check = plan.check_row_bound(one_way)
        if not check.holds:
            self._store.block(session_id, f"selection refused: {check.message()}")
            raise RuntimeError(check.message())
        return one_way

    def candidate_scores(self, session_id: str, plan: SessionPlan,
                         seeds: dict[str, bytes]) -> list[bytes]:
        """Every pair's encrypted InDif digits, serialized: one executor task per chunk, then
        each pair's chunk scores summed by a tree of encrypted adds
        (``computeserver.executor.map_summed``)."""
        path = self._store.session_dir(session_id) / "outputs" / "selection_candidates.bin"
        if path.exists():
            return unpack_blobs(path.read_bytes())
        one_way = self._check_row_bound(session_id, plan)
        public = self._store.public(session_id)
        k, k2 = plan.parameters.count_bits, plan.selection.indif_bits
        total = plan.layout.total_cells
        mask_sum = masks_summed(seeds, session_id, public.clients, total, k)
        pairs = [slot.attrs for slot in plan.layout.two_way]
        expected = expected_counts_for_pairs(one_way, pairs, plan.selection.max_rows)
        chunks = plan.indif_chunks_by_width(one_way)
        response = self._store.peer_request("GET",
                                            f"/peer/sessions/{session_id}/selection/inputs")
        if response.status_code != 200:
            raise RuntimeError(f"key server refused the selection inputs: "
                               f"{response.status_code} {wire.error_detail(response, 300)}")
        inputs = unpack_blobs(response.content, expected=len(chunks))
        by_pair: dict[int, list] = {}
        for (index, cells, size, width), blob in zip(chunks, inputs):
            slot = plan.layout.two_way[index]
            offset = np.full(size, 1 << (width - 1), dtype=np.int64)  # padding: |C - K| = 0
            offset[:len(cells)] = indif_offset(
                mask_sum[cells], expected[slot.attrs][cells - slot.offset], width)
            name = indif_name(size, None if width == k2 else width)
            by_pair.setdefault(index, []).append(
                CallTask(name, (blob, digits_of(offset, width))))
        description = self.executor.description
        phase = f"{plan.selection.mode} scores: InDif of {len(pairs)} pairs under encryption"

        def progress(done: int, total_tasks: int) -> None:
            self._store.report_progress(session_id, phase, done, total_tasks, "tasks",
                                        description)

        scores = map_summed(self.executor, self.circuit(session_id),
                            [by_pair[index] for index in range(len(pairs))], "add", progress)
        write_private(path, pack_blobs(scores))
        log.info("session %s: dependency scores of %d pairs computed under encryption (%s)",
                 session_id, len(pairs), description)
        return scores

    def _round(self, session_id: str, plan: SessionPlan, round_: int, ordered: list[bytes],
               active: np.ndarray, shares: bytes) -> list[bytes]:
        """One round's P3 on the candidates in this server's order: the outputs by position.
        One ``select`` task, or by candidate batches (the plan's layout) with this server's
        bits drawn for every position, padding included, and progress in batch tasks."""
        shape, layout = plan.selection.shape, plan.selection.batches
        circuit = self.circuit(session_id)
        if layout is None:
            r_ks, priority = unpack_blobs(shares, expected=2)
            r_cs = random_share(shape)
            task = CallTask("select", (*ordered, active, r_ks, priority, 2 * r_cs, r_cs))
            return list(self.executor.map(circuit, [task])[0])
        rounds, description = plan.selection.rounds, self.executor.description

        def progress(done: int, total: int) -> None:
            self._store.report_progress(session_id, f"encrypted selection: round {round_} of "
                                                    f"{rounds}", done, total, "batch tasks",
                                        description)

        padded = np.zeros(layout.positions, dtype=np.int64)
        padded[:len(active)] = active
        return batched_select(self.executor, circuit, layout, ordered, padded,
                              unpack_blobs(shares, expected=2 * layout.count),
                              random_share(replace(shape, candidates=layout.positions)),
                              progress)

    def run(self, session_id: str, plan: SessionPlan,
            seeds: dict[str, bytes]) -> list[tuple[int, int]]:
        """Every selection round not yet recorded (module docstring)."""
        if plan.selection.mode == SelectionMode.NOISY_GREEDY:
            return self.noisy_greedy.run(session_id, plan, seeds)
        rounds = plan.selection.rounds
        picks = self.picks(session_id)
        if len(picks) >= rounds:
            return picks[:rounds]
        candidates = self.candidate_scores(session_id, plan, seeds)
        pairs = [slot.attrs for slot in plan.layout.two_way]
        base = f"/peer/sessions/{session_id}/selection/rounds"
        for round_ in range(len(picks), rounds):
            path = self._store.session_dir(session_id) / "outputs" / f"select-{round_}.bin"
            self._store.report_progress(session_id, "encrypted selection", round_, rounds,
                                        "rounds")
            if not path.exists():
                response = self._store.peer_request("POST", f"{base}/{round_}/randomness")
                if response.status_code != 200:
                    raise RuntimeError(f"key server refused round {round_}'s randomness: "
                                       f"{response.status_code} "
                                       f"{wire.error_detail(response, 300)}")
                order = secure_order(len(pairs))
                active = np.array([0 if pairs[i] in picks else 1 for i in order])
                outputs = self._round(session_id, plan, round_, [candidates[i] for i in order],
                                      active, response.content)
                back: list = [None] * len(pairs)
                for position, candidate in enumerate(order):
                    back[candidate] = outputs[position]
                write_private(path, pack_blobs(back))
            decided = self._store.peer("PUT", f"{base}/{round_}", wire.SelectionRound,
                                       content=path.read_bytes(),
                                       headers={"Content-Type": "application/octet-stream"})
            with self._store.db.transaction() as conn:
                conn.execute("INSERT OR IGNORE INTO selection_picks VALUES (?, ?, ?)",
                             (session_id, round_, json.dumps(list(decided.pair))))
            picks.append(tuple(decided.pair))
            log.info("session %s: selection round %d chose %s", session_id, round_,
                     decided.pair)
        self._store.set_progress(session_id, None)
        return picks
