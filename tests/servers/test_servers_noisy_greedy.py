"""A whole session with the noisy-greedy selection through both servers over HTTP, at eps 1
with the servers' defaults (noise auto, the 1-way top-up): the key server charges exactly the
plan's rho for the selection, the scores carry one joint noise (the public record says so,
with its shape), the compute server's encrypted noisy scores decrypt to InDif plus that noise
within its hard bound, the chosen pairs are the plan's greedy rule (PrivSyn's, the 1-ways in
its allocation) on the key server's recorded scores (the decrypted value, nothing added), the
key server's score bits are served identically on a retry, a replay returns the recorded
pairs and other ciphertexts are refused; the 2-way release holds exactly the chosen pairs and
the topped-up 1-ways of ``SessionPlan.resolve``, split by PrivSyn's allocation with one joint
noise per group, the shapes both servers compute from the public plan and the published pairs
(the compute server's statement of the noise matches the key server's), its rho charged once;
published - true follows each count's stated shape exactly; and synthesis reads each
topped-up 1-way as one measurement, its two combined by inverse variance.

The session has a fourth owner who never uploads: its deadline passes while it prepares, and
the third upload reaches its quorum of three and closes it (``keyserver.uploads.close_due``).
So P2's mask sums, the selection's inputs and both releases run over the absent owner's
zeros, and every check above is against the three present owners' union; the release names
who contributed, and the absent owner's late upload is refused by both servers
(``tests/servers/test_absent_owner.py`` checks the deadline's wait below the quorum and the
operator's close). One session serves every test here (it is the suite's dearest
fixture)."""

import csv
import json
import sqlite3
import time
from fractions import Fraction
from pathlib import Path

import httpx
import numpy as np
import pytest
from concrete import fhe
from scipy import stats

from feddpsyn.clients.agent import AgentError, ClientAgent
from feddpsyn.common import wire
from feddpsyn.crypto.blobs import pack_blobs, unpack_blobs
from feddpsyn.crypto.noisy_scores import decode_score
from feddpsyn.demo import _selection_summary, start_servers
from feddpsyn.dp.joint_noise_accounting import JointNoiseShape
from feddpsyn.dp.pair_selection import expected_counts_for_pairs
from feddpsyn.keyserver.keys import SessionKeys
from feddpsyn.params.plan_request import PlanRequest
from feddpsyn.params.schema import Schema
from feddpsyn.params.session_plan import SessionPlan
from feddpsyn.synthesis import marginals_from_release
from tests.served import run_session
from tests.servers.test_servers import true_counts

EPSILON = 1.0
ALPHA = 1e-6
CLIENTS = ["alice", "bob", "carol"]  # the owners who upload
ABSENT = "dave"  # in the session, never uploads
# An 8-valued column and two binary ones: at eps 1 every selection tops up the 8-cell 1-way
# (``tests/params/test_one_way_topup.py`` enumerates them).
SCHEMA = {"name": "topup", "columns": [
    {"name": "grade", "type": "categorical", "i2s": list("abcdefgh")},
    {"name": "sex", "type": "categorical", "i2s": ["F", "M"]},
    {"name": "smoker", "type": "categorical", "i2s": ["no", "yes"]}]}


def write_dependent_csvs(directory: Path) -> dict[str, Path]:
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


# P2's k is 13 at this bound, 4 bits above what the 1-ways' tail needs: the module compiles
# narrower widths and P2 runs its chunks at them (params.indif_widths).
MAX_ROWS = 3000


def session_request() -> wire.SessionCreate:
    # The selection's defaults: the 1-way top-up is on for noisy-greedy. The deadline passes
    # while the session prepares; the quorum closes it at the third upload.
    return wire.SessionCreate(schema=SCHEMA, clients=[*CLIENTS, ABSENT],
                              parameter_set="test-small",
                              budget=wire.BudgetSpec(epsilon=EPSILON, delta=1e-6),
                              max_rows=MAX_ROWS, quorum=len(CLIENTS),
                              upload_deadline=time.time() + 1,
                              selection=wire.SelectionRequest(mode="noisy-greedy"))


@pytest.fixture(scope="module")
def greedy_session(tmp_path_factory):
    csvs = write_dependent_csvs(tmp_path_factory.mktemp("csv"))
    state = tmp_path_factory.mktemp("state")
    ks, cs = start_servers(state)
    try:
        operator = (state / "keyserver" / "operator.token").read_text().strip()
        created, document = run_session(ks, cs, operator, session_request(), csvs,
                                        tmp_path_factory.mktemp("agents"), timeout=600)
        yield ks, cs, state, created, csvs, document
    finally:
        ks.stop()
        cs.stop()


