"""A noisy-greedy session with the 1-way top-up (``one_way_topup``) through both servers over
HTTP, at eps 1 with the servers' default noise: both servers read the option from the public
record; the key server's greedy rule is the plan's (the 1-ways in its allocation); the 2-way
release holds exactly the chosen pairs and the topped-up 1-ways of ``SessionPlan.resolve``,
each marginal with its group's shape (the compute server's statement of the noise matches
the key server's), its rho charged once; published - true follows each count's stated
shape; and synthesis reads each topped-up 1-way as one measurement, its two combined by
inverse variance."""

import csv
import json
import sqlite3
from fractions import Fraction
from pathlib import Path

import httpx
import numpy as np
import pytest
from scipy import stats

from common import wire
from dp.joint_noise_accounting import JointNoiseShape
from params.schema import Schema
from params.session_plan import SessionPlan
from synthesis import marginals_from_release
from tests.served import serve
from tests.test_servers import true_counts

EPSILON = 1.0
ALPHA = 1e-6
CLIENTS = ["alice", "bob", "carol"]
# An 8-valued column and two binary ones: at eps 1 every selection tops up the 8-cell 1-way
# (``tests/test_one_way_topup.py`` enumerates them).
SCHEMA = {"name": "topup", "columns": [
    {"name": "grade", "type": "categorical", "i2s": list("abcdefgh")},
    {"name": "sex", "type": "categorical", "i2s": ["F", "M"]},
    {"name": "smoker", "type": "categorical", "i2s": ["no", "yes"]}]}


def write_csvs(directory: Path) -> dict[str, Path]:
    """sex follows grade, smoker follows sex, so PrivSyn's rule keeps a pair; the data only:
    every noise comes from the servers' CSPRNG."""
    rng = np.random.default_rng(5)
    paths = {}
    for i, client in enumerate(CLIENTS):
        path = directory / f"{client}.csv"
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["grade", "sex", "smoker"])
            for _ in range(120 + 60 * i):
                grade = int(rng.integers(0, 8))
                sex = ("F" if grade < 4 else "M") if rng.random() < 0.97 else rng.choice(["F", "M"])
                smoker = {"F": "no", "M": "yes"}[sex] if rng.random() < 0.9 else "no"
                w.writerow(["abcdefgh"[grade], sex, smoker])
        paths[client] = path
    return paths


def session_request() -> wire.SessionCreate:
    return wire.SessionCreate(schema=SCHEMA, clients=CLIENTS, parameter_set="test-small",
                              budget=wire.BudgetSpec(epsilon=EPSILON, delta=1e-6),
                              max_rows=1000,
                              selection=wire.SelectionRequest(mode="noisy-greedy",
                                                              one_way_topup=True))


@pytest.fixture(scope="module")
def topup_session(tmp_path_factory):
    csvs = write_csvs(tmp_path_factory.mktemp("csv"))
    with serve(tmp_path_factory, session_request(), csvs, timeout=600) as (
            ks, state, created, document):
        yield ks, state, created, csvs, document


def _chosen(document) -> list[tuple[int, int]]:
    return [tuple(p) for p in document.accounting["selection"]["selected_pairs"]]


def _resolved(created, document):
    plan = SessionPlan.from_public(created.session)
    return plan, plan.resolve(plan.release("two_way"), _chosen(document))


def test_the_option_is_public_and_the_greedy_rule_is_the_plans(topup_session):
    _, state, created, _, document = topup_session
    assert created.session.one_way_topup
    plan = SessionPlan.from_public(created.session)
    assert plan.one_way_topup and plan.accounting == "pld"
    chosen = _chosen(document)
    assert chosen, "the dependent columns keep a pair"
    with sqlite3.connect(state / "keyserver" / "keyserver.sqlite") as conn:
        row = conn.execute("SELECT scores_json FROM noisy_greedy WHERE session_id = ?",
                           (created.session.session_id,)).fetchone()
    scores = json.loads(row[0])
    pairs = [slot.attrs for slot in plan.layout.two_way]
    assert plan.select_pairs(dict(zip(pairs, scores, strict=True))) == chosen
    rho = {e["release"]: Fraction(e["rho"]) for e in document.accounting["entries"]}
    assert list(rho) == ["one_way", "selection", "two_way"]
    assert rho["two_way"] == plan.release("two_way").rho  # the top-ups are inside it


