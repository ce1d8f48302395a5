"""The key server's half of the joint noise (``crypto.joint_noise``): encrypted uniform bits
a, one set per (release, chunk), drawn and encrypted offline and handed to the compute server.

Design concerns:

* **Drawn from the CSPRNG, encrypted, forgotten.** ``draw_bits`` fails closed on a short
  read; only the ciphertext is stored, so nothing on this server can later reconstruct the
  noise (its view of a release is count + Z with Z uniform-shaped given a).
* **One answer per (release, chunk).** The first ciphertext stored is the one served, on
  every retry and after a restart: the compute server never gets two independent sets for
  one chunk, so the release it sends is a function of one a.
* **Offline.** :meth:`JointCoins.prepare_one` runs in the background job, one chunk per
  worker of the offline pool a pass (``keyserver.offline_pool``; a client's upload waiting
  for encryption goes first), each chunk's bits drawn and encrypted in the worker process
  that encrypts them and only the ciphertext sent back, for every chunk a joint release may
  use (``params.release_chunks``): a fixed release's own layout chunks, and a selected
  release's packed chunks 0, 1, 2, ...: set j serves whichever cells the selection puts in
  packed chunk j, so it can be made before anyone knows the pairs. A request that arrives
  first makes its chunk on the spot. Every set is as wide as the session's circuit
  (``SessionPlan.joint_columns``): for noisy-greedy's split 2-way release that is its
  envelope, the widest shape any selection's groups may take; the compute server gives the
  bits past a cell's own shape weight 0.
* **Guesses only where they are free.** A fixed release's chunks, and a selected release's
  once its pairs are decided, are *firm*: the compute server will ask for every one of
  them. Before the decision a selected release's packed chunks are guesses (chunk j is used
  iff more than j chunks' worth of cells are kept: the demo's noisy-greedy kept 16-19 of
  Fed-Heart-Disease's 66 pairs, 4 of its 26 possible packed chunks). They are made only
  while the session's selection module compiles (:meth:`JointCoins.make_ahead`, started by
  ``keyserver.preparation``), firm sets first: the compiler holds one core and the
  offline pool takes the other, about five sets on that demo. Made later, while P2 runs,
  a guess takes CPU from P2 wherever the two servers share a host, and one the selection
  does not use is that CPU lost: with guesses through P2 the demo's key server made 13
  and the release used 4. A firm set still missing is made by the offline job (the joint
  scores' bits too, ``keyserver.service``), and a decided release's on demand; the offline
  pool runs at a lower CPU priority (``keyserver.offline_pool``).
* **Two-server releases** go through the same circuit with weight 0 on every bit: their
  coins change nothing, so one inert set per session serves all their chunks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from feddpsyn.common.serving import Database, ServiceError
from feddpsyn.crypto.joint_noise import draw_bits
from feddpsyn.keyserver.offline_pool import KeyFiles, OfflinePool
from feddpsyn.keyserver.sessions import SessionRegistry
from feddpsyn.params.release_chunks import is_packed, possible_chunks
from feddpsyn.params.session_plan import SessionPlan

__all__ = ["COINS_SQL", "DrawAndEncryptCoins", "JointCoins", "StoredOnce"]

log = logging.getLogger("feddpsyn.keyserver")

COINS_SQL = """
CREATE TABLE IF NOT EXISTS joint_coins (
    session_id TEXT NOT NULL, release TEXT NOT NULL, chunk INTEGER NOT NULL,
    ciphertext BLOB NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (session_id, release, chunk));
"""

# The chunk index under which a session's inert set (two-server releases) is stored.
INERT = -1


def release_chunks(plan: SessionPlan, name: str) -> list[int]:
    """Every chunk a release may use, from the public plan alone, the likeliest first
    (``params.release_chunks.possible_chunks``; module docstring)."""
    return possible_chunks(plan, name)


# The chunks a release touches once its marginals are decided (fixed, or its pairs chosen),
# else None: ``keyserver.releases.Releases.decided_chunks``.
DecidedChunks = Callable[[str, SessionPlan, str], "list[int] | None"]


def _joint_chunks(plan: SessionPlan, session_id: str, decided: DecidedChunks
                  ) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(firm, guessed) (release, chunk)s whose bits the offline job prepares, in release
    order (module docstring): a joint release's chunks once its marginals are decided,
    else every chunk it may use, as guesses, likeliest first (:func:`release_chunks`)."""
    firm: list[tuple[str, int]] = []
    guessed: list[tuple[str, int]] = []
    for spec in plan.releases:
        if spec.joint is None:
            continue
        chunks = decided(session_id, plan, spec.name)
        if chunks is None:
            guessed += [(spec.name, chunk) for chunk in release_chunks(plan, spec.name)]
        else:
            firm += [(spec.name, chunk) for chunk in chunks]
    return firm, guessed


