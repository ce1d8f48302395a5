"""A whole session with the private selection (em) through both servers over HTTP: P2's
encrypted scores decrypt to the plaintext InDif, the rounds choose distinct pairs, the 2-way
release holds exactly them, every round is charged once, and rounds cannot be replayed.

The session's three candidates run P3 by candidate batches (two batches of two, one padding
position: ``params.selection_plan.candidate_batches``): every round's stored outputs
decrypt to the one-hot of the pair the key server recorded, and the served module's batched
round, run again here on the served scores with known randomness, decrypts to
``select_plaintext`` of the decrypted scores (a few seconds).

The session is made by hand, as a deployment makes one: the operator's ``feddpsyn session
create`` and ``session status``, each data owner's ``feddpsyn client upload`` and ``client
release``, then ``synthesize`` (one em session serves the workflow's checks and the
protocol's: compiling and keying an em module is most of a minute)."""

import json
import random
import subprocess
import sys
import time
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import httpx
import numpy as np
import pytest
from concrete import fhe

from feddpsyn.clients.agent import ClientAgent
from feddpsyn.common import wire
from feddpsyn.computeserver.executor import Circuit, InProcessExecutor
from feddpsyn.computeserver.selection import batched_select
from feddpsyn.crypto.blobs import unpack_blobs
from feddpsyn.crypto.private_selection import batch_names
from feddpsyn.crypto.selection_batches import BatchLayout
from feddpsyn.crypto.selection_randomness import batch_randomness, random_share
from feddpsyn.crypto.tfhe_permute_and_flip import select_plaintext, thresholds
from feddpsyn.dp.pair_selection import expected_counts_for_pairs
from feddpsyn.operator_api import wait_ready
from feddpsyn.params.parameter_sets import DEFAULT_SELECTION_SET
from feddpsyn.params.session_plan import SessionPlan
from tests.project.test_demo_and_cli import cli
from tests.served import post_session, running_servers
from tests.servers.test_servers import (
    CLIENTS,
    SCHEMA,
    true_counts,
    wait_released,
    write_client_csvs,
)

ROOT = Path(__file__).resolve().parents[2]
# At eps 2 the plan compiles P2 at the full width only (params.indif_widths' rule); at eps 5
# it compiled four narrower widths too, 24 s more of this file alone. The served widths are
# tests/servers/test_servers_noisy_greedy.py's.
EPSILON = 2.0
ROUNDS = 2


