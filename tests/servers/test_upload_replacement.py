"""An owner's mistaken upload: refused when empty, replaceable until the compute server starts
on the uploads, never summed once replaced (``keyserver.uploads``, ``computeserver.service``,
``clients.agent``).

No circuit is compiled and no server is started: the key server's app is called in process
(``TestClient``), a session is recorded from its plan with no keys, "encryption" is the
identity on the masked values, run in this process (``SessionKeys.encrypt_chunk`` and the
offline pool's ``map`` patched: no worker process is spawned) and the compute server
does not parse them (``_validate_ciphertexts`` patched). What is under test is which upload
each server holds, when a replacement is taken or refused, and what the close of the uploads
agrees on. ``tests/servers/test_servers.py`` replaces an upload through both real servers and checks
the release.
"""

import hashlib
import logging

import numpy as np
import pytest
from starlette.testclient import TestClient

from feddpsyn.clients.agent import AgentError, ClientAgent
from feddpsyn.common import wire
from feddpsyn.common.serving import ServiceError
from feddpsyn.computeserver.app import create_app as create_cs_app
from feddpsyn.computeserver.service import ComputeServer
from feddpsyn.crypto.blobs import unpack_blobs
from feddpsyn.crypto.masking import expand_masks, mask_counts, new_seed, seed_commitment
from feddpsyn.keyserver.app import create_app as create_ks_app
from feddpsyn.keyserver.keys import SessionKeys
from feddpsyn.keyserver.sessions import build_plan

SCHEMA = {"name": "tiny", "columns": [
    {"name": "age", "type": "continuous", "min": 0, "max": 100, "bins": 4},
    {"name": "sex", "type": "categorical", "i2s": ["F", "M"]},
    {"name": "smoker", "type": "categorical", "i2s": ["no", "yes", "unknown"]}]}
CLIENTS = ["alice", "bob"]
PEER = "peer-token-for-tests"
SID = "s-replace"


@pytest.fixture()
def servers(tmp_path, monkeypatch):
    """(key server app, its service, compute server, tokens) with one session recorded."""
    monkeypatch.setattr(SessionKeys, "encrypt_chunk",
                        lambda self, position, values: np.asarray(values, np.int64).tobytes())
    monkeypatch.setattr(ComputeServer, "_validate_ciphertexts", lambda *args: None)
    app = create_ks_app(tmp_path / "ks", PEER)
    ks = app.state.service
    monkeypatch.setattr(ks.offline_pool, "map", lambda files, tasks, what: [
        task.run(SessionKeys(None, len(CLIENTS))) for task in tasks])
    request = wire.SessionCreate(schema=SCHEMA, clients=CLIENTS, parameter_set="test-small",
                                 budget=wire.BudgetSpec(epsilon=50, delta=1e-6), max_rows=1000,
                                 noise="two-server",
                                 selection=wire.SelectionRequest(mode="none"))
    plan = build_plan(request)
    tokens = {c: f"token-of-{c}" for c in CLIENTS}
    ks.sessions.add(SID, request, plan.to_public(SID, CLIENTS), tokens, plan,
                    SessionKeys(None, len(CLIENTS)))
    ks.session_dir(SID).mkdir(parents=True)
    for name in ("server.zip", "evaluation_keys.bin"):  # what the peer session carries
        (ks.session_dir(SID) / name).write_bytes(b"not a circuit")
    cs = ComputeServer(tmp_path / "cs", "http://ks", PEER)
    cs._client = TestClient(app, base_url="http://ks",
                            headers={"Authorization": f"Bearer {PEER}"})
    yield app, ks, cs, tokens
    cs._client.close()


def counts_of(ks, rows: int, seed: int = 0) -> np.ndarray:
    cells = ks.public(SID).total_cells
    return np.random.default_rng(seed).integers(0, rows, cells)


def upload(ks, cs, client: str, counts: np.ndarray, seed: bytes, replace: bool = False):
    """What the agent sends: the seed to the compute server, then the masked counts."""
    k = ks.public(SID).parameter_set["count_bits"]
    seed_receipt = cs.store_seed(SID, client, wire.SeedUpload(seed_hex=seed.hex()), replace)
    masked = mask_counts(counts, expand_masks(seed, SID, client, counts.size, k), k)
    masked_receipt = ks.store_masked(SID, client, wire.MaskedUpload(
        commitment=seed_commitment(seed, SID, client), values=masked.tolist()), replace)
    return seed_receipt, masked_receipt


