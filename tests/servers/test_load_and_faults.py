"""Concurrent clients and kill -9 faults on loopback (bounded versions of bench runs)."""

import time

import httpx
import numpy as np
import pytest

from feddpsyn.clients.agent import ClientAgent
from feddpsyn.demo import start_servers
from feddpsyn.loadtest import run_load
from tests.servers.test_servers import (
    CLIENTS,
    create_session,
    kill,
    session_with_uploads,
    true_counts,
)


def test_concurrent_clients_are_each_stored_exactly_once(tmp_path):
    result = run_load(tmp_path, n_clients=20, workers=10)
    assert result["stored"] == 20 and result["exactly_once"]
    assert result["max_error"] < 2 ** 10  # eps=50: tiny noise; a lost or double upload is not


@pytest.mark.parametrize("victim, delay", [("keyserver", 0.4), ("computeserver", 0.8)])
def test_kill_9_during_encryption_aggregation_or_release(tmp_path, victim, delay):
    """Two sessions in flight on one pair of servers: the first's uploads end ``delay``
    seconds before the second's, then one server is killed with -9 at once (the first
    inside its encryption job, P1 or the release, the second just uploaded). Restarted on
    the same state, both sessions complete with their ledgers charged exactly once per
    release."""
    ks, cs, state, operator, first, csvs = session_with_uploads(tmp_path, CLIENTS)
    second = create_session(ks.url, operator)
    time.sleep(delay)
    for client in CLIENTS:
        with ClientAgent(ks.url, cs.url, second.session.session_id, client,
                         second.client_tokens[client], tmp_path / "agents") as agent:
            agent.upload(csvs[client])
    kill(ks if victim == "keyserver" else cs)
    ks.stop()
    cs.stop()
    ks, cs = start_servers(state)
    try:
        for created in (first, second):
            sid = created.session.session_id
            with ClientAgent(ks.url, cs.url, sid, "alice", created.client_tokens["alice"],
                             tmp_path / "agents") as agent:
                deadline = time.time() + 120
                while agent.status().state != "released":
                    assert time.time() < deadline, f"{sid} did not complete after the restart"
                    time.sleep(0.3)
                document = agent.release()
                assert agent.release() == document  # published once, stable
            released = np.concatenate([np.array(m.counts) for r in document.releases
                                       for m in r.marginals.values()])
            assert np.abs(released - true_counts(csvs)).max() < 2 ** 10
            ledger = httpx.get(f"{ks.url}/sessions/{sid}/ledger",
                               headers={"Authorization": f"Bearer {operator}"}).json()
            assert [e["release"] for e in ledger["entries"]] == ["one_way", "two_way"]
            assert ledger["rho_spent"] == ledger["rho_total"]
    finally:
        ks.stop()
        cs.stop()


@pytest.fixture(scope="module")
def lone_key_server(tmp_path_factory):
    """A key server with no compute server: the test plays the peer."""
    from feddpsyn.common.credentials import new_token
    from feddpsyn.common.serving import write_private
    from feddpsyn.demo import ServerProcess, free_port

    directory = tmp_path_factory.mktemp("lone")
    peer = new_token()
    write_private(directory / "peer.token", peer.encode())
    port = free_port()
    ks = ServerProcess(["keyserver", "--port", str(port), "--state-dir", str(directory / "ks"),
                        "--peer-token-file", str(directory / "peer.token")],
                       directory / "ks.log", f"http://127.0.0.1:{port}")
    ks.wait_healthy()
    yield ks, peer, (directory / "ks" / "operator.token").read_text().strip()
    ks.stop()