def feddpsyn(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "feddpsyn.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    yield from running_servers(tmp_path_factory)


@pytest.fixture(scope="module")
def by_hand(servers, tmp_path_factory):
    """What a deployment does by hand, on running servers: `session create` (em, 2 rounds),
    `session status` while the owners are missing, `client upload` by each owner (and one
    repeated), `client release` (once before the release, once after), `session status`
    (the JSON and the table). Each step runs ``python -m feddpsyn.cli``; the checks of a
    command's answers that need no new process (the statuses, the repeated upload, the
    early release) run the command tree in this process (``tests/project/test_demo_and_cli.py``'s
    ``cli``). The outputs are kept for
    :func:`test_the_manual_operator_and_data_owner_workflow`; the session, its public record
    and its release document serve every test of the file."""
    ks, cs, state = servers
    directory = tmp_path_factory.mktemp("by_hand")
    schema = directory / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    csvs = write_client_csvs(tmp_path_factory.mktemp("csv"), seed=4)
    op = str(state / "keyserver" / "operator.token")
    tokens = directory / "tokens"
    created = feddpsyn("session", "create", "--keyserver", ks.url, "--operator-token-file", op,
                       "--schema", str(schema), "--clients", ",".join(CLIENTS),
                       "--epsilon", str(EPSILON), "--delta", "1e-6", "--parameter-set",
                       "test-small", "--max-rows", "1000", "--tokens-dir", str(tokens),
                       "--selection", "em", "--rounds", str(ROUNDS))
    assert created.returncode == 0, created.stderr
    sid = created.stdout.split()[1].rstrip(":")
    status = ("session", "status", "--keyserver", ks.url, "--session", sid,
              "--operator-token-file", op)
    before = cli(*status)

    def upload(client: str, run=feddpsyn) -> subprocess.CompletedProcess:
        return run("client", "upload", "--keyserver", ks.url, "--computeserver", cs.url,
                   "--session", sid, "--client-id", client, "--token-file",
                   str(tokens / f"{client}.token"), "--csv", str(csvs[client]),
                   "--state-dir", str(directory / "agent"))

    uploads = [upload(client) for client in CLIENTS]
    again = upload(CLIENTS[-1], cli)
    release = directory / "release.json"
    first = CLIENTS[0]
    release_args = ("client", "release", "--keyserver", ks.url, "--session", sid,
                    "--client-id", first, "--token-file", str(tokens / f"{first}.token"),
                    "--out", str(release))
    early = cli(*release_args)  # the em rounds take tens of seconds: not released yet
    client_tokens = {c: (tokens / f"{c}.token").read_text().strip() for c in CLIENTS}
    # The wait itself over the API (each `client release` is a new interpreter).
    with ClientAgent(ks.url, cs.url, sid, first, client_tokens[first],
                     directory / "agent") as agent:
        wait_released(agent, timeout=300)
    late = feddpsyn(*release_args)
    operator = Path(op).read_text().strip()
    public = wait_ready(ks.url, operator, sid, timeout=60)
    return SimpleNamespace(
        sid=sid, schema=schema, tokens=tokens, before=before, uploads=uploads, again=again,
        early=early, late=late, release=release, as_json=cli(*status, "--json"),
        table=cli(*status), csvs=csvs,
        created=wire.SessionCreated(session=public, client_tokens=client_tokens),
        document=(wire.ReleaseDocument.model_validate_json(release.read_bytes())
                  if release.exists() else None))


@pytest.fixture(scope="module")
def selected_session(servers, by_hand):
    ks, _, state = servers
    assert by_hand.document is not None, by_hand.late.stderr
    return ks, state, by_hand.created, by_hand.csvs, by_hand.document


def assert_ledger_table(text: str, ledger: dict) -> None:
    """The readable ledger: one line per entry, running totals that add up exactly to the
    ledger's, the last eps equal to epsilon_spent."""
    lines = text.splitlines()
    assert lines[0].startswith("session ") and "released; owners uploaded 3 of 3" in lines[0]
    assert lines[1].startswith("budget: rho ")
    assert lines[2] == (f"spent: rho {float(Fraction(ledger['rho_spent'])):.6g} = eps "
                        f"{ledger['epsilon_spent']:.4f}")
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("#"))
    assert "released or decided" in lines[header] and "remaining rho" in lines[header]
    rows = [line.split() for line in lines[header + 2:]]
    # every entry charged, nothing planned
    assert [r[0] for r in rows] == [str(i) for i in range(1, ROUNDS + 3)]
    assert "1-way marginals released" in lines[header + 2]
    for t in range(ROUNDS):
        assert f"pair selection round {t + 1} of {ROUNDS} decided (em)" in lines[header + 3 + t]
    assert "2-way marginals released" in lines[header + 3 + ROUNDS]
    total = Fraction(0)
    for row, entry in zip(rows, ledger["entries"]):
        total += Fraction(entry["rho"])
        rho, running, remaining, eps = (float(v) for v in row[-4:])
        assert rho == pytest.approx(float(Fraction(entry["rho"])), rel=1e-5)
        assert running == pytest.approx(float(total), rel=1e-5)
        assert remaining == pytest.approx(float(Fraction(ledger["rho_total"]) - total),
                                          rel=1e-5, abs=1e-9)
    assert float(rows[-1][-1]) == pytest.approx(ledger["epsilon_spent"], abs=5e-5)