def held_counts(ks, cs, client: str) -> np.ndarray:
    """The counts the compute server would sum for ``client``: its copy of the (identity-
    encrypted) masked vector, unmasked with the seed it holds."""
    k = ks.public(SID).parameter_set["count_bits"]
    total = ks.public(SID).total_cells
    with cs.db.connect() as conn:
        seed = bytes.fromhex(conn.execute("SELECT seed_hex FROM seeds WHERE client_id = ?",
                                          (client,)).fetchone()["seed_hex"])
    blobs = unpack_blobs((cs.session_dir(SID) / "ciphertexts" / f"{client}.bin").read_bytes())
    masked = np.concatenate([np.frombuffer(b, dtype=np.int64) for b in blobs])[:total]
    return (masked - expand_masks(seed, SID, client, total, k)) % (1 << k)


def sync(ks, cs) -> None:
    """The key server's encryption job, then the compute server's fetch."""
    ks.run_encryption_job()
    cs._fetch_ciphertexts(SID)


def test_an_owner_replaces_its_upload_until_the_uploads_close(servers, caplog):
    caplog.set_level(logging.INFO)
    _, ks, cs, _ = servers
    cs.sync_session(SID)
    wrong, right, other = counts_of(ks, 5, 1), counts_of(ks, 50, 2), counts_of(ks, 50, 3)
    upload(ks, cs, "alice", wrong, new_seed())
    upload(ks, cs, "bob", other, new_seed())
    sync(ks, cs)
    assert cs.status(SID).state == "computing"
    # Without replace: refused, and the message says how to replace.
    with pytest.raises(ServiceError) as refused:
        upload(ks, cs, "alice", right, new_seed())
    assert refused.value.status == 409 and "--replace" in refused.value.message
    # The replacement: a fresh seed at the compute server drops the old ciphertexts there...
    seed = new_seed()
    receipts = upload(ks, cs, "alice", right, seed, replace=True)
    assert all(r.stored for r in receipts)
    status = cs.status(SID)
    assert status.state == "collecting" and status.clients_missing == ["alice"]
    # ... the key server drops the old vector and its ciphertexts, and encrypts the new one.
    assert ks.uploads.ciphertext_index(SID) == [
        e for e in ks.uploads.ciphertext_index(SID) if e["client_id"] == "bob"]
    sync(ks, cs)
    assert cs.status(SID).state == "computing"
    assert np.array_equal(held_counts(ks, cs, "alice"), right)
    assert np.array_equal(held_counts(ks, cs, "bob"), other)
    # Recorded: in the ledger's view and in the log; nothing charged for it.
    ledger = ks.ledger(SID)
    assert [r.client_id for r in ledger.uploads_replaced] == ["alice"]
    assert ledger.entries == [] and ledger.rho_spent == "0"
    assert any("client alice replaced its masked vector" in r.message for r in caplog.records)
    assert any("client alice replaced its seed" in r.message for r in caplog.records)
    # The compute server closes the uploads before it sums anything; from then on neither
    # server takes a replacement, and an identical retry is still acknowledged.
    assert cs._close_uploads(SID)
    for _ in range(2):
        with pytest.raises(ServiceError) as late:
            upload(ks, cs, "alice", wrong, new_seed(), replace=True)
        assert late.value.status == 409 and "can no longer be replaced" in late.value.message
    with pytest.raises(ServiceError) as late:  # at the key server too
        ks.store_masked(SID, "bob", wire.MaskedUpload(commitment="ab" * 32,
                                                      values=[0] * right.size), True)
    assert late.value.status == 409 and "can no longer be replaced" in late.value.message
    assert not any(r.stored for r in upload(ks, cs, "alice", right, seed))
    assert np.array_equal(held_counts(ks, cs, "alice"), right)


def test_a_replacement_must_use_a_fresh_seed(servers):
    """Two count vectors under the same masks would show the key server their difference."""
    _, ks, cs, _ = servers
    cs.sync_session(SID)
    first, second = new_seed(), new_seed()
    upload(ks, cs, "alice", counts_of(ks, 5, 1), first)
    for seed in (first,):  # the same seed, other counts
        with pytest.raises(ServiceError) as refused:
            upload(ks, cs, "alice", counts_of(ks, 9, 2), seed, replace=True)
        assert refused.value.status == 409 and "fresh seed" in refused.value.message
    upload(ks, cs, "alice", counts_of(ks, 9, 2), second, replace=True)
    with pytest.raises(ServiceError) as refused:  # back to a seed used before
        ks.store_masked(SID, "alice", wire.MaskedUpload(
            commitment=seed_commitment(first, SID, "alice"),
            values=[0] * counts_of(ks, 1).size), True)
    assert refused.value.status == 409 and "fresh seed" in refused.value.message
    assert [r.client_id for r in ks.ledger(SID).uploads_replaced] == ["alice"]


