"""A whole session with the noisy-greedy selection through both servers over HTTP, at eps 1
with the servers' default noise (auto): the key server charges exactly the plan's rho for
the selection, the scores carry one joint noise (the public record says so, with its
shape), the compute server's encrypted noisy scores decrypt to InDif plus that noise within
its hard bound, the chosen pairs are PrivSyn's greedy rule (priced with its c^(2/3) split)
on the key server's recorded scores (the decrypted value, nothing added), the key server's
score bits are served identically on a retry, a replay returns the recorded pairs and other
ciphertexts are refused; the 2-way release holds exactly the chosen pairs, split by PrivSyn's
allocation with one joint noise per pair size, the shapes both servers compute from the
public plan and the published pairs, and published - true follows each count's stated shape
exactly."""

import contextlib
import csv
import json
import sqlite3
from fractions import Fraction
from pathlib import Path

import httpx
import numpy as np
import pytest
from concrete import fhe
from scipy import stats

from clients.agent import ClientAgent
from common import wire
from crypto.blobs import pack_blobs, unpack_blobs
from crypto.noisy_scores import decode_score
from dp.joint_noise_accounting import JointNoiseShape
from dp.pair_selection import expected_counts_for_pairs
from dp.privsyn_allocation import greedy_select_allocated
from feddpsyn.demo import _selection_summary, start_servers
from params.plan_request import PlanRequest
from params.schema import Schema
from params.session_plan import SessionPlan
from synthesis import marginals_from_release
from tests.served import post_session
from tests.test_servers import CLIENTS, SCHEMA, true_counts, wait_released

EPSILON = 1.0
ALPHA = 1e-6


def write_dependent_csvs(directory: Path) -> dict[str, Path]:
    """Columns that depend on each other (sex mostly follows age, smoker mostly follows
    sex), so PrivSyn's rule keeps pairs at eps 1; the data only: every noise comes from the
    servers' CSPRNG."""
    rng = np.random.default_rng(11)
    paths = {}
    for i, client in enumerate(CLIENTS):
        path = directory / f"{client}.csv"
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["age", "sex", "smoker"])
            for _ in range(100 + 50 * i):
                age = int(rng.integers(0, 101))
                sex = ("F" if age < 50 else "M") if rng.random() < 0.95 else rng.choice(["F", "M"])
                smoker = ({"F": "no", "M": "yes"}[sex] if rng.random() < 0.9
                          else "unknown")
                w.writerow([age, sex, smoker])
        paths[client] = path
    return paths


@contextlib.contextmanager
def _served(tmp_path_factory):
    state = tmp_path_factory.mktemp("state")
    ks, cs = start_servers(state)
    try:
        operator = (state / "keyserver" / "operator.token").read_text().strip()
        request = wire.SessionCreate(schema=SCHEMA, clients=CLIENTS, parameter_set="test-small",
                                     budget=wire.BudgetSpec(epsilon=EPSILON, delta=1e-6),
                                     max_rows=1000,
                                     # The split release of the pairs alone: the top-up
                                     # is tests/test_servers_one_way_topup.py's.
                                     selection=wire.SelectionRequest(mode="noisy-greedy",
                                                                     one_way_topup=False))
        created = post_session(ks.url, operator, request)
        csvs = write_dependent_csvs(tmp_path_factory.mktemp("csv"))
        agents = tmp_path_factory.mktemp("agents")
        sid = created.session.session_id
        for client in CLIENTS:
            with ClientAgent(ks.url, cs.url, sid, client, created.client_tokens[client],
                             agents) as agent:
                agent.upload(csvs[client])
        with ClientAgent(ks.url, cs.url, sid, CLIENTS[0], created.client_tokens[CLIENTS[0]],
                         agents) as agent:
            document = wait_released(agent, timeout=400)
        yield ks, state, created, csvs, document
    finally:
        ks.stop()
        cs.stop()