def test_the_release_holds_the_pairs_and_the_top_ups_with_their_shapes(topup_session):
    _, state, created, _, document = topup_session
    plan, resolved = _resolved(created, document)
    tops = [p for p in resolved.parts if p.name.startswith("two_way/one_way/")]
    assert tops, "every selection of this schema tops up the 8-cell 1-way at eps 1"
    assert sum(p.rho for p in resolved.parts) == resolved.rho
    two_way = next(r for r in document.releases if r.release == "two_way")
    assert set(two_way.marginals) == set(resolved.marginal_keys)
    names = Schema.from_dict(SCHEMA).names
    expected = {tuple(names[a] for a in s.attrs) for s in plan.slots_of(resolved)}
    assert {tuple(m.attrs) for m in two_way.marginals.values()} == expected
    for key, marginal in two_way.marginals.items():
        part = next(p for p in resolved.parts if key in p.marginal_keys)
        assert JointNoiseShape(marginal.joint.uniforms, marginal.joint.bits) == part.joint
        assert Fraction(marginal.per_count_variance) == part.joint.variance
    assert Fraction(two_way.per_count_variance) == plan.per_count_variance(resolved)
    assert document.noise["kind"] == "joint"
    summary = document.noise["releases"]["two_way"]
    assert set(summary["groups"]) == {p.name for p in resolved.parts}
    for part in resolved.parts:
        assert document.noise["per_count_variance"][part.name] == float(part.joint.variance)
    with sqlite3.connect(state / "keyserver" / "keyserver.sqlite") as conn:
        row = conn.execute("SELECT manifest_json FROM manifests WHERE session_id = ? AND "
                           "release = 'two_way'", (created.session.session_id,)).fetchone()
    assert json.loads(row[0])["noise"] == plan.noise_statement(resolved)


def _pit(error: int, shape: JointNoiseShape, u: float) -> float:
    counts = shape.counts()
    index = int(error) + shape.span // 2
    return (sum(counts[:index]) + u * counts[index]) / sum(counts)


def test_published_minus_true_follows_each_counts_stated_shape(topup_session):
    """Both releases' counts, the 1-ways' twice: each error within its shape's hard bound,
    and the randomised PIT of all of them uniform (chi-square, alpha 1e-6)."""
    _, _, created, csvs, document = topup_session
    plan = SessionPlan.from_public(created.session)
    exact = true_counts(csvs, SCHEMA)
    index = {n: i for i, n in enumerate(Schema.from_dict(SCHEMA).names)}
    rng = np.random.default_rng(3)  # the transform's tie-breaking only
    transformed = []
    for release in document.releases:
        for marginal in release.marginals.values():
            joint = marginal.joint or release.joint
            shape = JointNoiseShape(joint.uniforms, joint.bits)
            slot = plan.layout.slot(tuple(index[a] for a in marginal.attrs))
            errors = np.array(marginal.counts) - exact[slot.offset:slot.offset + slot.size]
            assert np.abs(errors).max() <= shape.span // 2
            transformed.extend(_pit(e, shape, rng.random()) for e in errors)
    bins = len(transformed) // 5
    observed = np.bincount(np.minimum((np.array(transformed) * bins).astype(int), bins - 1),
                           minlength=bins)
    assert stats.chisquare(observed).pvalue > ALPHA


def test_synthesis_combines_the_two_measurements(topup_session):
    ks, state, created, _, document = topup_session
    plan, resolved = _resolved(created, document)
    one_way = next(r for r in document.releases if r.release == "one_way")
    two_way = next(r for r in document.releases if r.release == "two_way")
    _, noisy = marginals_from_release(document)
    assert len(noisy) == len(plan.layout.one_way) + len(_chosen(document))
    index = {n: i for i, n in enumerate(Schema.from_dict(SCHEMA).names)}
    by_attrs = {m.attrs: m for m in noisy}
    first_variance = float(Fraction(one_way.per_count_variance))
    for key, marginal in two_way.marginals.items():
        if len(marginal.attrs) != 1:
            continue
        second_variance = float(Fraction(marginal.per_count_variance))
        w1, w2 = 1 / first_variance, 1 / second_variance
        combined = by_attrs[(index[marginal.attrs[0]],)]
        assert combined.variance == pytest.approx(1 / (w1 + w2))
        expected = (w1 * np.array(one_way.marginals[key].counts)
                    + w2 * np.array(marginal.counts)) / (w1 + w2)
        assert combined.counts.ravel() == pytest.approx(expected)
    # The key server's bits for the release cover the 1-ways' chunk: one set, served alike.
    peer = {"Authorization": f"Bearer {(state / 'peer.token').read_text().strip()}"}
    chunk = int(plan.layout.cells_of(plan.layout.one_way)[0]) // plan.parameters.chunk_cells
    url = f"{ks.url}/peer/sessions/{created.session.session_id}/releases/two_way/coins/{chunk}"
    first = httpx.get(url, headers=peer, timeout=120)
    assert first.status_code == 200
    assert httpx.get(url, headers=peer, timeout=120).content == first.content
