"""The order in which the key server's offline job makes the joint noise's coin sets
(``keyserver.coins``): firm chunks (a fixed release's; a selected release's once its pairs are
decided) before guesses, a selected release's packed chunks in index order, and once the pairs
are decided only the chunks they fill. Checked on the plan the servers build for a
noisy-greedy session of five 4-valued columns (ten pairs of 16 cells, 160 cells or more with
the topped-up 1-ways, over chunks of the ``test-small`` set), with a registry and a pool
that record what is asked
of them in place of the compiled keys (what a chunk's ciphertext holds is
``tests/servers/test_offline_pool.py``'s)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from feddpsyn.common import wire
from feddpsyn.common.serving import Database
from feddpsyn.keyserver.coins import (
    COINS_SQL,
    JointCoins,
    StoredOnce,
    ahead_of_time,
    release_chunks,
)
from feddpsyn.keyserver.offline_pool import KeyFiles
from feddpsyn.keyserver.sessions import build_plan

SID = "s-order"
SCHEMA = {"name": "five", "columns": [
    {"name": c, "type": "categorical", "i2s": ["a", "b", "c", "d"]} for c in "vwxyz"]}
REQUEST = wire.SessionCreate(schema=SCHEMA, clients=["alice", "bob"], parameter_set="test-small",
                             budget=wire.BudgetSpec(epsilon=1.0, delta=1e-6), max_rows=1000,
                             noise="joint", selection=wire.SelectionRequest(mode="noisy-greedy"))


class Registry:
    """The two things JointCoins asks of the session registry besides its database."""

    def __init__(self, db: Database, plan):
        self.db, self._plan = db, plan

    def runnable_session_ids(self) -> list[str]:
        return [SID]

    def plan(self, session_id: str):
        return self._plan

    def key_files(self, session_id: str) -> str:
        return "keys of " + session_id


class RecordingPool:
    """Makes a distinct set per task and records each map's size."""

    workers = 1

    def __init__(self):
        self.maps: list[int] = []

    def map(self, files, tasks, what):
        self.maps.append(len(tasks))
        return [[f"set {sum(self.maps)}-{i}".encode()] for i in range(len(tasks))]


@pytest.fixture(scope="module")
def plan():
    plan = build_plan(REQUEST)
    assert plan.release("two_way").joint is not None and not plan.release("two_way").marginal_keys
    return plan


def coins(tmp_path: Path, plan, decided: dict[str, list[int] | None]):
    db = Database(tmp_path / "ks.sqlite", COINS_SQL)
    pool = RecordingPool()
    return JointCoins(Registry(db, plan), pool, lambda sid, p, name: decided[name]), db, pool


def made(db: Database) -> list[tuple[str, int]]:
    with db.connect() as conn:
        return [(r["release"], r["chunk"]) for r in conn.execute(
            "SELECT release, chunk FROM joint_coins ORDER BY rowid")]


def drain(joint: JointCoins) -> int:
    passes = 0
    while joint.prepare_one():  # bounded: one chunk a pass, finitely many
        passes += 1
        assert passes < 100
    return passes


class Countdown(threading.Event):
    """``done`` for make_ahead that sets itself after ``sets`` checks: the preparation
    finishing after that many sets."""

    def __init__(self, sets: int):
        super().__init__()
        self.left = sets

    def is_set(self) -> bool:
        self.left -= 1
        return self.left < 0 or super().is_set()


def test_the_offline_job_makes_firm_chunks_only(tmp_path, plan):
    one_way = release_chunks(plan, "one_way")
    every_pair = release_chunks(plan, "two_way")
    assert len(every_pair) >= 4  # enough chunks that a choice of pairs leaves some out
    joint, db, _ = coins(tmp_path, plan, {"one_way": one_way, "two_way": None})
    # Before anything is made, the guesses are not counted: none will be made from now on.
    assert joint.readiness(SID) == (0, len(one_way))
    drain(joint)
    assert made(db) == [("one_way", c) for c in one_way]
    assert joint.readiness(SID) == (len(one_way),) * 2