@pytest.fixture(scope="module")
def greedy_session(tmp_path_factory):
    with _served(tmp_path_factory) as session:
        yield session


def _plan() -> SessionPlan:
    # The servers build a request's plan with noise "auto" (wire.SessionCreate's default).
    return SessionPlan.build(PlanRequest(Schema.from_dict(SCHEMA), EPSILON, 1e-6, 1000,
                                         parameter_set="test-small", selection="noisy-greedy",
                                         noise="auto"))


def _ks_scores(state, sid) -> list[int]:
    with sqlite3.connect(state / "keyserver" / "keyserver.sqlite") as conn:
        row = conn.execute("SELECT scores_json FROM noisy_greedy WHERE session_id = ?",
                           (sid,)).fetchone()
    return json.loads(row[0])


def _chosen(document) -> list[tuple[int, int]]:
    return [tuple(p) for p in document.accounting["selection"]["selected_pairs"]]


def test_selection_is_charged_once_and_the_release_holds_the_chosen_pairs(greedy_session):
    _, _, created, _, document = greedy_session
    plan = _plan()
    assert SessionPlan.from_public(created.session).releases == plan.releases
    selection = document.accounting["selection"]
    assert selection["mode"] == "noisy-greedy"
    chosen = _chosen(document)
    assert chosen and len(set(chosen)) == len(chosen)
    rho = {e["release"]: Fraction(e["rho"]) for e in document.accounting["entries"]}
    assert list(rho) == ["one_way", "selection", "two_way"]
    assert rho["selection"] == plan.selection.rho_charged == Fraction(selection["rho_charged"])
    assert rho["two_way"] == plan.release("two_way").rho
    assert Fraction(selection["noise_sigma2"]) == Fraction(3) / (2 * rho["selection"])
    two_way = next(r for r in document.releases if r.release == "two_way")
    names = [c["name"] for c in SCHEMA["columns"]]
    assert sorted(tuple(m.attrs) for m in two_way.marginals.values()) == sorted(
        (names[a], names[b]) for a, b in chosen)
    total, spent = (Fraction(document.accounting[k]) for k in ("rho_total", "rho_spent"))
    assert spent <= total and spent > total * Fraction(999_999, 1_000_000)
    # The failure terms (the split release's worst case included) are reserved out of delta.
    assert created.session.delta_conversion < document.accounting["delta_total"]
    assert document.accounting["delta_total"] <= created.session.delta


def test_the_two_way_release_is_split_and_joint_with_the_shapes_the_plan_gives(greedy_session):
    _, state, created, _, document = greedy_session
    plan = SessionPlan.from_public(created.session)
    public_two = next(r for r in created.session.releases if r.name == "two_way")
    assert public_two.noise == "joint" and public_two.allocation == "privsyn"
    resolved = plan.resolve(plan.release("two_way"), _chosen(document))
    assert resolved.parts, "at eps 1 every selection of this schema is joint"
    two_way = next(r for r in document.releases if r.release == "two_way")
    assert two_way.noise == "joint" and two_way.allocation == "privsyn"
    assert two_way.sigma2_per_server == "0" and two_way.joint is None
    for key, marginal in two_way.marginals.items():
        part = next(p for p in resolved.parts if key in p.marginal_keys)
        assert JointNoiseShape(marginal.joint.uniforms, marginal.joint.bits) == part.joint
        assert Fraction(marginal.per_count_variance) == part.joint.variance
    assert Fraction(two_way.per_count_variance) == plan.per_count_variance(resolved)
    assert plan.per_count_variance(resolved) < 2 * resolved.sigma2  # below the even release
    assert document.noise["kind"] == "joint"
    summary = document.noise["releases"]["two_way"]
    assert summary["allocation"] == "privsyn"
    assert sum(len(g["marginals"]) for g in summary["groups"].values()) == len(
        _chosen(document))
    assert len(summary["groups"]) == len(resolved.parts)
    assert document.noise["per_count_variance"]["two_way"] == float(
        plan.per_count_variance(resolved))
    for part in resolved.parts:  # and each group's own
        assert document.noise["per_count_variance"][part.name] == float(part.joint.variance)
    # The compute server stated the noise it put in; the key server decrypted on agreement.
    with sqlite3.connect(state / "keyserver" / "keyserver.sqlite") as conn:
        row = conn.execute("SELECT manifest_json FROM manifests WHERE session_id = ? AND "
                           "release = 'two_way'", (created.session.session_id,)).fetchone()
    assert json.loads(row[0])["noise"] == plan.noise_statement(resolved)
    # Synthesis weighs each pair by its own group's variance.
    _, noisy = marginals_from_release(document)
    by_attrs = {m.attrs: m.variance for m in noisy if len(m.attrs) == 2}
    index = {n: i for i, n in enumerate(Schema.from_dict(SCHEMA).names)}
    for marginal in two_way.marginals.values():
        attrs = tuple(index[a] for a in marginal.attrs)
        assert by_attrs[attrs] == float(Fraction(marginal.per_count_variance))


