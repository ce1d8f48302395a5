"""A whole session with the private selection (em) through both servers over HTTP: P2's
encrypted scores decrypt to the plaintext InDif, the rounds choose distinct pairs, the 2-way
release holds exactly them, every round is charged once, and rounds cannot be replayed.

The session's three candidates run P3 by candidate batches (two batches of two, one padding
position: ``params.selection_plan.candidate_batches``): every round's stored outputs
decrypt to the one-hot of the pair the key server recorded, and the served module's batched
round, run again here on the served scores with known randomness, decrypts to
``select_plaintext`` of the decrypted scores (a few seconds)."""

import json
import random
from dataclasses import replace
from fractions import Fraction

import httpx
import numpy as np
import pytest
from concrete import fhe

from clients.agent import ClientAgent
from computeserver.executor import Circuit, InProcessExecutor
from computeserver.selection import batched_select
from crypto.blobs import unpack_blobs
from crypto.private_selection import batch_names
from crypto.selection_batches import BatchLayout
from crypto.selection_randomness import batch_randomness, random_share
from crypto.tfhe_permute_and_flip import select_plaintext, thresholds
from dp.pair_selection import expected_counts_for_pairs
from params.parameter_sets import DEFAULT_SELECTION_SET
from params.session_plan import SessionPlan
from tests.test_servers import (
    CLIENTS,
    SCHEMA,
    create_session,
    served_session,
    start_servers,
    true_counts,
    write_client_csvs,
)

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


def auditor_client(state, sid: str):
    """The key server's selection client, loaded as an auditor would (the service itself has
    no path that decrypts a score)."""
    keys_dir = state / "keyserver" / "sessions" / sid
    client = fhe.Client.load(keys_dir / "selection_client.zip")
    client.keys.load_from_bytes((keys_dir / "selection_keys.bin").read_bytes())
    return client


def test_batched_rounds_decrypt_to_their_picks_and_to_the_model(selected_session):
    _, state, created, _, document = selected_session
    sid = created.session.session_id
    plan = SessionPlan.from_public(created.session)
    layout = plan.selection.batches
    assert layout == BatchLayout(candidates=3, size=2)
    names = batch_names(layout)
    client = auditor_client(state, sid)
    pairs = [tuple(p) for p in created.session.pairs]
    chosen = [tuple(p) for p in document.accounting["selection"]["selected_pairs"]]
    outputs = state / "computeserver" / "sessions" / sid / "outputs"
    for round_, pair in enumerate(chosen):
        hot = [int(np.asarray(client.decrypt(fhe.Value.deserialize(blob),
                                             function_name=names["mask"])).ravel()[0])
               for blob in unpack_blobs((outputs / f"select-{round_}.bin").read_bytes())]
        assert hot == [int(p == pair) for p in pairs]
    # The served module's batched round on the served scores, with randomness known here:
    # a second round's inputs (the first pick inactive), in an order of the test's choosing.
    stored = unpack_blobs((outputs / "selection_candidates.bin").read_bytes())
    scores = [sum(int(d) << j for j, d in enumerate(np.asarray(client.decrypt(
        fhe.Value.deserialize(blob), function_name="add")))) for blob in stored]
    shape = plan.selection.shape
    order = [2, 0, 1]
    active = np.array([int(pairs[i] != chosen[0]) for i in order] + [0])
    randbits = random.Random(16).getrandbits
    r_ks, priority = batch_randomness(shape, layout, randbits)
    r_cs = random_share(replace(shape, candidates=layout.positions), randbits)
    n, shares = layout.size, []
    for b in range(layout.count):
        args = [None] * (n + 6)
        args[n + 2], args[n + 3] = r_ks[:, layout.batch(b)], priority[:, layout.batch(b)]
        encrypted = client.encrypt(*args, function_name=names["pick"])
        shares += [encrypted[n + 2].serialize(), encrypted[n + 3].serialize()]
    directory = state / "computeserver" / "sessions" / sid
    circuit = Circuit.of_files(sid, directory / "selection_server.zip",
                               directory / "selection_evaluation_keys.bin")
    out = batched_select(InProcessExecutor(), circuit, layout, [stored[i] for i in order],
                         active, shares, r_cs)
    hot = [int(np.asarray(client.decrypt(fhe.Value.deserialize(o),
                                         function_name=names["mask"])).ravel()[0])
           for o in out]
    digits = np.array([[(scores[i] >> j) & 1 for j in range(shape.score_bits)] for i in order])
    model = select_plaintext(digits, active[:3], r_ks[0, :3], r_cs[0, :3], shape,
                             thresholds(shape, plan.selection.step.epsilon), priority[0, :3])
    assert hot == model.tolist() and sum(hot) == 1


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
