"""The key server's part of the private selection (FedDPSyn Primitives 2 and 3).

Design concerns:

* **Only one-hot selections are decrypted, each charged first.** The only values of the
  selection module this server ever decrypts are a round's S outputs, after the round's rho
  is charged (bound to the outputs' digest, in the transaction that checks the budget); it
  accepts them only if exactly one output is 1, at a candidate not chosen before. A retry
  with the same outputs returns the recorded pair; different outputs for a decided round are
  refused (a second decryption would be a second sample).
* **Its share of the coins and of the order.** Each round's R^KS bits and its positions'
  priorities (a uniform permutation) come from ``secrets`` in the offline worker process
  that encrypts them, and only their ciphertexts are stored (a retry gets the same ones);
  this server never sees the compute server's order or its share, nor any score. The
  chosen candidate is the accepted one of least priority, so neither server alone knows the
  order in which candidates were tried (``crypto.tfhe_permute_and_flip``). With
  candidate batches (``params.selection_plan.candidate_batches``) the same shares are cut into
  the batches' positions, the padding's drawn like the rest (priority 0: padding is inactive,
  never compared), and the S outputs it decrypts are the batched round's last function's, one
  encoding as the one call's.
* **Inputs are fresh encryptions of sums it already holds.** P2's inputs are
  M = (sum of the clients' masked vectors) mod 2^w per 2-way cell (w: the chunk's width,
  ``params.indif_widths``): uniformly distributed given the masks, which the compute server
  holds and this server never sees. Their chunks
  are spread over the offline pool's workers (``keyserver.offline_pool``), in contiguous
  groups, and stored together in chunk order.
* **No key in the server's process.** Every use of the module's keys (the shares' and P2's
  encryption, a round's decryption) is a task of the offline pool: the keys are gigabytes at
  Adult's widths, and loading or using them in the server's process would hold its
  interpreter for seconds while requests wait.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from feddpsyn.common import wire
from feddpsyn.common.serving import ServiceError, write_private
from feddpsyn.crypto.blobs import pack_blobs, unpack_blobs
from feddpsyn.crypto.private_selection import PrivateSelectionShape
from feddpsyn.crypto.selection_batches import BatchLayout
from feddpsyn.crypto.selection_randomness import batch_randomness, random_priorities, random_share
from feddpsyn.crypto.tfhe_permute_and_flip import SelectionShape, thresholds
from feddpsyn.keyserver.keys import SelectionKeys
from feddpsyn.keyserver.ledger import PrivacyLedger
from feddpsyn.keyserver.noisy_greedy import (
    NOISY_GREEDY_SQL,
    NoisyGreedyRole,
    NoisyScoreKeys,
    create_noisy_score_files,
)
from feddpsyn.keyserver.offline_pool import KeyFiles, OfflinePool, TaskRefused, split_evenly
from feddpsyn.keyserver.store import SessionStore
from feddpsyn.params.modes import SelectionMode
from feddpsyn.params.session_plan import SessionPlan

SELECTION_SQL = """
CREATE TABLE IF NOT EXISTS selection_randomness (
    session_id TEXT NOT NULL, round INTEGER NOT NULL, value BLOB NOT NULL,
    PRIMARY KEY (session_id, round));
CREATE TABLE IF NOT EXISTS selection_rounds (
    session_id TEXT NOT NULL, round INTEGER NOT NULL, request_digest TEXT NOT NULL,
    pair_json TEXT NOT NULL, PRIMARY KEY (session_id, round));