def ahead_of_time(plan: SessionPlan) -> list[tuple[str, int]]:
    """The sets worth making while the session's selection module compiles
    (:meth:`JointCoins.make_ahead`), in the order they are made: every fixed joint release's
    chunks (firm), then every selected one's packed chunks in index order (guesses)."""
    firm: list[tuple[str, int]] = []
    guessed: list[tuple[str, int]] = []
    for spec in plan.releases:
        if spec.joint is not None:
            chunks = [(spec.name, chunk) for chunk in release_chunks(plan, spec.name)]
            (guessed if is_packed(plan, spec.name) else firm).extend(chunks)
    return firm + guessed


class StoredOnce:
    """This server's encrypted bit sets, one per (session, name, index) in ``joint_coins``:
    the first set stored is the only one ever served (module docstring). Joint releases
    store theirs per (release, chunk); noisy-greedy's joint scores per (``SCORE_NOISE``, pair),
    a name no release has, so neither can be fetched as the other."""

    def __init__(self, db: Database):
        self.db = db

    def get(self, session_id: str, name: str, index: int) -> bytes | None:
        with self.db.connect() as conn:
            row = conn.execute("SELECT ciphertext FROM joint_coins WHERE session_id = ? AND "
                               "release = ? AND chunk = ?", (session_id, name, index)).fetchone()
        return None if row is None else bytes(row["ciphertext"])

    def held(self, session_id: str) -> set[tuple[str, int]]:
        with self.db.connect() as conn:
            return {(r["release"], r["chunk"]) for r in conn.execute(
                "SELECT release, chunk FROM joint_coins WHERE session_id = ?", (session_id,))}

    def put(self, session_id: str, name: str, index: int, ciphertext: bytes) -> bytes:
        """Store ``ciphertext`` unless a set is already there; returns the stored one."""
        with self.db.transaction() as conn:
            # A concurrent maker may have stored first: its set is the one ever served.
            conn.execute("INSERT OR IGNORE INTO joint_coins VALUES (?, ?, ?, ?, ?)",
                         (session_id, name, index, ciphertext, time.time()))
        return self.get(session_id, name, index)


@dataclass(frozen=True)
class DrawAndEncryptCoins:
    """An offline task: one chunk's bits (cells x columns) drawn from the CSPRNG in the
    process that encrypts them, as the circuit's ``coins`` input; only the ciphertext
    leaves the task."""

    cells: int
    columns: int

    def run(self, keys) -> list[bytes]:
        bits = draw_bits(self.cells, self.columns)
        ciphertext = keys.encrypt_coins(bits)
        del bits  # this server's share of the noise: only its ciphertext is kept
        return [ciphertext]