def test_the_key_server_refuses_to_close_on_an_upload_replaced_since_it_was_fetched(servers):
    """A client that replaces at the key server first (the agent sends the seed first): the
    compute server's close names the old upload, the key server refuses, the compute server
    fetches the new one and waits for the seed that matches it."""
    _, ks, cs, _ = servers
    cs.sync_session(SID)
    upload(ks, cs, "alice", counts_of(ks, 5, 1), new_seed())
    upload(ks, cs, "bob", counts_of(ks, 5, 2), new_seed())
    sync(ks, cs)
    assert cs.status(SID).state == "computing"
    k = ks.public(SID).parameter_set["count_bits"]
    right, seed = counts_of(ks, 50, 3), new_seed()
    masked = mask_counts(right, expand_masks(seed, SID, "alice", right.size, k), k)
    ks.store_masked(SID, "alice", wire.MaskedUpload(
        commitment=seed_commitment(seed, SID, "alice"), values=masked.tolist()), True)
    ks.run_encryption_job()
    assert not cs._close_uploads(SID)  # refused: the key server holds another upload
    status = cs.status(SID)
    assert status.state == "collecting" and "alice" in status.detail
    assert "different uploads" in status.detail
    with pytest.raises(ServiceError):  # the uploads are not closed: nothing is charged
        ks.register_release(SID, "one_way", wire.ReleaseManifest(chunks=[0],
                                                                 digests=["00" * 32]))
    cs.store_seed(SID, "alice", wire.SeedUpload(seed_hex=seed.hex()), True)
    cs._fetch_ciphertexts(SID)
    assert cs.status(SID).state == "computing"
    assert cs._close_uploads(SID)
    assert np.array_equal(held_counts(ks, cs, "alice"), right)