def test_ahead_of_time_firm_sets_first_then_guesses_in_index_order(tmp_path, plan):
    one_way = release_chunks(plan, "one_way")
    every_pair = release_chunks(plan, "two_way")
    assert ahead_of_time(plan) == ([("one_way", c) for c in one_way]
                                   + [("two_way", c) for c in every_pair])
    joint, db, pool = coins(tmp_path, plan, {"one_way": one_way, "two_way": None})
    files = KeyFiles(str, str(tmp_path))
    assert joint.make_ahead(SID, plan, files, Countdown(len(one_way) + 2)) == len(one_way) + 2
    assert made(db) == ahead_of_time(plan)[:len(one_way) + 2]
    assert pool.maps == [1] * (len(one_way) + 2)  # one set a map: it stops between sets
    # The guesses made count in the status; the firm chunks are all there already.
    assert joint.readiness(SID) == (len(one_way) + 2,) * 2
    assert not joint.prepare_one()
    # A preparation that did not finish drops its sets.
    joint.forget(SID)
    assert made(db) == []


def test_a_selected_release_is_packed_and_guessed_in_index_order(plan):
    """Before the decision a selected release may use packed chunks 0 .. ceil(cells / C) - 1
    (every pair, and the topped-up 1-ways), guessed in that order; once decided, its cells
    in layout order fill chunks 0, 1, ... C at a time, fewer than the layout chunks its
    pairs are spread over."""
    chunk = plan.parameters.chunk_cells
    slots = list(plan.layout.two_way) + (list(plan.layout.one_way) if plan.one_way_topup else [])
    most = sum(s.size for s in slots)
    assert release_chunks(plan, "two_way") == list(range(-(-most // chunk)))
    spread = [plan.layout.two_way[i] for i in (0, 3, 6, 9)]  # pairs far apart
    resolved = plan.resolve(plan.release("two_way"), [s.attrs for s in spread])
    parts = plan.release_chunks(resolved)
    cells = plan.layout.cells_of(plan.slots_of(resolved))
    assert [p.index for p in parts] == list(range(-(-len(cells) // chunk)))
    assert all(p.packed for p in parts)
    assert np.array_equal(np.concatenate([p.cells for p in parts]), cells)
    assert all(np.array_equal(p.places, np.arange(len(p.cells))) for p in parts)
    assert len(parts) < len(set((cells // chunk).tolist()))
    # A fixed release keeps the layout's chunks, each cell at its own place.
    fixed = plan.release_chunks(plan.release("one_way"))
    assert not any(p.packed for p in fixed)
    assert all(np.array_equal(p.cells - p.index * chunk, p.places) for p in fixed)


def test_once_the_pairs_are_decided_only_their_chunks_are_made(tmp_path, plan):
    one_way = release_chunks(plan, "one_way")
    every_pair = release_chunks(plan, "two_way")
    kept = every_pair[1:3]
    joint, db, _ = coins(tmp_path, plan, {"one_way": one_way, "two_way": kept})
    assert joint.readiness(SID) == (0, len(one_way) + len(kept))
    drain(joint)
    assert sorted(made(db)) == sorted([("one_way", c) for c in one_way]
                                      + [("two_way", c) for c in kept])
    assert joint.readiness(SID) == (len(one_way) + len(kept),) * 2
    # The compute server may still ask for any chunk the release can touch: made on the spot.
    other = every_pair[0]
    assert joint.coins(SID, "two_way", other) == StoredOnce(db).get(SID, "two_way", other)


def test_guesses_made_ahead_serve_the_decided_release(tmp_path, plan):
    """Sets made ahead for packed chunks 0 and 1 are the ones served once the pairs are
    decided; the offline job then makes only the decided chunks still missing."""
    one_way = release_chunks(plan, "one_way")
    decided: dict[str, list[int] | None] = {"one_way": one_way, "two_way": None}
    db = Database(tmp_path / "ks.sqlite", COINS_SQL)
    joint = JointCoins(Registry(db, plan), RecordingPool(),
                       lambda sid, p, name: decided[name])
    joint.make_ahead(SID, plan, KeyFiles(str, str(tmp_path)), Countdown(len(one_way) + 2))
    ahead = {c: StoredOnce(db).get(SID, "two_way", c) for c in (0, 1)}
    decided["two_way"] = [0, 1, 2]
    drain(joint)
    assert made(db)[len(one_way):] == [("two_way", 0), ("two_way", 1), ("two_way", 2)]
    assert all(joint.coins(SID, "two_way", c) == ahead[c] for c in (0, 1))
