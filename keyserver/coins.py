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
  that encrypts them and only the ciphertext sent back, for every chunk a joint
  release may touch: a fixed release's own chunks; a selected release's every chunk holding
  pair cells, and 1-way cells where it tops up the 1-ways (which pairs are chosen, and which
  1-ways topped up, is published with the release anyway). A request that
  arrives first makes its chunk on the spot. Every set is as wide as the session's circuit
  (``SessionPlan.joint_columns``): for noisy-greedy's split 2-way release that is its
  envelope, the widest shape any selection's groups may take, so the bits are ready before
  anyone knows how many pairs will be kept; the compute server gives the bits past a cell's
  own shape weight 0.
* **Firm chunks first, guesses last, none once they are known to be unneeded.** A fixed
  release's chunks, and a selected release's once its pairs are decided, are *firm*: the
  compute server will ask for every one of them. Before the decision a selected release's
  chunks are guesses (the demo's noisy-greedy kept 17-19 of Fed-Heart-Disease's 66 pairs,
  whose cells fill 12-13 of the 26 chunks), so they come after everything firm, the joint
  scores' bits included (``keyserver.service``), the chunks shared by the most marginals
  first; once the pairs are decided only the chunks they touch are made. The offline pool
  runs at a lower CPU priority (``keyserver.offline_pool``), so on a host shared with the
  compute server a guess takes mostly what P2 leaves idle.
* **Two-server releases** go through the same circuit with weight 0 on every bit: their
  coins change nothing, so one inert set per session serves all their chunks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from common.serving import Database, ServiceError
from crypto.joint_noise import draw_bits
from keyserver.offline_pool import OfflinePool
from keyserver.sessions import SessionRegistry
from params.session_plan import SessionPlan

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


def _release_slots(plan: SessionPlan, name: str) -> list:
    spec = plan.release(name)
    slots = plan.slots_of(spec) if spec.marginal_keys else plan.layout.two_way
    if not spec.marginal_keys and plan.one_way_topup:
        slots = list(plan.layout.one_way) + list(slots)
    return list(slots)


def release_chunks(plan: SessionPlan, name: str) -> list[int]:
    """Every chunk a release may touch, from the public plan alone (module docstring)."""
    cells = plan.layout.cells_of(_release_slots(plan, name))
    return sorted(set((cells // plan.parameters.chunk_cells).tolist()))


def likeliest_chunks(plan: SessionPlan, name: str) -> list[int]:
    """:func:`release_chunks`, the chunks holding cells of more of the release's possible
    marginals first (ties by index): a chunk is needed if any of its marginals is kept, so
    one shared by seven pairs is a better guess than one holding a single pair's cells.
    From the public plan alone, like the chunks themselves."""
    chunk = plan.parameters.chunk_cells
    holders: dict[int, int] = {}
    for slot in _release_slots(plan, name):
        first, last = slot.offset // chunk, (slot.offset + slot.size - 1) // chunk
        for c in range(first, last + 1):
            holders[c] = holders.get(c, 0) + 1
    return sorted(holders, key=lambda c: (-holders[c], c))


# The chunks a release touches once its marginals are decided (fixed, or its pairs chosen),
# else None: ``keyserver.releases.Releases.decided_chunks``.
DecidedChunks = Callable[[str, SessionPlan, str], "list[int] | None"]


def _joint_chunks(plan: SessionPlan, session_id: str, decided: DecidedChunks
                  ) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(firm, guessed) (release, chunk)s whose bits the offline job prepares, in release
    order (module docstring): a joint release's chunks once its marginals are decided,
    else every chunk it may touch, as guesses, likeliest first (:func:`likeliest_chunks`)."""
    firm: list[tuple[str, int]] = []
    guessed: list[tuple[str, int]] = []
    for spec in plan.releases:
        if spec.joint is None:
            continue
        chunks = decided(session_id, plan, spec.name)
        if chunks is None:
            guessed += [(spec.name, chunk) for chunk in likeliest_chunks(plan, spec.name)]
        else:
            firm += [(spec.name, chunk) for chunk in chunks]
    return firm, guessed


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
        """(chunks encrypted, chunks the plan's joint releases may touch) for one session:
        what the offline job has done, from the public plan and the store alone."""
        plan = self._sessions.plan(session_id)
        if plan.joint_columns == 0:
            return 0, 0
        have = self._sets.held(session_id)
        firm, guessed = _joint_chunks(plan, session_id, self._decided)
        needed = firm + guessed
        return sum(1 for c in needed if c in have), len(needed)

    def prepare_one(self, guesses: bool = False) -> bool:
        """Encrypt missing firm chunks of one session's joint releases (with ``guesses``:
        also chunks of releases whose pairs are not decided yet), at most one per worker of
        the offline pool; False if none is missing (bounded: that many chunks a call)."""
        for session_id in self._sessions.runnable_session_ids():
            plan = self._sessions.plan(session_id)
            if plan.joint_columns == 0:
                continue
            have = self._sets.held(session_id)
            firm, guessed = _joint_chunks(plan, session_id, self._decided)
            missing = [c for c in firm + (guessed if guesses else []) if c not in have]
            if missing:
                self._make(session_id, plan, missing[:self._pool.workers])
                return True
        return False

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
