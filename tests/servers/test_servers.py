"""Both servers as real processes over HTTP on 127.0.0.1: a whole session, bad requests,
the ledger's refusals, and a kill -9 of both servers in the middle of a session."""

import contextlib
import csv
import hashlib
import os
import signal
import threading
import time
from fractions import Fraction
from pathlib import Path

import httpx
import numpy as np
import pytest

from feddpsyn.clients.agent import AgentError, ClientAgent
from feddpsyn.common import wire
from feddpsyn.demo import start_servers
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.schema import Schema
from feddpsyn.params.table_codec import encode_csv
from tests.served import post_session, run_session, running_servers, serve, wait_released

SCHEMA = {"name": "tiny", "columns": [
    {"name": "age", "type": "continuous", "min": 0, "max": 100, "bins": 4},
    {"name": "sex", "type": "categorical", "i2s": ["F", "M"]},
    {"name": "smoker", "type": "categorical", "i2s": ["no", "yes", "unknown"]},
]}
CLIENTS = ["alice", "bob", "carol"]


def write_client_csvs(directory: Path, seed: int = 0) -> dict[str, Path]:
    rng = np.random.default_rng(seed)
    paths = {}
    for i, client in enumerate(CLIENTS):
        path = directory / f"{client}.csv"
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["age", "sex", "smoker"])
            for _ in range(40 + 30 * i):
                w.writerow([int(rng.integers(0, 101)), rng.choice(["F", "M"]),
                            rng.choice(["no", "yes", "unknown"], p=[0.6, 0.3, 0.1])])
        paths[client] = path
    return paths


def session_request(epsilon: float = 50.0, selection: str = "none", rounds: int | None = None,
                    max_rows: int = 1000) -> wire.SessionCreate:
    return wire.SessionCreate(schema=SCHEMA, clients=CLIENTS, parameter_set="test-small",
                              budget=wire.BudgetSpec(epsilon=epsilon, delta=1e-6),
                              max_rows=max_rows,
                              selection=wire.SelectionRequest(mode=selection, rounds=rounds))


def create_session(ks_url: str, operator: str, **request) -> wire.SessionCreated:
    return post_session(ks_url, operator, session_request(**request))


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    yield from running_servers(tmp_path_factory)


@pytest.fixture(scope="module")
def released_session(servers, tmp_path_factory):
    ks, cs, state = servers
    operator = (state / "keyserver" / "operator.token").read_text().strip()
    csvs = write_client_csvs(tmp_path_factory.mktemp("csv"))
    agent_state = tmp_path_factory.mktemp("agents")
    created, document = run_session(ks, cs, operator, session_request(), csvs, agent_state,
                                    timeout=120)
    return created, csvs, agent_state, document, operator


@contextlib.contextmanager
def served_session(tmp_path_factory, *, seed: int, timeout: float, **create):
    """Fresh servers, one session created with ``create``, every client's upload, and the
    release document: yields (ks, state, created, csvs, document); stops the servers."""
    csvs = write_client_csvs(tmp_path_factory.mktemp("csv"), seed=seed)
    with serve(tmp_path_factory, session_request(**create), csvs, timeout) as (
            ks, state, created, document):
        yield ks, state, created, csvs, document


def true_counts(csvs, schema_document: dict = SCHEMA) -> np.ndarray:
    """The union's true counts in the layout of ``schema_document``'s every pair."""
    schema = Schema.from_dict(schema_document)
    records = np.concatenate([encode_csv(p, schema).records for p in csvs.values()])
    return MarginalLayout.build(schema.domain_sizes).counts(records)


def test_release_is_the_true_union_plus_two_small_noises(released_session):
    created, csvs, _, document, _ = released_session
    released = np.concatenate([np.array(m.counts) for r in document.releases
                               for m in r.marginals.values()])
    truth = true_counts(csvs)
    errors = released - truth
    # eps=50: each server's sigma2 is about 0.5; a wrap or mask bug would be off by ~2^16.
    sigma2 = max(float(Fraction(r.sigma2_per_server)) for r in document.releases)
    assert np.abs(errors).max() <= 10 * np.sqrt(2 * sigma2)
    assert np.abs(errors).max() < 2 ** 10
    assert document.accounting["epsilon_spent"] <= 50.0
    assert Fraction(document.accounting["rho_spent"]) <= Fraction(document.accounting["rho_total"])
    assert [e["release"] for e in document.accounting["entries"]] == ["one_way", "two_way"]


