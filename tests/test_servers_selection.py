"""A whole session with the private selection (em) through both servers over HTTP: P2's
encrypted scores decrypt to the plaintext InDif, the rounds choose distinct pairs, the 2-way
release holds exactly them, every round is charged once, and rounds cannot be replayed."""

import json
from fractions import Fraction

import httpx
import numpy as np
import pytest
from concrete import fhe

from clients.agent import ClientAgent
from crypto.blobs import unpack_blobs
from dp.pair_selection import expected_counts_for_pairs
from params.parameter_sets import DEFAULT_SELECTION_SET
from tests.test_servers import (CLIENTS, SCHEMA, create_session, served_session, start_servers,
                                true_counts, write_client_csvs)

ROUNDS = 2


@pytest.fixture(scope="module")
def selected_session(tmp_path_factory):
    with served_session(tmp_path_factory, seed=4, timeout=300, epsilon=5.0, selection="em",
                        rounds=ROUNDS) as session:
        yield session


def test_selected_pairs_are_released_and_every_round_is_charged(selected_session):
    _, _, created, _, document = selected_session
    selection = document.accounting["selection"]
    chosen = [tuple(p) for p in selection["selected_pairs"]]
    assert len(chosen) == ROUNDS == len(set(chosen))
    two_way = next(r for r in document.releases if r.release == "two_way")
    names = SCHEMA["columns"]
    assert sorted(tuple(m.attrs) for m in two_way.marginals.values()) == sorted(
        (names[a]["name"], names[b]["name"]) for a, b in chosen)
    entries = [e["release"] for e in document.accounting["entries"]]
    assert entries == ["one_way"] + [f"select-{t}" for t in range(ROUNDS)] + ["two_way"]
    rho = {e["release"]: Fraction(e["rho"]) for e in document.accounting["entries"]}
    assert rho["select-0"] == Fraction(created.session.selection.rho_round)
    # The widths were derived from a named, versioned set, and the session says which.
    assert created.session.selection.parameter_set["name"] == DEFAULT_SELECTION_SET
    total, spent = (Fraction(document.accounting[k]) for k in ("rho_total", "rho_spent"))
    assert spent <= total and spent > total * Fraction(999_999, 1_000_000)
    # The selection's failure terms are reserved out of the requested delta, not added.
    assert created.session.delta_conversion < document.accounting["delta_total"]
    assert document.accounting["delta_total"] <= created.session.delta
    terms = created.session.selection.delta_terms
    assert set(terms) == {"fhe", "row_bound"} and all(v > 0 for v in terms.values())
    # fhe_delta counts the compiled module's bootstraps, at most the plan's structural bound.
    assert created.session.selection.bootstraps > 0


def test_encrypted_scores_decrypt_to_the_plaintext_indif(selected_session):
    _, state, created, csvs, document = selected_session
    sid = created.session.session_id
    one_way = next(r for r in document.releases if r.release == "one_way")
    pairs = [tuple(p) for p in created.session.pairs]
    counts = true_counts(csvs)
    sizes = [len(c["i2s"]) if "i2s" in c else c["bins"] for c in SCHEMA["columns"]]
    expected = expected_counts_for_pairs(
        [np.asarray(m.counts, dtype=float) for m in one_way.marginals.values()], pairs,
        created.session.selection.max_rows)
    # The key server's selection client, loaded here as an auditor would: the service itself
    # has no path that decrypts a score.
    keys_dir = state / "keyserver" / "sessions" / sid
    client = fhe.Client.load(keys_dir / "selection_client.zip")
    client.keys.load_from_bytes((keys_dir / "selection_keys.bin").read_bytes())
    stored = unpack_blobs((state / "computeserver" / "sessions" / sid / "outputs"
                           / "selection_candidates.bin").read_bytes())
    offset = sum(sizes)  # 2-way cells follow the 1-ways in the layout
    for (a, b), blob in zip(pairs, stored):
        size = sizes[a] * sizes[b]
        truth = counts[offset:offset + size]
        offset += size
        digits = np.asarray(client.decrypt(fhe.Value.deserialize(blob), function_name="add"))
        score = sum(int(d) << j for j, d in enumerate(digits))
        assert score == int(np.abs(truth - expected[(a, b)]).sum())


def test_a_round_cannot_be_replayed_with_other_outputs(selected_session):
    ks, state, created, _, document = selected_session
    sid = created.session.session_id
    peer = {"Authorization": f"Bearer {(state / 'peer.token').read_text().strip()}"}
    outputs = state / "computeserver" / "sessions" / sid / "outputs"
    same = httpx.put(f"{ks.url}/peer/sessions/{sid}/selection/rounds/0",
                     content=(outputs / "select-0.bin").read_bytes(), headers=peer)
    assert same.status_code == 200
    assert list(json.loads(same.content)["pair"]) == list(
        document.accounting["selection"]["selected_pairs"][0])
    other = httpx.put(f"{ks.url}/peer/sessions/{sid}/selection/rounds/0",
                      content=(outputs / "select-1.bin").read_bytes(), headers=peer)
    assert other.status_code == 409
    beyond = httpx.post(f"{ks.url}/peer/sessions/{sid}/selection/rounds/{ROUNDS}/randomness",
                        headers=peer)
    assert beyond.status_code == 404


def test_a_union_above_max_rows_is_refused_before_any_selection_charge(tmp_path_factory):
    """The three clients hold 210 rows; with max_rows = 150 a score could wrap modulo the
    compiled widths, so the selection must never run: after the 1-way release the compute
    server blocks the session with the reason, the key server refuses the selection's inputs,
    and its ledger holds the 1-way release only."""
    import time

    state = tmp_path_factory.mktemp("state")
    ks, cs = start_servers(state)
    try:
        operator = (state / "keyserver" / "operator.token").read_text().strip()
        created = create_session(ks.url, operator, epsilon=5.0, selection="em", rounds=1,
                                 max_rows=150)
        sid = created.session.session_id
        csvs = write_client_csvs(tmp_path_factory.mktemp("csv"))
        agents = tmp_path_factory.mktemp("agents")
        for client in CLIENTS:
            with ClientAgent(ks.url, cs.url, sid, client, created.client_tokens[client],
                             agents) as agent:
                agent.upload(csvs[client])
        with ClientAgent(ks.url, cs.url, sid, CLIENTS[0], created.client_tokens[CLIENTS[0]],
                         agents) as agent:
            deadline = time.time() + 240
            while time.time() < deadline and agent.compute_status().state != "blocked":
                time.sleep(0.5)
            status = agent.compute_status()
        assert status.state == "blocked"
        assert "max_rows = 150" in status.detail and "selection refused" in status.detail
        peer = {"Authorization": "Bearer " + (state / "peer.token").read_text().strip()}
        refused = httpx.get(f"{ks.url}/peer/sessions/{sid}/selection/inputs", headers=peer)
        assert refused.status_code == 409 and "max_rows = 150" in refused.text
        ledger = httpx.get(f"{ks.url}/sessions/{sid}/ledger",
                           headers={"Authorization": f"Bearer {operator}"}).json()
        assert [e["release"] for e in ledger["entries"]] == ["one_way"]
    finally:
        ks.stop()
        cs.stop()