def foreign_ciphertext(chunk_cells: int, count_bits: int) -> bytes:
    """A valid P1 output ciphertext made under keys of another (local) session."""
    import secrets as pysecrets

    from concrete import fhe

    from feddpsyn.crypto.aggregation import compile_aggregation

    circuit = compile_aggregation(3, chunk_cells, count_bits, 2.0 ** -40)
    client = fhe.Client(circuit.client.specs)
    client.keys.generate(secret_seed=pysecrets.randbits(128),
                         encryption_seed=pysecrets.randbits(128))
    zeros = np.zeros(chunk_cells, dtype=np.int64)
    args = [client.encrypt(zeros, None, None, None, None)[0],
            client.encrypt(None, zeros, None, None, None)[1],
            client.encrypt(None, None, zeros, None, None)[2]]
    ones = np.ones(chunk_cells, dtype=np.int64)
    return circuit.server.run(*args, ones, zeros,
                              evaluation_keys=client.evaluation_keys).serialize()


def one_way_chunks(created) -> list[int]:
    from feddpsyn.params.layout import MarginalLayout
    from feddpsyn.params.schema import Schema

    layout = MarginalLayout.build(Schema.from_dict(created.session.schema_).domain_sizes)
    chunk = created.session.parameter_set["chunk_cells"]
    return sorted({c // chunk for c in layout.cells_of(layout.one_way).tolist()})


def close_uploads(ks_url: str, created, peer: str) -> None:
    """Every client uploads a masked vector (uniform residues: a lone key server cannot tell
    them from a real upload) and the uploads are closed, as the compute server closes them
    before it sums: a release is registered only on closed uploads."""
    import secrets as pysecrets

    from feddpsyn.params.layout import MarginalLayout
    from feddpsyn.params.schema import Schema

    sid = created.session.session_id
    cells = MarginalLayout.build(Schema.from_dict(created.session.schema_).domain_sizes,
                                 [tuple(p) for p in created.session.pairs]).total_cells
    modulus = 1 << created.session.parameter_set["count_bits"]
    for client, token in created.client_tokens.items():
        body = {"commitment": pysecrets.token_hex(32),
                "values": [pysecrets.randbelow(modulus) for _ in range(cells)]}
        r = httpx.put(f"{ks_url}/sessions/{sid}/clients/{client}/masked", json=body,
                      headers={"Authorization": f"Bearer {token}"}, timeout=60)
        assert r.status_code == 200, r.text
    auth = {"Authorization": f"Bearer {peer}"}
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # bounded: the encryption job's deadline
        index = httpx.get(f"{ks_url}/peer/sessions/{sid}/ciphertexts", headers=auth,
                          timeout=30).json()
        if len(index) == len(created.client_tokens):
            break
        time.sleep(0.5)
    else:
        raise AssertionError("the key server did not encrypt the uploads in 300 s")
    uploads = {u["client_id"]: {"commitment": u["commitment"], "digest": u["digest"]}
               for u in index}
    r = httpx.post(f"{ks_url}/peer/sessions/{sid}/uploads/close", json={"uploads": uploads},
                   headers=auth, timeout=60)
    assert r.status_code == 200, r.text


def test_corrupted_foreign_and_unregistered_ciphertexts_change_nothing(lone_key_server):
    import hashlib

    ks, peer, operator = lone_key_server
    created = create_session(ks.url, operator)
    sid = created.session.session_id
    close_uploads(ks.url, created, peer)
    chunks = one_way_chunks(created)
    good = foreign_ciphertext(created.session.parameter_set["chunk_cells"],
                              created.session.parameter_set["count_bits"])
    truncated = good[: len(good) // 2]
    auth = {"Authorization": f"Bearer {peer}"}
    base = f"{ks.url}/peer/sessions/{sid}/releases/one_way"
    ledger_url = f"{ks.url}/sessions/{sid}/ledger"
    op = {"Authorization": f"Bearer {operator}"}
    manifest = {"chunks": chunks, "digests": [hashlib.sha256(truncated).hexdigest()] * len(chunks)}
    assert httpx.put(f"{base}/manifest", json=manifest, headers=auth).status_code == 200
    r = httpx.put(f"{base}/chunks/{chunks[0]}", content=truncated, headers=auth)
    assert r.status_code == 422 and "truncated or corrupted" in r.json()["detail"]
    # A valid ciphertext that the manifest does not list (e.g. another session's): refused.
    r = httpx.put(f"{base}/chunks/{chunks[0]}", content=good, headers=auth)
    assert r.status_code == 409 and "does not match the registered manifest" in r.json()["detail"]
    r = httpx.put(f"{base}/chunks/9999", content=good, headers=auth)
    assert r.status_code == 404
    wrong = {"chunks": chunks + [max(chunks) + 1], "digests": ["00" * 32] * (len(chunks) + 1)}
    r = httpx.put(f"{base}/manifest", json=wrong, headers=auth)
    assert r.status_code == 409 and "covers chunks" in r.json()["detail"]
    assert httpx.get(ledger_url, headers=op).json()["entries"] == []


def test_fifty_parallel_decryption_requests_charge_the_release_once(lone_key_server):
    import hashlib
    from concurrent.futures import ThreadPoolExecutor

    from feddpsyn.common import wire
    from tests.served import post_session

    ks, peer, operator = lone_key_server
    # The registered foreign chunk decrypts to uniform residues mod 2^16, and the key server's
    # plausibility check refuses it only if one of the chunk's 1-way cells decodes below
    # -slack (slack = 40 sigma, about 25 at eps 50): each cell passes with probability
    # 1/2 + 25/2^16. On test_servers' 9 one-way cells the chunk passed (stored, 200) in
    # 0.5004^9 = 2e-3 of runs; two 16-valued columns fill chunk 0 (32 cells) with 1-way cells,
    # so it passes in 0.5004^32 < 3e-10 of runs.
    wide = {"name": "wide", "columns": [
        {"name": name, "type": "categorical", "i2s": [f"{name}{i}" for i in range(16)]}
        for name in ("a", "b")] + [{"name": "c", "type": "categorical", "i2s": ["p", "q"]}]}
    created = post_session(ks.url, operator, wire.SessionCreate(
        schema=wide, clients=CLIENTS, parameter_set="test-small",
        budget=wire.BudgetSpec(epsilon=50.0, delta=1e-6), max_rows=1000,
        selection=wire.SelectionRequest(mode="none")), timeout=120)
    sid = created.session.session_id
    close_uploads(ks.url, created, peer)
    chunks = one_way_chunks(created)
    params = created.session.parameter_set
    assert chunks[0] == 0 and params["chunk_cells"] == 32  # chunk 0 is 1-way cells only
    blobs = [foreign_ciphertext(params["chunk_cells"], params["count_bits"]) for _ in range(2)]
    auth = {"Authorization": f"Bearer {peer}"}
    base = f"{ks.url}/peer/sessions/{sid}/releases/one_way"

    def attempt(i: int) -> list[int]:
        blob = blobs[i % 2]
        digest = hashlib.sha256(blob).hexdigest()
        codes = [httpx.put(f"{base}/manifest", headers=auth, timeout=60, json={
            "chunks": chunks, "digests": [digest] * len(chunks)}).status_code]
        codes.append(httpx.put(f"{base}/chunks/{chunks[0]}", content=blob, headers=auth,
                               timeout=60).status_code)
        return codes

    with ThreadPoolExecutor(max_workers=50) as pool:
        outcomes = list(pool.map(attempt, range(50)))
    assert all(codes[0] in (200, 409) for codes in outcomes)
    # A foreign ciphertext decrypts to uniform residues: charged, then refused as not noisy
    # counts (422), or refused as not the registered manifest (409).
    assert all(codes[1] in (409, 422) for codes in outcomes)
    assert any(codes[1] == 422 for codes in outcomes)
    ledger = httpx.get(f"{ks.url}/sessions/{sid}/ledger",
                       headers={"Authorization": f"Bearer {operator}"}).json()
    assert [e["release"] for e in ledger["entries"]] == ["one_way"]
    one_way_rho = next(r.rho for r in created.session.releases if r.name == "one_way")
    assert ledger["rho_spent"] == one_way_rho