def test_the_compute_servers_status_says_what_its_steps_cost(servers, released_session):
    """``computeserver.metering``: the session's release chunks, counted as tasks with their
    CPU seconds and bootstraps (concrete's count of the release circuit's function)."""
    ks, cs, _ = servers
    created, _, agent_state, _, _ = released_session
    with ClientAgent(ks.url, cs.url, created.session.session_id, "alice",
                     created.client_tokens["alice"], agent_state) as agent:
        costs = agent.compute_status().costs
    assert costs is not None and [c.step for c in costs] == ["release"]
    assert costs[0].tasks >= len(created.session.releases)  # a chunk or more a release
    assert costs[0].cpu_seconds > 0 and costs[0].wall_seconds > 0
    assert costs[0].bootstraps is not None and costs[0].bootstraps >= 0


def test_release_document_feeds_synthesis(released_session, tmp_path):
    from feddpsyn.synthesis import marginals_from_release, synthesize

    _, _, _, document, _ = released_session
    schema, noisy = marginals_from_release(document)
    records, rows = synthesize(schema, noisy, "gum", 200, seed=1)
    assert records.shape == (200, 3)
    assert all(row[1] in ("F", "M") for row in rows)


def test_identical_reupload_is_idempotent_and_a_different_one_refused(servers, released_session,
                                                                      tmp_path):
    ks, cs, _ = servers
    created, csvs, agent_state, _, _ = released_session
    sid = created.session.session_id
    token = created.client_tokens["bob"]
    seed = (agent_state / sid / "bob.seed").read_bytes()
    r = httpx.put(f"{cs.url}/sessions/{sid}/clients/bob/seed",
                  json={"seed_hex": seed.hex()}, headers={"Authorization": f"Bearer {token}"})
    # An identical retry is acknowledged (even after release) without storing anything.
    assert r.status_code == 200 and r.json()["stored"] is False
    r = httpx.put(f"{cs.url}/sessions/{sid}/clients/bob/seed",
                  json={"seed_hex": "00" * 32}, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 409 and "different seed" in r.json()["detail"]


@pytest.mark.parametrize("who, path, status", [
    ("none", "/sessions/{sid}/clients/alice/masked", 401),
    ("bob", "/sessions/{sid}/clients/alice/masked", 403),
    ("garbage", "/sessions/{sid}/clients/alice/masked", 403),
    ("alice", "/sessions/unknown/clients/alice/masked", 404),
])
def test_uploads_need_the_clients_own_credentials(servers, released_session, who, path, status):
    ks, _, _ = servers
    created = released_session[0]
    sid = created.session.session_id
    headers = {}
    if who in CLIENTS:
        headers["Authorization"] = f"Bearer {created.client_tokens[who]}"
    elif who == "garbage":
        headers["Authorization"] = "Bearer not-a-token"
    r = httpx.put(ks.url + path.format(sid=sid), headers=headers,
                  json={"commitment": "0" * 64, "values": [0]})
    assert r.status_code == status, r.text
    assert "detail" in r.json()


def test_operator_endpoints_refuse_clients(servers, released_session):
    ks, _, _ = servers
    created = released_session[0]
    r = httpx.post(f"{ks.url}/sessions", json={},
                   headers={"Authorization": f"Bearer {created.client_tokens['alice']}"})
    assert r.status_code == 403


def test_bad_session_requests_are_refused_with_the_reason(servers, released_session):
    ks, _, _ = servers
    operator = released_session[4]
    headers = {"Authorization": f"Bearer {operator}"}
    bad_schema = {"schema": {"columns": []}, "clients": ["a"],
                  "budget": {"epsilon": 1, "delta": 1e-6}}
    r = httpx.post(f"{ks.url}/sessions", json=bad_schema, headers=headers)
    assert r.status_code == 422 and "schema" in r.json()["detail"]  # breaks the document
    too_big = {"schema": SCHEMA, "clients": ["a"], "budget": {"epsilon": 0.01, "delta": 1e-6},
               "parameter_set": "test-small", "max_rows": 30000}
    r = httpx.post(f"{ks.url}/sessions", json=too_big, headers=headers)
    # Well formed, but its plan is refused: at once (409) when the plan is built within the
    # request's wait, else accepted and failed by the preparation with the same reason
    # (keyserver.preparation's module docstring).
    if r.status_code == 202:
        status_url = f"{ks.url}{r.json()['status_url']}"
        for _ in range(600):  # bounded: a minute
            status = httpx.get(status_url, headers=headers).json()
            if status["state"] != "preparing":
                break
            time.sleep(0.1)
        assert status["state"] == "failed" and "does not fit" in status["detail"], status
    else:
        assert r.status_code == 409 and "does not fit" in r.json()["detail"]
    r = httpx.post(f"{ks.url}/sessions", content=b"{not json", headers=headers)
    assert r.status_code == 422


def test_ledger_refuses_a_second_decryption_and_unregistered_releases(servers, released_session):
    ks, _, state = servers
    created = released_session[0]
    sid = created.session.session_id
    peer = {"Authorization": f"Bearer {(state / 'peer.token').read_text().strip()}"}
    operator = {"Authorization": f"Bearer {released_session[4]}"}
    before = httpx.get(f"{ks.url}/sessions/{sid}/ledger", headers=operator).json()
    other = {"chunks": [0], "digests": ["ab" * 32]}
    r = httpx.put(f"{ks.url}/peer/sessions/{sid}/releases/one_way/manifest", json=other,
                  headers=peer)
    assert r.status_code == 409 and "already charged" in r.json()["detail"]
    r = httpx.put(f"{ks.url}/peer/sessions/{sid}/releases/raw_counts/manifest", json=other,
                  headers=peer)
    assert r.status_code == 404 and "not registered" in r.json()["detail"]
    r = httpx.put(f"{ks.url}/peer/sessions/{sid}/releases/one_way/chunks/0",
                  content=b"forged", headers=peer)
    assert r.status_code == 409 and "manifest" in r.json()["detail"]
    # A client cannot use the peer API at all.
    r = httpx.get(f"{ks.url}/peer/sessions",
                  headers={"Authorization": f"Bearer {created.client_tokens['alice']}"})
    assert r.status_code == 403
    after = httpx.get(f"{ks.url}/sessions/{sid}/ledger", headers=operator).json()
    assert after == before


def test_budget_overspend_is_refused_and_concurrent_charges_never_overspend(tmp_path):
    from feddpsyn.keyserver.service import KeyServer, ServiceError
    from feddpsyn.params.release_spec import ReleaseSpec

    service = KeyServer(tmp_path / "ks")
    request = wire.SessionCreate(schema=SCHEMA, clients=["a"], parameter_set="test-small",
                                 budget=wire.BudgetSpec(epsilon=1, delta=1e-6), max_rows=100,
                                 selection=wire.SelectionRequest(mode="none"))
    sid = service.create_session(request).session_id
    service.preparation.wait_ready(sid, timeout=600)
    service.close()
    plan = service.plan(sid)
    greedy = ReleaseSpec("one_way", ("0",), plan.rho_total * 2, Fraction(1))
    manifest = wire.ReleaseManifest(chunks=[0], digests=["00" * 32])
    with pytest.raises(ServiceError) as info:
        service._charge(sid, greedy, manifest)
    assert info.value.status == 403
    assert service.ledger(sid).entries == []
    # 30 threads race to charge a release each worth 40% of the budget: at most two succeed.
    outcomes = []

    def attempt(i: int) -> None:
        spec = ReleaseSpec(f"r{i}", ("0",), plan.rho_total * Fraction(2, 5), Fraction(1))
        try:
            service._charge(sid, spec, manifest)
            outcomes.append("ok")
        except ServiceError as exc:
            outcomes.append(exc.status)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert outcomes.count("ok") == 2 and outcomes.count(403) == 28
    assert Fraction(service.ledger(sid).rho_spent) <= plan.rho_total


def test_secret_key_stays_in_the_key_server_state_dir(servers, released_session):
    _, _, state = servers
    sid = released_session[0].session.session_id
    key_file = state / "keyserver" / "sessions" / sid / "keys.bin"
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    secret = key_file.read_bytes()
    # The LWE secret is binary, stored one bit per 64-bit word: a 1 KiB window holds 128 key
    # bits, which no unrelated file contains by chance.
    probe = secret[len(secret) // 2: len(secret) // 2 + 1024]
    assert len(set(probe)) > 1
    for path in (state / "computeserver").rglob("*"):
        if path.is_file():
            assert probe not in path.read_bytes(), path
    for log in state.glob("*.log"):
        assert probe not in log.read_bytes()


def test_the_compute_server_fetches_each_artefact_by_its_digest(servers, released_session):
    """The peer record names each artefact with its SHA-256; the compute server holds the
    key server's very files (0600); the artefact route serves no secret key and no other
    name."""
    ks, _, state = servers
    sid = released_session[0].session.session_id
    peer = {"Authorization": f"Bearer {(state / 'peer.token').read_text().strip()}"}
    record = httpx.get(f"{ks.url}/peer/sessions/{sid}", headers=peer, timeout=60).json()
    assert set(record["artefacts"]) == {"server.zip", "evaluation_keys.bin"}
    for name, digest in record["artefacts"].items():
        held = state / "computeserver" / "sessions" / sid / name
        assert oct(held.stat().st_mode & 0o777) == "0o600"
        assert hashlib.sha256(held.read_bytes()).hexdigest() == digest
        assert held.read_bytes() == (state / "keyserver" / "sessions" / sid / name).read_bytes()
        served = httpx.get(f"{ks.url}/peer/sessions/{sid}/artefacts/{name}", headers=peer,
                           timeout=60)
        assert served.status_code == 200 and hashlib.sha256(served.content).hexdigest() == digest
    for name in ("keys.bin", "selection_server.zip", "..%2Fkeys.bin"):
        refused = httpx.get(f"{ks.url}/peer/sessions/{sid}/artefacts/{name}", headers=peer,
                            timeout=60)
        assert refused.status_code in (404, 422), name
    assert httpx.get(f"{ks.url}/peer/sessions/{sid}/artefacts/server.zip",
                     timeout=60).status_code == 401


def session_with_uploads(tmp_path: Path, uploaders: list[str]):
    """Both servers on a fresh state dir, a session, and these clients' uploads done."""
    state = tmp_path / "state"
    ks, cs = start_servers(state)
    operator = (state / "keyserver" / "operator.token").read_text().strip()
    created = create_session(ks.url, operator)
    csvs = write_client_csvs(tmp_path)
    for client in uploaders:
        with ClientAgent(ks.url, cs.url, created.session.session_id, client,
                         created.client_tokens[client], tmp_path / "agents") as agent:
            agent.upload(csvs[client])
    return ks, cs, state, operator, created, csvs


def kill(server) -> None:
    """kill -9, then release the test's handles on the process."""
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(10)
    server.stop()


def test_kill_both_servers_mid_session_and_finish(tmp_path):
    ks, cs, state, _, created, csvs = session_with_uploads(tmp_path, CLIENTS[:2])
    sid = created.session.session_id
    agents = tmp_path / "agents"
    for server in (ks, cs):
        kill(server)
    ks, cs = start_servers(state)  # same state directories, new ports
    try:
        with ClientAgent(ks.url, cs.url, sid, "alice", created.client_tokens["alice"],
                         agents) as agent:
            again = agent.upload(csvs["alice"])  # same seed from the agent's state: idempotent
        assert not again.seed_receipt.stored and not again.masked_receipt.stored
        with ClientAgent(ks.url, cs.url, sid, "carol", created.client_tokens["carol"],
                         agents) as agent:
            agent.upload(csvs["carol"])
            document = wait_released(agent)
        released = np.concatenate([np.array(m.counts) for r in document.releases
                                   for m in r.marginals.values()])
        assert np.abs(released - true_counts(csvs)).max() < 2 ** 10
        assert len(document.accounting["entries"]) == 2
        # A fresh seed for an already-uploaded client is refused (it would mismatch).
        with (ClientAgent(ks.url, cs.url, sid, "bob", created.client_tokens["bob"],
                          tmp_path / "other-agent-state") as agent,
              pytest.raises(AgentError, match="409")):
            agent.upload(csvs["bob"])
    finally:
        ks.stop()
        cs.stop()


def test_compute_server_says_when_the_key_server_is_unreachable(tmp_path):
    from feddpsyn.common.credentials import new_token
    from feddpsyn.common.serving import write_private
    from feddpsyn.demo import ServerProcess, free_port

    token = tmp_path / "peer.token"
    write_private(token, new_token().encode())
    port = free_port()
    cs = ServerProcess(["computeserver", "--host", "127.0.0.1", "--port", str(port),
                        "--state-dir", str(tmp_path / "cs"), "--keyserver",
                        f"http://127.0.0.1:{free_port()}", "--peer-token-file", str(token)],
                       tmp_path / "cs.log", f"http://127.0.0.1:{port}")
    try:
        cs.wait_healthy()
        r = httpx.put(f"{cs.url}/sessions/s-1/clients/a/seed", json={"seed_hex": "00" * 32},
                      headers={"Authorization": "Bearer x"})
        assert r.status_code == 503 and "unreachable" in r.json()["detail"]
    finally:
        cs.stop()


def test_malformed_uploads_get_a_4xx_that_says_why_and_store_nothing(servers):
    ks, cs, state = servers
    operator = (state / "keyserver" / "operator.token").read_text().strip()
    created = create_session(ks.url, operator)
    sid, cells = created.session.session_id, created.session.total_cells
    auth = {"Authorization": f"Bearer {created.client_tokens['alice']}"}
    masked_url = f"{ks.url}/sessions/{sid}/clients/alice/masked"
    seed_url = f"{cs.url}/sessions/{sid}/clients/alice/seed"
    cases = [
        # the session's length and width: 409 (the document states them as its own)
        (masked_url, {"commitment": "0" * 64, "values": [0] * (cells - 1)}, 409, "expects"),
        (masked_url, {"commitment": "0" * 64, "values": [2 ** 16] + [0] * (cells - 1)}, 409,
         "[0, 2^16)"),
        (masked_url, {"commitment": "0" * 64, "values": [-1] + [0] * (cells - 1)}, 422,
         "greater than or equal to 0"),
        (masked_url, {"commitment": "0" * 64, "values": ["x"] * cells}, 422, "number"),
        (masked_url, {"commitment": "0" * 64, "values": ["1"] * cells}, 422, "number"),
        (masked_url, {"commitment": "xyz", "values": [0] * cells}, 422, "pattern"),
        (masked_url, {"values": [0] * cells}, 422, "commitment"),
        (masked_url, {"commitment": "0" * 64, "values": [0] * cells, "extra": 1}, 422, "extra"),
        (seed_url, {"seed_hex": "00" * 31}, 422, "pattern"),
        (seed_url, {"seed_hex": "zz" * 32}, 422, "pattern"),
    ]
    for url, body, status, needle in cases:
        r = httpx.put(url, json=body, headers=auth)
        assert r.status_code == status, (body, r.text)
        assert needle in r.text, (needle, r.text)
    r = httpx.put(masked_url, content=b"{broken", headers={**auth, "Content-Type":
                                                            "application/json"})
    assert r.status_code == 422
    r = httpx.put(masked_url, content=b"x" * (65 * 1024 * 1024), headers=auth)
    assert r.status_code == 413 and "larger than" in r.json()["detail"]
    status = httpx.get(f"{ks.url}/sessions/{sid}/status", headers=auth).json()
    assert status["clients_uploaded"] == []
    # A valid upload, then a conflicting one: the first stays.
    good = {"commitment": "a" * 64, "values": [1] * cells}
    assert httpx.put(masked_url, json=good, headers=auth).json()["stored"] is True
    r = httpx.put(masked_url, json={**good, "values": [2] * cells}, headers=auth)
    assert r.status_code == 409 and "different masked vector" in r.json()["detail"]
    assert httpx.put(masked_url, json=good, headers=auth).json()["stored"] is False


def test_a_chunked_body_over_the_limit_is_refused_while_streaming(servers):
    _, cs, _ = servers

    def chunks():
        for _ in range(300):  # 300 x 8 KiB > the compute server's 1 MiB limit
            yield b"x" * 8192

    r = httpx.put(f"{cs.url}/sessions/s-x/clients/a/seed", content=chunks(),
                  headers={"Authorization": "Bearer x"})
    assert r.status_code == 413 and "larger than" in r.json()["detail"]


def test_no_client_count_vector_or_key_appears_in_any_state_log_or_response(servers,
                                                                             released_session):
    ks, cs, state = servers
    created, csvs, _, document, operator = released_session
    schema = Schema.from_dict(SCHEMA)
    layout = MarginalLayout.build(schema.domain_sizes)
    needles = []
    for path in csvs.values():
        counts = layout.counts(encode_csv(path, schema).records)
        needles += [counts.astype("<i8").tobytes(), ", ".join(map(str, counts)).encode(),
                    ",".join(map(str, counts)).encode()]
    sid = created.session.session_id
    key = (state / "keyserver" / "sessions" / sid / "keys.bin").read_bytes()
    key_probe = key[len(key) // 2: len(key) // 2 + 1024]
    haystacks = [p.read_bytes() for p in state.rglob("*") if p.is_file()
                 and p.name != "keys.bin"]
    auth = {"Authorization": f"Bearer {operator}"}
    for url in (f"{ks.url}/sessions/{sid}", f"{ks.url}/sessions/{sid}/release",
                f"{ks.url}/sessions/{sid}/ledger", f"{ks.url}/sessions/{sid}/status",
                f"{ks.url}/openapi.json", f"{cs.url}/openapi.json"):
        haystacks.append(httpx.get(url, headers=auth).content)
    for hay in haystacks:
        assert key_probe not in hay
        for needle in needles:
            assert needle not in hay