def test_the_absent_owner_is_left_out_and_refused(greedy_session, tmp_path):
    ks, cs, _, created, csvs, document = greedy_session
    assert document.contributors == CLIENTS and document.absent == [ABSENT]
    sid = created.session.session_id
    with (ClientAgent(ks.url, cs.url, sid, ABSENT, created.client_tokens[ABSENT],
                      tmp_path) as agent,
          pytest.raises(AgentError, match="was left out of session")):
        agent.upload(csvs[CLIENTS[0]])
    late = httpx.put(f"{cs.url}/sessions/{sid}/clients/{ABSENT}/seed",
                     json={"seed_hex": "11" * 32}, timeout=30,
                     headers={"Authorization": f"Bearer {created.client_tokens[ABSENT]}"})
    assert late.status_code == 409 and "left out" in late.json()["detail"]


def _plan() -> SessionPlan:
    # The servers build a request's plan with noise "auto" (wire.SessionCreate's default).
    return SessionPlan.build(PlanRequest(Schema.from_dict(SCHEMA), EPSILON, 1e-6, MAX_ROWS,
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
    _, _, state, created, _, document = greedy_session
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
    assert sorted(tuple(m.attrs) for m in two_way.marginals.values() if len(m.attrs) == 2) \
        == sorted((names[a], names[b]) for a, b in chosen)
    # The option is public, and the key server's rule is the plan's (the 1-ways in it).
    assert created.session.one_way_topup and plan.one_way_topup and plan.accounting == "pld"
    pairs = [slot.attrs for slot in plan.layout.two_way]
    scores = _ks_scores(state, created.session.session_id)
    assert plan.select_pairs(dict(zip(pairs, scores, strict=True))) == chosen
    total, spent = (Fraction(document.accounting[k]) for k in ("rho_total", "rho_spent"))
    assert spent <= total and spent > total * Fraction(999_999, 1_000_000)
    # The failure terms (the split release's worst case included) are reserved out of delta.
    assert created.session.delta_conversion < document.accounting["delta_total"]
    assert document.accounting["delta_total"] <= created.session.delta


def test_the_two_way_release_is_split_and_joint_with_the_shapes_the_plan_gives(greedy_session):
    _, _, state, created, _, document = greedy_session
    plan = SessionPlan.from_public(created.session)
    public_two = next(r for r in created.session.releases if r.name == "two_way")
    assert public_two.noise == "joint" and public_two.allocation == "privsyn"
    resolved = plan.resolve(plan.release("two_way"), _chosen(document))
    assert resolved.parts, "at eps 1 every selection of this schema is joint"
    tops = [p for p in resolved.parts if p.name.startswith("two_way/one_way/")]
    assert tops, "every selection of this schema tops up the 8-cell 1-way at eps 1"
    assert sum(p.rho for p in resolved.parts) == resolved.rho
    two_way = next(r for r in document.releases if r.release == "two_way")
    assert set(two_way.marginals) == set(resolved.marginal_keys)
    names = Schema.from_dict(SCHEMA).names
    assert {tuple(m.attrs) for m in two_way.marginals.values()} == {
        tuple(names[a] for a in slot.attrs) for slot in plan.slots_of(resolved)}
    assert two_way.noise == "joint" and two_way.allocation == "privsyn"
    assert two_way.sigma2_per_server == "0" and two_way.joint is None
    for key, marginal in two_way.marginals.items():
        part = next(p for p in resolved.parts if key in p.marginal_keys)
        assert JointNoiseShape(marginal.joint.uniforms, marginal.joint.bits,
                               marginal.joint.wider) == part.joint
        assert Fraction(marginal.per_count_variance) == part.joint.variance
    assert Fraction(two_way.per_count_variance) == plan.per_count_variance(resolved)
    assert document.noise["kind"] == "joint"
    summary = document.noise["releases"]["two_way"]
    assert summary["allocation"] == "privsyn"
    assert sum(len(g["marginals"]) for g in summary["groups"].values()) == len(
        resolved.marginal_keys)
    assert set(summary["groups"]) == {p.name for p in resolved.parts}
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
        if len(marginal.attrs) == 2:
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
    """Every published count of both releases (the 1-way's shape, each pair's and each
    top-up's group shape, the topped-up 1-ways twice): within the hard bound, and the
    randomised PIT of the errors is uniform (chi-square on equal bins of >= 5 expected,
    alpha 1e-6). Few counts, so the test is weak in power but exact in size;
    ``tests/crypto/test_joint_noise.py`` tests the mixed-shape law at scale."""
    _, _, _, created, csvs, document = greedy_session
    schema = Schema.from_dict(SCHEMA)
    plan = SessionPlan.from_public(created.session)
    exact = true_counts(csvs, SCHEMA)
    index = {n: i for i, n in enumerate(schema.names)}
    rng = np.random.default_rng(3)  # the transform's tie-breaking only
    transformed = []
    for release in document.releases:
        for marginal in release.marginals.values():
            joint = marginal.joint or release.joint
            shape = JointNoiseShape(joint.uniforms, joint.bits, joint.wider)
            slot = plan.layout.slot(tuple(index[a] for a in marginal.attrs))
            errors = np.array(marginal.counts) - exact[slot.offset:slot.offset + slot.size]
            assert np.abs(errors).max() <= shape.span // 2  # no wrap, no mask left in
            transformed.extend(_pit(e, shape, rng.random()) for e in errors)
    bins = len(transformed) // 5
    observed = np.bincount(np.minimum((np.array(transformed) * bins).astype(int), bins - 1),
                           minlength=bins)
    assert stats.chisquare(observed).pvalue > ALPHA


def test_noisy_scores_are_indif_plus_noise_and_greedy_picks_from_them(greedy_session):
    ks, _, state, created, csvs, document = greedy_session
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
    counts = true_counts(csvs, SCHEMA)
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
    assert plan.select_pairs(dict(zip(pairs, ks_noisy, strict=True))) == _chosen(document)


def test_replay_returns_the_decision_and_other_scores_are_refused(greedy_session):
    ks, _, state, created, _, document = greedy_session
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
    # The split release is packed (``params.release_chunks``): its cells, the kept pairs' and
    # the topped-up 1-ways', C at a time. The key server's bits: one set per packed chunk,
    # served identically; none past the last.
    plan = SessionPlan.from_public(created.session)
    resolved = plan.resolve(plan.release("two_way"), _chosen(document))
    parts = plan.release_chunks(resolved)
    assert [p.index for p in parts] == list(range(len(parts))) and all(p.packed for p in parts)
    for part in parts:
        url = f"{ks.url}/peer/sessions/{sid}/releases/two_way/coins/{part.index}"
        first = httpx.get(url, headers=peer, timeout=120)
        assert first.status_code == 200
        assert httpx.get(url, headers=peer, timeout=120).content == first.content
    beyond = f"{ks.url}/peer/sessions/{sid}/releases/two_way/inputs/{len(parts)}"
    assert httpx.get(beyond, headers=peer).status_code == 404


def test_packed_inputs_decrypt_to_the_clients_masked_values(greedy_session):
    """A packed chunk's inputs, as the key server serves them to its peer, decrypt to each
    client's masked values at the chunk's cells (0 on its padding), in the clients' order;
    only the peer gets them, and a fixed release has none."""
    ks, _, state, created, _, document = greedy_session
    sid = created.session.session_id
    peer = {"Authorization": f"Bearer {(state / 'peer.token').read_text().strip()}"}
    plan = SessionPlan.from_public(created.session)
    resolved = plan.resolve(plan.release("two_way"), _chosen(document))
    directory = state / "keyserver" / "sessions" / sid
    owners = created.session.clients  # the absent owner's values are zeros
    keys = SessionKeys.load(directory, len(owners), joint=True)
    base = f"{ks.url}/peer/sessions/{sid}/releases"
    for part in plan.release_chunks(resolved):
        response = httpx.get(f"{base}/two_way/inputs/{part.index}", headers=peer, timeout=60)
        assert response.status_code == 200
        blobs = unpack_blobs(response.content, expected=len(owners))
        for client, blob in zip(owners, blobs, strict=True):
            masked = np.frombuffer((directory / "masked" / f"{client}.npy").read_bytes(),
                                   dtype=np.int64)
            want = np.zeros(plan.parameters.chunk_cells, dtype=np.int64)
            want[part.places] = masked[part.cells]
            assert np.array_equal(keys.decrypt_value(keys.parse(blob)), want)
    assert httpx.get(f"{base}/two_way/inputs/0").status_code in (401, 403)
    assert httpx.get(f"{base}/one_way/inputs/0", headers=peer).status_code == 404


def test_synthesis_combines_the_two_measurements(greedy_session):
    _, _, _, created, _, document = greedy_session
    plan = SessionPlan.from_public(created.session)
    one_way = next(r for r in document.releases if r.release == "one_way")
    two_way = next(r for r in document.releases if r.release == "two_way")
    _, noisy = marginals_from_release(document)
    assert len(noisy) == len(plan.layout.one_way) + len(_chosen(document))
    index = {n: i for i, n in enumerate(Schema.from_dict(SCHEMA).names)}
    by_attrs = {m.attrs: m for m in noisy}
    first_variance = float(Fraction(one_way.per_count_variance))
    topped = 0
    for key, marginal in two_way.marginals.items():
        if len(marginal.attrs) != 1:
            continue
        topped += 1
        second_variance = float(Fraction(marginal.per_count_variance))
        w1, w2 = 1 / first_variance, 1 / second_variance
        combined = by_attrs[(index[marginal.attrs[0]],)]
        assert combined.variance == pytest.approx(1 / (w1 + w2))
        expected = (w1 * np.array(one_way.marginals[key].counts)
                    + w2 * np.array(marginal.counts)) / (w1 + w2)
        assert combined.counts.ravel() == pytest.approx(expected)
    assert topped