""" + NOISY_GREEDY_SQL


def module_shape(plan: SessionPlan) -> PrivateSelectionShape:
    """The em module's shape: P2 at the chunk sizes the session uses, P3 as the plan runs it
    (one ``select`` a round, or the batched round's functions alone)."""
    batches = plan.selection.batches
    return PrivateSelectionShape(count_bits=plan.selection.indif_bits,
                                 chunk_sizes=plan.used_chunk_sizes(),
                                 selection=plan.selection.shape, batches=batches,
                                 single=batches is None, widths=plan.selection.indif_widths)


def compiled_bootstraps(plan: SessionPlan, per_function: dict[str, int]) -> int:
    """The session's bootstraps from the compiled module; refuses a module that compiled to
    more than the plan reserved delta for (its structural bound)."""
    compiled = plan.selection.compiled_bootstraps(plan.pair_cells(), per_function)
    planned = plan.selection.bootstraps(plan.pair_cells())
    if compiled > planned:
        raise ServiceError(500, f"the selection module compiled to {compiled} bootstraps, more "
                                f"than the {planned} its delta reserve was planned for")
    return compiled


def create_selection_files(plan: SessionPlan, directory: Path) -> dict[str, int] | None:
    """Compile and key the session's selection module, writing its files into
    ``directory``; its bootstraps per function call (None: no selection). The heavy part
    of a session's preparation with a selection (``keyserver.preparation``)."""
    if plan.selection is None:
        return None
    if plan.selection.mode == SelectionMode.NOISY_GREEDY:
        return create_noisy_score_files(plan, directory)
    keys, server_zip, evaluation_keys = SelectionKeys.create(
        module_shape(plan), thresholds(plan.selection.shape, plan.selection.step.epsilon),
        plan.selection.p_error, directory)
    write_private(directory / "selection_server.zip", server_zip)
    write_private(directory / "selection_evaluation_keys.bin", evaluation_keys)
    return keys.bootstraps_per_function


@dataclass(frozen=True)
class EncryptIndifInputs:
    """An offline task: consecutive P2 chunks' M (residues mod 2^w, padded to their chunk
    sizes) with their widths w, each encrypted as its function's digits (``indif_<s>`` or
    ``indif_<s>_w<w>``: ``params.indif_widths``)."""

    chunks: tuple[tuple[np.ndarray, int], ...]

    def run(self, keys) -> list[bytes]:
        return [keys.encrypt_indif_input(chunk, width) for chunk, width in self.chunks]


@dataclass(frozen=True)
class DrawAndEncryptRoundShares:
    """A task: one em round's R^KS bits and priorities, drawn from the CSPRNG in the process
    that encrypts them (``crypto.selection_randomness``); only their ciphertexts leave it,
    as ``SelectionKeys.encrypt_randomness`` orders them."""

    shape: SelectionShape
    batches: BatchLayout | None

    def run(self, keys) -> list[bytes]:
        if self.batches is None:
            r_ks, priority = random_share(self.shape), random_priorities(self.shape)
        else:
            r_ks, priority = batch_randomness(self.shape, self.batches)
        return keys.encrypt_randomness(r_ks, priority)


@dataclass(frozen=True)
class DecryptOneHot:
    """A task: a charged round's S outputs decrypted, in candidate order (int64 bytes)."""

    outputs: tuple[bytes, ...]

    def run(self, keys) -> list[bytes]:
        try:
            one_hot = keys.decrypt_one_hot([keys.parse(item) for item in self.outputs])
        except Exception:
            raise TaskRefused("the outputs do not decrypt under this session's selection "
                              "keys") from None
        return [np.asarray(one_hot, dtype="<i8").tobytes()]


class SelectionRole:
    """The key server's part of a session's selection, built from its sessions and its
    ledger; noisy-greedy's part is :attr:`noisy_greedy`. ``pool`` runs every use of the
    module's keys, in its worker processes (module docstring)."""

    def __init__(self, store: SessionStore, ledger: PrivacyLedger, pool: OfflinePool):
        self._store = store
        self._ledger = ledger
        self._pool = pool
        self.noisy_greedy = NoisyGreedyRole(store, ledger, self.check_row_bound, self._pool,
                                            self.selection_key_files)

    def selection_key_files(self, session_id: str) -> KeyFiles:
        """Where an offline worker loads the selection module's keys itself, from the
        session's 0600 files."""
        plan = self.selection_plan(session_id)
        directory = str(self._store.session_dir(session_id))
        if plan.selection.mode == SelectionMode.NOISY_GREEDY:
            return KeyFiles(NoisyScoreKeys.load, directory,
                            (plan.selection.noisy_shape(plan.used_chunk_sizes()),))
        return KeyFiles(SelectionKeys.load, directory, (module_shape(plan),))

    def selection_plan(self, session_id: str) -> SessionPlan:
        plan = self._store.plan(session_id)
        if plan.selection is None:
            raise ServiceError(404, "this session has no private selection")
        return plan

    def accounting(self, session_id: str,
                   public: wire.SessionPublic) -> wire.SelectionAccounting:
        """The selection's part of the release document's accounting."""
        chosen = public.selection
        if chosen is None:
            return wire.NoSelectionAccounting(mode="none")
        if chosen.mode == SelectionMode.NOISY_GREEDY:
            return self.noisy_greedy.accounting(session_id, public)
        return wire.EmSelectionAccounting(
            **chosen.model_dump(), selected_pairs=self.selected_pairs(session_id),
            rho_charged=str(Fraction(chosen.rho_round) * chosen.rounds),
            numerical_extra_epsilon_per_round=4 * chosen.eta,
            note="each round is (eps + 4 eta)-DP permute-and-flip with fixed-point weights "
                 "in an order neither server knows, charged (eps + 4 eta)^2 / 2; "
                 "delta_terms (a bootstrap failure in P2/P3, a union above max_rows passing "
                 "the row bound) are reserved out of the requested delta")

    # ------------------------------------------------------------ row bound
    def check_row_bound(self, session_id: str, plan: SessionPlan) -> list[list[float]]:
        """409 before anything of the selection is encrypted, decrypted or charged when the
        published 1-ways say the union may exceed max_rows (``params.selection_plan``);
        the published 1-ways, in layout order."""
        if "one_way" not in self._store.releases_done(session_id):
            raise ServiceError(409, "selection starts after the 1-way release is published")
        with self._store.db.connect() as conn:
            row = conn.execute("SELECT result_json FROM releases WHERE session_id = ? AND "
                               "release = 'one_way'", (session_id,)).fetchone()
        result = wire.ReleaseResult.model_validate_json(row["result_json"])
        one_way = [result.marginals[slot.key].counts for slot in plan.layout.one_way]
        check = plan.check_row_bound(one_way)
        if not check.holds:
            raise ServiceError(409, f"selection refused: {check.message()}")
        return one_way

    # ------------------------------------------------------------ P2 inputs
    def inputs(self, session_id: str) -> bytes:
        """Encrypted M mod 2^k per 2-way cell, one ciphertext per P2 chunk (module docstring)."""
        plan = self.selection_plan(session_id)
        public = self._store.public(session_id)
        if len(self._store.uploaded_clients(session_id)) \
                + len(self._store.absent_clients(session_id)) < len(public.clients):
            raise ServiceError(409, "the selection's inputs exist once every client uploaded "
                                    "or was left out")
        one_way = self.check_row_bound(session_id, plan)
        path = self._store.session_dir(session_id) / "selection_inputs.bin"
        if path.exists():
            return path.read_bytes()
        modulus = 1 << plan.parameters.count_bits
        total = np.zeros(plan.layout.total_cells, dtype=np.int64)
        for client_id in public.clients:
            vector = np.frombuffer((self._store.session_dir(session_id) / "masked"
                                    / f"{client_id}.npy").read_bytes(), dtype=np.int64)
            total = (total + vector) % modulus
        chunks = []
        for _, cells, size, width in plan.indif_chunks_by_width(one_way):
            padded = np.zeros(size, dtype=np.int64)
            padded[:len(cells)] = total[cells] % (1 << width)
            chunks.append((padded, width))
        # A few groups a worker: chunk sizes differ, so the workers finish closer together.
        tasks = [EncryptIndifInputs(tuple(group))
                 for group in split_evenly(chunks, 4 * self._pool.workers)]
        encrypted = self._pool.map(self.selection_key_files(session_id), tasks,
                                   f"session {session_id}: encrypting P2's inputs")
        data = pack_blobs([blob for group in encrypted for blob in group])
        write_private(path, data)
        return data

    # ------------------------------------------------------------ P3 rounds
    def decided(self, session_id: str) -> dict[int, tuple[int, int]]:
        """The em rounds decided so far: round -> pair."""
        with self._store.db.connect() as conn:
            return {r["round"]: tuple(json.loads(r["pair_json"])) for r in conn.execute(
                "SELECT round, pair_json FROM selection_rounds WHERE session_id = ?",
                (session_id,))}

    def selected_pairs(self, session_id: str) -> list[tuple[int, int]] | None:
        """Every chosen pair once the selection is decided, else None (from the public
        record: readable for a session whose plan this server refuses)."""
        chosen = self._store.public(session_id).selection
        if chosen is None:
            return None
        if chosen.mode == SelectionMode.NOISY_GREEDY:
            return self.noisy_greedy.pairs(session_id)
        decided = self.decided(session_id)
        if len(decided) < chosen.rounds:
            return None
        return [decided[t] for t in range(chosen.rounds)]

    def _check_round(self, plan: SessionPlan, session_id: str, round_: int) -> None:
        if not 0 <= round_ < plan.selection.rounds:
            raise ServiceError(404, f"round {round_} is not one of this session's "
                                    f"{plan.selection.rounds} selection rounds")
        self.check_row_bound(session_id, plan)
        if round_ > len(self.decided(session_id)):
            raise ServiceError(409, f"round {round_} comes after round "
                                    f"{len(self.decided(session_id))}")

    def randomness(self, session_id: str, round_: int) -> bytes:
        """This server's encrypted shares of round ``round_``'s coins and order, packed
        (R^KS, priorities), or with candidate batches (R^KS, priorities) per batch; the same
        on a retry."""
        plan = self.selection_plan(session_id)
        self._check_round(plan, session_id, round_)
        with self._store.db.connect() as conn:
            row = conn.execute("SELECT value FROM selection_randomness WHERE session_id = ? "
                               "AND round = ?", (session_id, round_)).fetchone()
        if row is not None:
            return bytes(row["value"])
        task = DrawAndEncryptRoundShares(plan.selection.shape, plan.selection.batches)
        [shares] = self._pool.map(self.selection_key_files(session_id), [task],
                                  f"session {session_id}: encrypting round {round_}'s shares")
        value = pack_blobs(shares)
        with self._store.db.transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO selection_randomness VALUES (?, ?, ?)",
                         (session_id, round_, value))
            row = conn.execute("SELECT value FROM selection_randomness WHERE session_id = ? "
                               "AND round = ?", (session_id, round_)).fetchone()
        return bytes(row["value"])

    def decide_round(self, session_id: str, round_: int, body: bytes) -> wire.SelectionRound:
        """Charge the round, decrypt its one-hot outputs (candidate order), record the pair."""
        plan = self.selection_plan(session_id)
        digest = hashlib.sha256(body).hexdigest()
        decided = self.decided(session_id)
        rho = plan.selection.step.rho
        with self._store.db.connect() as conn:
            row = conn.execute("SELECT request_digest FROM selection_rounds WHERE "
                               "session_id = ? AND round = ?", (session_id, round_)).fetchone()
        if row is not None:
            if not secrets.compare_digest(row["request_digest"], digest):
                raise ServiceError(409, f"round {round_} was decided on other outputs; a "
                                        "second decryption would be a second sample")
            return wire.SelectionRound(round=round_, pair=decided[round_], rho=str(rho))
        self._check_round(plan, session_id, round_)
        s = plan.selection.shape.candidates
        try:
            outputs = unpack_blobs(body, expected=s)
            for item in outputs:  # parsed here too: a malformed body is refused uncharged
                SelectionKeys.parse(item)
        except Exception:
            raise ServiceError(422, f"a selection round carries {s} ciphertexts of this "
                                    "session's selection module") from None
        name = f"select-{round_}"
        with self._store.db.transaction() as conn:
            # Charged once, bound to these outputs; other outputs for a charged round would be
            # a second decryption for one charge.
            self._ledger.charge(conn, plan, session_id, name, rho, digest)
        # A refusal there is a 422 too: charged, the budget is spent on what was decrypted.
        [[decrypted]] = self._pool.map(self.selection_key_files(session_id),
                                       [DecryptOneHot(tuple(outputs))],
                                       f"session {session_id}: decrypting round {round_}")
        one_hot = np.frombuffer(decrypted, dtype="<i8").tolist()
        pairs = [slot.attrs for slot in plan.layout.two_way]
        taken = set(decided.values())
        hits = [i for i, bit in enumerate(one_hot) if bit == 1]
        if len(hits) != 1 or sum(one_hot) != 1 or pairs[hits[0]] in taken:
            # Charged and refused: the budget is spent on what this server has seen.
            raise ServiceError(422, f"round {round_}'s outputs are not a one-hot choice of a "
                                    "remaining candidate; the round is not recorded")
        pair = tuple(pairs[hits[0]])
        with self._store.db.transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO selection_rounds VALUES (?, ?, ?, ?)",
                         (session_id, round_, digest, json.dumps(list(pair))))
        return wire.SelectionRound(round=round_, pair=pair, rho=str(rho))