class JointCoins:
    """Encrypted bits of this server for each joint release's chunks."""

    def __init__(self, sessions: SessionRegistry, pool: OfflinePool, decided: DecidedChunks):
        self._sessions = sessions
        self._decided = decided
        self.db: Database = sessions.db
        self._sets = StoredOnce(self.db)
        self._pool = pool
        # Held from "which chunks are missing" to "stored": a compute server's request for a
        # chunk the offline pass is encrypting waits for that pass and then finds the chunk,
        # instead of encrypting it a second time (the pool runs one map at a time anyway).
        self._making = threading.Lock()

    def coins(self, session_id: str, name: str, chunk: int) -> bytes:
        """The ciphertext of this server's bits for one chunk of a release (stored once)."""
        plan = self._sessions.plan(session_id)
        if plan.joint_columns == 0:
            raise ServiceError(404, "this session's releases carry no joint noise")
        try:
            spec = plan.release(name)
        except KeyError:
            raise ServiceError(404, f"release {name!r} is not registered for this "
                                    "session") from None
        if spec.joint is None:
            chunk = INERT
        elif chunk not in release_chunks(plan, name):
            raise ServiceError(404, f"chunk {chunk} is not one release {name!r} can touch")
        stored = self._sets.get(session_id, name, chunk)
        return stored if stored is not None else self._make(session_id, plan,
                                                            [(name, chunk)])[0]

    def readiness(self, session_id: str) -> tuple[int, int]:
        """(sets made, sets to make) for one session's joint releases: the firm chunks and
        the guesses made ahead of time (a guess not made then is never made later), from the
        public plan and the store alone."""
        plan = self._sessions.plan(session_id)
        if plan.joint_columns == 0:
            return 0, 0
        have = self._sets.held(session_id)
        firm, guessed = _joint_chunks(plan, session_id, self._decided)
        needed = firm + [c for c in guessed if c in have]
        return sum(1 for c in needed if c in have), len(needed)

    def prepare_one(self) -> bool:
        """Encrypt missing firm chunks of one session's joint releases, at most one per
        worker of the offline pool; False if none is missing (bounded: that many chunks a
        call). Guesses are made only ahead of time (:meth:`make_ahead`)."""
        for session_id in self._sessions.runnable_session_ids():
            plan = self._sessions.plan(session_id)
            if plan.joint_columns == 0:
                continue
            have = self._sets.held(session_id)
            firm, _ = _joint_chunks(plan, session_id, self._decided)
            missing = [c for c in firm if c not in have]
            if missing:
                self._make(session_id, plan, missing[:self._pool.workers])
                return True
        return False

    def make_ahead(self, session_id: str, plan: SessionPlan, files: KeyFiles,
                   done: threading.Event) -> int:
        """While the session's selection module compiles (``keyserver.preparation``), on
        the core the compiler leaves idle: the sets of :func:`ahead_of_time`, one at a time,
        until ``done`` (the preparation finished) or none is left; ``files``: the joint
        circuit's keys in the preparation's work folder. Returns how many were made.

        Why only then: a guess made later, while P2 runs, takes CPU from P2 wherever the
        two servers share a host, and a guess the selection does not use is that CPU lost
        (the demo's key server made 13 packed guesses during P2 and the release used 4).
        The compiler runs on one core, so what is made during it is free; a firm chunk
        still missing once the session is ready is made by the offline job, a decided
        release's on demand."""
        if plan.joint_columns == 0:
            return 0
        task = DrawAndEncryptCoins(plan.parameters.chunk_cells, plan.joint_columns)
        made = 0
        for name, chunk in ahead_of_time(plan):  # bounded: the plan's possible chunks
            if done.is_set():
                break
            started = time.time()
            try:
                encrypted = self._pool.map(files, [task], f"session {session_id}: encrypting "
                                                          "the joint noise's bits ahead")
            except Exception as exc:  # the server stopping: the offline job makes it later
                log.info("session %s: stopped encrypting the joint noise's bits ahead (%s)",
                         session_id, type(exc).__name__)
                break
            self._sets.put(session_id, name, chunk, encrypted[0][0])
            made += 1
            log.info("session %s: encrypted the joint noise's bits of %s chunk %d while "
                     "preparing (%.1f s)", session_id, name, chunk, time.time() - started)
        return made

    def forget(self, session_id: str) -> None:
        """Drop a session's sets: an attempt at preparing it that did not finish made them
        under keys no finished attempt has."""
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM joint_coins WHERE session_id = ?", (session_id,))

    def _make(self, session_id: str, plan: SessionPlan,
              chunks: list[tuple[str, int]]) -> list[bytes]:
        """Draw, encrypt and store the bits of these (release, chunk)s that no one has stored
        yet, one task each; the stored sets of all of them, in order."""
        with self._making:
            have = self._sets.held(session_id)
            missing = [c for c in chunks if c not in have]
            if missing:
                started = time.time()
                task = DrawAndEncryptCoins(plan.parameters.chunk_cells, plan.joint_columns)
                encrypted = self._pool.map(
                    self._sessions.key_files(session_id), [task] * len(missing),
                    f"session {session_id}: encrypting the joint noise's bits")
                for (name, chunk), ciphertexts in zip(missing, encrypted, strict=True):
                    self._sets.put(session_id, name, chunk, ciphertexts[0])
                log.info("session %s: encrypted the joint noise's bits of %s (%.1f s)",
                         session_id, ", ".join(f"{name} chunk {chunk}" for name, chunk in missing),
                         time.time() - started)
        stored = [self._sets.get(session_id, name, chunk) for name, chunk in chunks]
        if any(s is None for s in stored):  # not expected: put stores or keeps the first
            raise ServiceError(503, "a joint-noise chunk was not stored; retry")
        return [s for s in stored if s is not None]