def _pit(error: int, shape: JointNoiseShape, u: float) -> float:
    """The randomised probability integral transform of an integer sample: uniform on (0, 1)
    exactly when the sample follows the shape's pmf."""
    counts = shape.counts()
    total = sum(counts)
    index = int(error) + shape.span // 2
    below = sum(counts[:index])
    return (below + u * counts[index]) / total


def test_published_minus_true_follows_each_counts_stated_shape(greedy_session):
    """Every published count of both releases (the 1-way's shape, each pair's group shape):
    within the hard bound, and the randomised PIT of the errors is uniform (chi-square on
    equal bins of >= 5 expected, alpha 1e-6). Few counts (35), so the test is weak in power
    but exact in size; ``tests/test_joint_noise.py`` tests the mixed-shape law at scale."""
    _, _, created, csvs, document = greedy_session
    schema = Schema.from_dict(SCHEMA)
    plan = SessionPlan.from_public(created.session)
    exact = true_counts(csvs)
    index = {n: i for i, n in enumerate(schema.names)}
    rng = np.random.default_rng(3)  # the transform's tie-breaking only
    transformed = []
    for release in document.releases:
        for marginal in release.marginals.values():
            joint = marginal.joint or release.joint
            shape = JointNoiseShape(joint.uniforms, joint.bits)
            slot = plan.layout.slot(tuple(index[a] for a in marginal.attrs))
            errors = np.array(marginal.counts) - exact[slot.offset:slot.offset + slot.size]
            assert np.abs(errors).max() <= shape.span // 2  # no wrap, no mask left in
            transformed.extend(_pit(e, shape, rng.random()) for e in errors)
    bins = len(transformed) // 5
    observed = np.bincount(np.minimum((np.array(transformed) * bins).astype(int), bins - 1),
                           minlength=bins)
    assert stats.chisquare(observed).pvalue > ALPHA