def test_the_manual_operator_and_data_owner_workflow(by_hand, tmp_path):
    """What a deployment does by hand: servers, `session create`, `client upload`,
    `client release`, `session status`, `synthesize`."""
    before = by_hand.before
    assert before.returncode == 0, before.stderr
    assert "collecting; owners uploaded 0 of 3 (missing: " in before.stdout
    planned = [line for line in before.stdout.splitlines() if "planned: " in line]
    assert [line.split("planned: ")[1].split(" (")[0] for line in planned] == [
        "1-way marginals to release",
        *[f"pair selection round {t + 1} of {ROUNDS} to decide" for t in range(ROUNDS)],
        "2-way marginals to release"]
    assert float(planned[-1].split()[-2]) >= 0  # the plan fits its budget
    for client in CLIENTS:
        token = by_hand.tokens / f"{client}.token"
        assert oct(token.stat().st_mode & 0o777) == "0o600"
    for result in by_hand.uploads:
        assert result.returncode == 0 and "uploaded:" in result.stdout, result.stderr
    assert by_hand.again.returncode == 0 and "already uploaded" in by_hand.again.stdout
    early = by_hand.early
    assert early.returncode == 0 or "not released yet" in early.stderr, early.stderr
    assert by_hand.late.returncode == 0, by_hand.late.stderr
    assert by_hand.release.exists()
    ledger = json.loads(by_hand.as_json.stdout)["ledger"]
    # em selects its pairs privately: one charged round per pair chosen.
    assert 0 < ledger["epsilon_spent"] <= EPSILON
    assert [e["release"] for e in ledger["entries"]] == [
        "one_way", *[f"select-{t}" for t in range(ROUNDS)], "two_way"]
    table = by_hand.table
    assert table.returncode == 0, table.stderr
    assert_ledger_table(table.stdout, ledger)
    result = feddpsyn("synthesize", "--release", str(by_hand.release), "--schema",
                      str(by_hand.schema), "--out", str(tmp_path / "synthetic.csv"))
    assert result.returncode == 0, result.stderr


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


# Two binary columns: one pair of four cells, the smallest noisy-greedy module (its compile
# and keys are most of this test).
TWO_BINARY = {"name": "two", "columns": [
    {"name": "sex", "type": "categorical", "i2s": ["F", "M"]},
    {"name": "smoker", "type": "categorical", "i2s": ["no", "yes"]}]}


def test_a_union_above_max_rows_is_refused_before_any_selection_charge(servers,
                                                                          tmp_path_factory):
    """The three clients hold 210 rows; with max_rows = 60 a score could wrap modulo the
    compiled widths, so the selection must never run: after the 1-way release the compute
    server blocks the session with the reason, the key server refuses the selection's inputs,
    and its ledger holds the 1-way release only. (A second session on the file's servers,
    with noisy-greedy on two binary columns: both selections share P2's scores and this
    check, ``computeserver.selection``, and the smallest such module is the quickest to
    compile and key.)"""
    ks, cs, state = servers
    operator = (state / "keyserver" / "operator.token").read_text().strip()
    created = post_session(ks.url, operator, wire.SessionCreate(
        schema=TWO_BINARY, clients=CLIENTS, parameter_set="test-small",
        budget=wire.BudgetSpec(epsilon=5.0, delta=1e-6), max_rows=60,
        selection=wire.SelectionRequest(mode="noisy-greedy")))
    sid = created.session.session_id
    folder = tmp_path_factory.mktemp("csv")
    csvs = {}
    for i, client in enumerate(CLIENTS):
        csvs[client] = folder / f"{client}.csv"
        rows = [f"{'FM'[(j + i) % 2]},{('no', 'yes')[j % 3 == 0]}" for j in range(40 + 30 * i)]
        csvs[client].write_text("sex,smoker\n" + "\n".join(rows) + "\n")
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
    assert "max_rows = 60" in status.detail and "selection refused" in status.detail
    peer = {"Authorization": "Bearer " + (state / "peer.token").read_text().strip()}
    refused = httpx.get(f"{ks.url}/peer/sessions/{sid}/selection/inputs", headers=peer)
    assert refused.status_code == 409 and "max_rows = 60" in refused.text
    ledger = httpx.get(f"{ks.url}/sessions/{sid}/ledger",
                       headers={"Authorization": f"Bearer {operator}"}).json()
    assert [e["release"] for e in ledger["entries"]] == ["one_way"]
