"""A whole session with the noisy-greedy selection through both servers over HTTP: the key
server charges exactly the plan's rho for it, the compute server's encrypted noisy scores
decrypt to InDif plus a small noise, the chosen pairs are PrivSyn's greedy rule on the key
server's doubly noised scores, the 2-way release holds exactly them, a replay returns the
recorded pairs and other ciphertexts are refused."""

import json
import sqlite3
from fractions import Fraction

import httpx
import numpy as np
import pytest
from concrete import fhe

from crypto.blobs import pack_blobs, unpack_blobs
from crypto.noisy_scores import decode_noisy_score
from dp.pair_selection import expected_counts_for_pairs, greedy_select
from params.schema import Schema
from params.session_plan import SessionPlan
from tests.test_servers import SCHEMA, served_session, true_counts

EPSILON = 5.0  # (1 + e^eps) x the bootstraps x p_error must fit the delta reserve


@pytest.fixture(scope="module")
def greedy_session(tmp_path_factory):
    with served_session(tmp_path_factory, seed=7, timeout=240, epsilon=EPSILON, selection="noisy-greedy") as session:
        yield session


def _plan() -> SessionPlan:
    # The servers build a request's plan with noise "auto" (wire.SessionCreate's default).
    return SessionPlan.build(Schema.from_dict(SCHEMA), None, EPSILON, 1e-6, None, "test-small",
                             1000, selection="noisy-greedy", noise="auto")


def _ks_scores(state, sid) -> list[int]:
    with sqlite3.connect(state / "keyserver" / "keyserver.sqlite") as conn:
        row = conn.execute("SELECT scores_json FROM noisy_greedy WHERE session_id = ?",
                           (sid,)).fetchone()
    return json.loads(row[0])


def test_selection_is_charged_once_and_the_release_holds_the_chosen_pairs(greedy_session):
    _, _, created, _, document = greedy_session
    plan = _plan()
    selection = document.accounting["selection"]
    assert selection["mode"] == "noisy-greedy"
    chosen = [tuple(p) for p in selection["selected_pairs"]]
    assert chosen and len(set(chosen)) == len(chosen)
    rho = {e["release"]: Fraction(e["rho"]) for e in document.accounting["entries"]}
    assert list(rho) == ["one_way", "selection", "two_way"]
    assert rho["selection"] == plan.selection.rho_charged == Fraction(selection["rho_charged"])
    assert Fraction(selection["noise_sigma2"]) == Fraction(3) / (2 * rho["selection"])
    two_way = next(r for r in document.releases if r.release == "two_way")
    names = [c["name"] for c in SCHEMA["columns"]]
    assert sorted(tuple(m.attrs) for m in two_way.marginals.values()) == sorted(
        (names[a], names[b]) for a, b in chosen)
    # The 2-way noise is set by the number of pairs actually released.
    assert Fraction(two_way.sigma2_per_server) == Fraction(len(chosen)) / (2 * rho["two_way"])
    total, spent = (Fraction(document.accounting[k]) for k in ("rho_total", "rho_spent"))
    assert spent <= total and spent > total * Fraction(999_999, 1_000_000)
    # The failure terms are reserved out of delta: what was asked for is what holds.
    assert created.session.delta_conversion < document.accounting["delta_total"]
    assert document.accounting["delta_total"] <= created.session.delta


def test_noisy_scores_are_indif_plus_noise_and_greedy_picks_from_them(greedy_session):
    _, state, created, csvs, document = greedy_session
    sid = created.session.session_id
    plan = _plan()
    shape = plan.selection.noisy_shape(plan.used_chunk_sizes())
    sigma = float(plan.selection.noise_sigma2) ** 0.5
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
    noised_by_cs = [decode_noisy_score(np.asarray(client.decrypt(
        fhe.Value.deserialize(b), function_name="noise")).tolist(), shape) for b in stored]
    # The encrypted sum is InDif + z_CS (z_CS discrete Gaussian: within 6 sigma at
    # probability 1 - 2e-9 a draw; the offset's 2^B is 40 sigma).
    for noisy, score in zip(noised_by_cs, truth):
        assert abs(noisy - score) <= max(6 * sigma, 1)
    ks_noisy = _ks_scores(state, sid)
    for a, b in zip(ks_noisy, noised_by_cs):
        assert abs(a - b) <= max(6 * sigma, 1)
    chosen = [tuple(p) for p in document.accounting["selection"]["selected_pairs"]]
    cells = {s.attrs: s.size for s in plan.layout.two_way}
    assert greedy_select(dict(zip(pairs, ks_noisy)), cells,
                         plan.release("two_way").rho) == chosen


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