def test_a_release_is_registered_only_on_closed_uploads(servers):
    _, ks, cs, _ = servers
    cs.sync_session(SID)
    for client in CLIENTS:
        upload(ks, cs, client, counts_of(ks, 5), new_seed())
    sync(ks, cs)
    plan = ks.plan(SID)
    chunks = sorted(set((plan.layout.cells_of(plan.layout.one_way)
                         // plan.parameters.chunk_cells).tolist()))
    manifest = wire.ReleaseManifest(chunks=chunks, digests=["00" * 32] * len(chunks))
    with pytest.raises(ServiceError) as refused:
        ks.register_release(SID, "one_way", manifest)
    assert refused.value.status == 409 and "not closed" in refused.value.message
    assert cs._close_uploads(SID)
    assert ks.register_release(SID, "one_way", manifest).missing_chunks == chunks


def test_a_close_must_name_every_client_once(servers):
    _, ks, _, _ = servers
    digest = {"commitment": "ab" * 32, "digest": "cd" * 32}
    for uploads in ({"alice": digest}, {"alice": digest, "bob": digest, "eve": digest}):
        with pytest.raises(ServiceError) as refused:
            ks.close_uploads(SID, wire.UploadsClose.model_validate({"uploads": uploads}))
        assert refused.value.status == 409
    with pytest.raises(ServiceError) as refused:  # nothing uploaded yet
        ks.close_uploads(SID, wire.UploadsClose.model_validate(
            {"uploads": {"alice": digest, "bob": digest}}))
    assert refused.value.status == 409


def test_an_encryption_of_a_replaced_upload_is_discarded(servers):
    _, ks, cs, _ = servers
    cs.sync_session(SID)
    upload(ks, cs, "alice", counts_of(ks, 5, 1), new_seed())
    with ks.db.connect() as conn:
        old = dict(conn.execute("SELECT commitment, digest FROM masked").fetchone())
    upload(ks, cs, "alice", counts_of(ks, 5, 2), new_seed(), replace=True)
    # The job had read the old upload when the replacement came: it writes nothing.
    assert not ks.uploads._encrypt_client(SID, "alice", old["commitment"], old["digest"])
    assert ks.uploads.ciphertext_index(SID) == []
    assert ks.run_encryption_job() == 1
    [entry] = ks.uploads.ciphertext_index(SID)
    with ks.db.connect() as conn:
        assert entry["commitment"] == conn.execute("SELECT commitment FROM masked"
                                                   ).fetchone()["commitment"] != old["commitment"]
    data = (ks.session_dir(SID) / "ciphertexts" / "alice.bin").read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["digest"]


# ------------------------------------------------------------------ the client agent
@pytest.fixture()
def agents(servers, tmp_path):
    """A client agent talking to both servers in process, one per client."""
    app, ks, cs, tokens = servers
    cs_app = create_cs_app(tmp_path / "cs-app", "http://ks", PEER)
    cs_app.state.service._client = cs._client
    made = []

    def agent(client: str, state=tmp_path / "agent") -> ClientAgent:
        a = ClientAgent("http://ks", "http://cs", SID, client, tokens[client], state,
                        attempts=1)
        headers = {"Authorization": f"Bearer {tokens[client]}"}
        a._ks = TestClient(app, base_url="http://ks", headers=headers)
        a._cs = TestClient(cs_app, base_url="http://cs", headers=headers)
        made.append(a)
        return a

    yield agent, ks, cs_app.state.service
    for a in made:
        a.close()


def write(tmp_path, name: str, rows: list[str]):
    path = tmp_path / name
    path.write_text("age,sex,smoker\n" + "".join(r + "\n" for r in rows))
    return path


def test_the_agent_refuses_an_empty_table_unless_asked(agents, tmp_path):
    agent, ks, cs = agents
    empty = write(tmp_path, "empty.csv", [])
    with pytest.raises(AgentError, match=r"empty.csv: has a header and no data rows: nothing "
                                         r"to upload.*--allow-empty"):
        agent("alice").upload(empty)
    assert ks.uploaded_clients(SID) == [] and not (tmp_path / "agent" / SID).exists()
    dropped = write(tmp_path, "dropped.csv", ["200,F,no", "30,X,no"])
    with pytest.raises(AgentError, match=r"has no row left to count \(0 rows encoded of 2 "
                                         r"read; dropped: age=1, sex=1\)"):
        agent("alice").upload(dropped, on_invalid="drop")
    result = agent("alice").upload(empty, allow_empty=True)
    assert result.rows == 0 and result.masked_receipt.stored
    assert ks.uploaded_clients(SID) == ["alice"]


def test_the_agent_replaces_with_a_fresh_seed_kept_only_once_taken(agents, tmp_path,
                                                                   monkeypatch):
    agent, ks, cs = agents
    wrong = write(tmp_path, "wrong.csv", ["10,F,no"])
    right = write(tmp_path, "right.csv", ["10,F,no", "60,M,yes", "99,M,unknown"])
    seed_file = tmp_path / "agent" / SID / "alice.seed"
    first = agent("alice").upload(wrong)
    assert first.masked_receipt.stored and not first.replaced
    old_seed = seed_file.read_bytes()
    # A different table under the same seed is refused before anything is sent: the key
    # server would see both masked vectors, and their difference is the tables'.
    sent = []
    real_put = ClientAgent._put
    monkeypatch.setattr(ClientAgent, "_put",
                        lambda self, *a: sent.append(a[1]) or real_put(self, *a))
    with pytest.raises(AgentError, match=r"right.csv: this owner already sent a different "
                                         r"table .*Nothing was sent.*--replace"):
        agent("alice").upload(right)
    assert sent == []
    replaced = agent("alice").upload(right, replace=True)
    assert replaced.replaced and replaced.rows == 3
    new = seed_file.read_bytes()
    assert new != old_seed and not seed_file.with_name("alice.seed.new").exists()
    with cs.db.connect() as conn:
        assert conn.execute("SELECT seed_hex FROM seeds WHERE client_id = 'alice'"
                            ).fetchone()["seed_hex"] == new.hex()
    with ks.db.connect() as conn:
        assert conn.execute("SELECT commitment FROM masked WHERE client_id = 'alice'"
                            ).fetchone()["commitment"] == seed_commitment(new, SID, "alice")
    again = agent("alice").upload(right)  # a plain retry: the same upload, nothing stored
    assert not again.seed_receipt.stored and not again.masked_receipt.stored
    # Another agent state (no saved seed): a fresh seed, refused by both servers with 409.
    with pytest.raises(AgentError, match=r"409 .*different seed.*--replace"):
        agent("alice", tmp_path / "elsewhere").upload(right)
    # Once the uploads are closed, a replacement is refused and the saved seed stays.
    agent("bob").upload(right)
    sync(ks, cs)
    assert cs._close_uploads(SID)
    with pytest.raises(AgentError, match="409 .*can no longer be replaced"):
        agent("alice").upload(wrong, replace=True)
    assert seed_file.read_bytes() == new and not seed_file.with_name("alice.seed.new").exists()


def test_the_replace_option_and_the_close_are_in_the_servers_contracts(servers, tmp_path):
    app, _, _, _ = servers
    cs_app = create_cs_app(tmp_path / "cs-app", "http://ks", PEER)
    for spec, path in ((app.openapi(), "/sessions/{session_id}/clients/{client_id}/masked"),
                       (cs_app.openapi(), "/sessions/{session_id}/clients/{client_id}/seed")):
        [replace] = [p for p in spec["paths"][path]["put"]["parameters"]
                     if p["name"] == "replace"]
        assert replace["in"] == "query" and replace["schema"]["default"] is False
        assert "409" in replace["description"]
    close = app.openapi()["paths"]["/peer/sessions/{session_id}/uploads/close"]["post"]
    assert close["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "UploadsClose")