def test_noisy_scores_are_indif_plus_noise_and_greedy_picks_from_them(greedy_session):
    ks, state, created, csvs, document = greedy_session
    sid = created.session.session_id
    plan = _plan()
    shape = plan.selection.noisy_shape(plan.used_chunk_sizes())
    # The scores are joint: the public record and the release document say so.
    assert shape.joint is not None and plan.selection.score_joint == shape.joint
    public = created.session.selection
    assert public.score_noise == "joint" and plan.selection.score_variance == shape.joint.variance
    assert (public.joint.uniforms, public.joint.bits) == (shape.joint.uniforms, shape.joint.bits)
    selection = document.accounting["selection"]
    assert selection["score_noise"] == "joint" and selection["noise_tail_delta"] == 0
    assert selection["delta_terms"]["joint_scores"] >= plan.selection.joint_failure > 0
    # The demo's report states the scores' noise as the document does.
    summary = _selection_summary(
        wire.NoisyGreedySelectionAccounting.model_validate(selection))["score_noise"]
    assert summary == {"kind": "joint", "uniforms": shape.joint.uniforms,
                       "bits": shape.joint.bits,
                       "per_score_variance": float(shape.joint.variance)}
    one_way = next(r for r in document.releases if r.release == "one_way")
    pairs = [tuple(p) for p in created.session.pairs]
    expected = expected_counts_for_pairs(
        [np.asarray(m.counts, dtype=float) for m in one_way.marginals.values()], pairs,
        created.session.selection.max_rows)
    counts = true_counts(csvs)
    truth = [int(np.abs(counts[s.offset:s.offset + s.size] - expected[s.attrs]).sum())
             for s in plan.layout.two_way]
    # The key server's selection client, loaded as an auditor would (the service has no
    # path that returns a score).
    keys_dir = state / "keyserver" / "sessions" / sid
    client = fhe.Client.load(keys_dir / "selection_client.zip")
    client.keys.load_from_bytes((keys_dir / "selection_keys.bin").read_bytes())
    stored = unpack_blobs((state / "computeserver" / "sessions" / sid / "outputs"
                           / "noisy_scores.bin").read_bytes())
    decrypted = [decode_score(np.asarray(client.decrypt(
        fhe.Value.deserialize(b), function_name="joint")).tolist(), shape) for b in stored]
    # The encrypted sum is InDif + Z, |Z| <= span/2 always (a bounded noise, no tail).
    for noisy, score in zip(decrypted, truth):
        assert abs(noisy - score) <= shape.joint.span // 2
    # The key server's recorded scores are exactly what it decrypted: no noise of its own.
    ks_noisy = _ks_scores(state, sid)
    assert ks_noisy == decrypted
    # Its bits: one set per pair, served identically on a retry.
    peer = {"Authorization": f"Bearer {(state / 'peer.token').read_text().strip()}"}
    url = f"{ks.url}/peer/sessions/{sid}/selection/score-bits"
    first = httpx.get(url, headers=peer, timeout=120)
    assert first.status_code == 200 and len(unpack_blobs(first.content)) == len(pairs)
    assert httpx.get(url, headers=peer, timeout=120).content == first.content
    cells = {s.attrs: s.size for s in plan.layout.two_way}
    assert greedy_select_allocated(dict(zip(pairs, ks_noisy)), cells,
                                   plan.release("two_way").rho) == _chosen(document)


def test_replay_returns_the_decision_and_other_scores_are_refused(greedy_session):
    ks, state, created, _, document = greedy_session
    sid = created.session.session_id
    peer = {"Authorization": f"Bearer {(state / 'peer.token').read_text().strip()}"}
    body = (state / "computeserver" / "sessions" / sid / "outputs"
            / "noisy_scores.bin").read_bytes()
    url = f"{ks.url}/peer/sessions/{sid}/selection/noisy-scores"
    same = httpx.put(url, content=body, headers=peer)
    assert same.status_code == 200
    assert [list(p) for p in json.loads(same.content)["pairs"]] == [
        list(p) for p in document.accounting["selection"]["selected_pairs"]]
    blobs = unpack_blobs(body)
    other = httpx.put(url, content=pack_blobs(blobs[1:] + blobs[:1]), headers=peer)
    assert other.status_code == 409
    operator = (state / "keyserver" / "operator.token").read_text().strip()
    ledger = httpx.get(f"{ks.url}/sessions/{sid}/ledger",
                       headers={"Authorization": f"Bearer {operator}"}).json()
    assert [e["release"] for e in ledger["entries"]] == ["one_way", "selection", "two_way"]
    assert ledger["rho_spent"] == document.accounting["rho_spent"]
    # The key server's bits for the split release: one set per chunk, served identically.
    coins = f"{ks.url}/peer/sessions/{sid}/releases/two_way/coins/1"
    first = httpx.get(coins, headers=peer, timeout=120)
    assert first.status_code == 200 and first.content == httpx.get(
        coins, headers=peer, timeout=120).content
