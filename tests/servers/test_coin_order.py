"""The order in which the key server's offline job makes the joint noise's coin sets
(``keyserver.coins``): firm chunks (a fixed release's; a selected release's once its pairs are
decided) before guesses, and once the pairs are decided only the chunks they touch. Checked on
the plan the servers build for a noisy-greedy session of five 4-valued columns (ten pairs over
five chunks of the ``test-small`` set), with a registry and a pool that record what is asked
of them in place of the compiled keys (what a chunk's ciphertext holds is
``tests/servers/test_offline_pool.py``'s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from common import wire
from common.serving import Database
from keyserver.coins import COINS_SQL, JointCoins, StoredOnce, likeliest_chunks, release_chunks
from keyserver.sessions import build_plan

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


def drain(joint: JointCoins, guesses: bool) -> int:
    passes = 0
    while joint.prepare_one(guesses=guesses):  # bounded: one chunk a pass, finitely many
        passes += 1
        assert passes < 100
    return passes


def test_firm_chunks_come_first_and_guesses_only_when_asked(tmp_path, plan):
    one_way = release_chunks(plan, "one_way")
    every_pair = release_chunks(plan, "two_way")
    assert len(every_pair) >= 4  # enough chunks that a choice of pairs leaves some out
    joint, db, _ = coins(tmp_path, plan, {"one_way": one_way, "two_way": None})
    assert joint.readiness(SID) == (0, len(one_way) + len(every_pair))
    drain(joint, guesses=False)
    assert made(db) == [("one_way", c) for c in one_way]
    drain(joint, guesses=True)
    guesses = likeliest_chunks(plan, "two_way")
    assert made(db) == [("one_way", c) for c in one_way] + [("two_way", c) for c in guesses]


def test_guesses_go_by_how_many_marginals_share_a_chunk(plan):
    """The chunks a guessed release may touch, those holding cells of more of its possible
    marginals (pairs; topped-up 1-ways) first: counted here from the layout directly."""
    chunk = plan.parameters.chunk_cells
    slots = list(plan.layout.two_way) + (list(plan.layout.one_way) if plan.one_way_topup else [])
    spans = [(s.offset // chunk, (s.offset + s.size - 1) // chunk) for s in slots]
    holders = {c: sum(1 for first, last in spans if first <= c <= last)
               for c in release_chunks(plan, "two_way")}
    order = likeliest_chunks(plan, "two_way")
    assert sorted(order) == release_chunks(plan, "two_way")
    assert [holders[c] for c in order] == sorted(holders.values(), reverse=True)
    assert len(set(holders.values())) > 1  # the order is not the index order by accident


def test_once_the_pairs_are_decided_only_their_chunks_are_made(tmp_path, plan):
    one_way = release_chunks(plan, "one_way")
    every_pair = release_chunks(plan, "two_way")
    kept = every_pair[1:3]
    joint, db, _ = coins(tmp_path, plan, {"one_way": one_way, "two_way": kept})
    assert joint.readiness(SID) == (0, len(one_way) + len(kept))
    drain(joint, guesses=True)
    assert sorted(made(db)) == sorted([("one_way", c) for c in one_way]
                                      + [("two_way", c) for c in kept])
    assert joint.readiness(SID) == (len(one_way) + len(kept),) * 2
    # The compute server may still ask for any chunk the release can touch: made on the spot.
    other = every_pair[0]
    assert joint.coins(SID, "two_way", other) == StoredOnce(db).get(SID, "two_way", other)


def test_a_decision_mid_job_stops_the_guesses_it_makes_unneeded(tmp_path, plan):
    one_way = release_chunks(plan, "one_way")
    every_pair = release_chunks(plan, "two_way")
    decided: dict[str, list[int] | None] = {"one_way": one_way, "two_way": None}
    db = Database(tmp_path / "ks.sqlite", COINS_SQL)
    joint = JointCoins(Registry(db, plan), RecordingPool(),
                       lambda sid, p, name: decided[name])
    drain(joint, guesses=False)
    assert joint.prepare_one(guesses=True)  # one guess: the likeliest chunk
    first = likeliest_chunks(plan, "two_way")[0]
    last = next(c for c in every_pair if c != first)
    decided["two_way"] = [last]
    drain(joint, guesses=True)
    assert made(db)[len(one_way):] == [("two_way", first), ("two_way", last)]
