"""DistAIM server intake (distaim.app) and the end-to-end demo on loopback."""

import base64
import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from feddpsyn.distaim import sharing
from feddpsyn.distaim.app import create_app
from feddpsyn.distaim.party import session_modulus

SCHEMA = {"name": "t", "columns": [
    {"name": "a", "type": "categorical", "i2s": ["x", "y", "z"]},
    {"name": "b", "type": "categorical", "i2s": ["u", "v"]}]}
CELLS = 3 + 2 + 6
MPC = ["127.0.0.1:9301", "127.0.0.1:9302", "127.0.0.1:9303"]


def _server(tmp_path, x):
    app = create_app(tmp_path / f"s{x}", x, MPC[x - 1])
    return TestClient(app)


def _auth(token):
    return {"Authorization": f"Bearer {token}"}


def _create(client, tmp_path, x, **changes):
    op = (tmp_path / f"s{x}" / "operator.token").read_text().strip()
    body = {"session_id": "sx", "schema": SCHEMA, "clients": ["a", "b"], "epsilon": 1.0,
            "delta": 1e-5, "mpc_parties": MPC} | changes
    return client.post("/sessions", json=body, headers=_auth(op)), op


def test_intake_checks_credentials_kind_and_idempotence(tmp_path):
    p = session_modulus()
    seed, (s2, _) = sharing.share_vector_seeded(list(range(CELLS)), p, "sx", "a")
    vector = {"vector_b64": base64.b64encode(sharing.encode_vector(s2, p)).decode()}
    with _server(tmp_path, 1) as first, _server(tmp_path, 2) as second:
        made1, op = _create(first, tmp_path, 1)
        made2, _ = _create(second, tmp_path, 2)
        assert made1.status_code == made2.status_code == 201
        assert made1.json()["plan_digest"] == made2.json()["plan_digest"]
        tok1, tok2 = made1.json()["client_tokens"], made2.json()["client_tokens"]
        assert tok1["a"] != tok2["a"]  # each server issues its own tokens
        url = "/sessions/sx/clients/a/share"
        assert first.put(url, json={"seed_hex": seed.hex()}).status_code == 401
        assert first.put(url, json={"seed_hex": seed.hex()},
                         headers=_auth(tok1["b"])).status_code == 403
        assert first.put(url, json={"seed_hex": seed.hex()},
                         headers=_auth(tok2["a"])).status_code == 403
        assert first.put(url, json=vector, headers=_auth(tok1["a"])).status_code == 422
        ok = first.put(url, json={"seed_hex": seed.hex()}, headers=_auth(tok1["a"]))
        assert ok.status_code == 200 and ok.json()["stored"] is True
        again = first.put(url, json={"seed_hex": seed.hex()}, headers=_auth(tok1["a"]))
        assert again.json()["stored"] is False
        other = first.put(url, json={"seed_hex": "0" * 64}, headers=_auth(tok1["a"]))
        assert other.status_code == 409
        short = {"vector_b64": base64.b64encode(b"\0" * 12).decode()}
        assert second.put(url, json=short, headers=_auth(tok2["a"])).status_code == 409
        assert second.put(url, json=vector, headers=_auth(tok2["a"])).status_code == 200
        info = first.get("/sessions/sx", headers=_auth(tok1["b"])).json()
        assert (info["party"], info["cells"], int(info["modulus"])) == (1, CELLS, p)
        assert info["plan_digest"] == made1.json()["plan_digest"]
        assert second.get("/sessions/sx", headers=_auth(tok2["b"])).json()["party"] == 2
        status = first.get("/sessions/sx/status", headers=_auth(tok1["b"])).json()
        assert status["clients_uploaded"] == ["a"] and status["clients_missing"] == ["b"]
        assert first.post("/sessions/sx/run", headers=_auth(tok1["a"])).status_code == 403
        assert first.get("/sessions/nope/status", headers=_auth(op)).status_code == 404
        assert first.get("/sessions/sx/result", headers=_auth(op)).status_code == 409
    assert (tmp_path / "s1" / "sessions" / "sx" / "uploads" / "a" / "seed1.bin"
            ).read_bytes() == seed


def test_operator_create_is_typed_idempotent_and_refuses_bad_plans(tmp_path):
    with _server(tmp_path, 1) as first:
        made, op = _create(first, tmp_path, 1)
        assert made.status_code == 201 and set(made.json()["client_tokens"]) == {"a", "b"}
        token_file = tmp_path / "s1" / "operator.token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        body = {"session_id": "sx", "schema": SCHEMA, "clients": ["a", "b"],
                "epsilon": 1.0, "delta": 1e-5, "mpc_parties": MPC}
        assert first.post("/sessions", json=body).status_code == 401
        assert first.post("/sessions", json=body,
                          headers=_auth(made.json()["client_tokens"]["a"])).status_code == 403
        again, _ = _create(first, tmp_path, 1)
        assert again.status_code == 200 and again.json()["created"] is False
        assert again.json()["client_tokens"] == {}
        assert again.json()["plan_digest"] == made.json()["plan_digest"]
        assert _create(first, tmp_path, 1, epsilon=2.0)[0].status_code == 409
        # refused before anything is stored: bad workload, wrong own MPC address, bad input
        assert _create(first, tmp_path, 1, session_id="s2",
                       workload=[[0, 5]])[0].status_code == 409
        wrong = _create(first, tmp_path, 1, session_id="s2",
                        mpc_parties=["127.0.0.1:1", MPC[1], MPC[2]])[0]
        assert wrong.status_code == 409 and "9301" in wrong.json()["detail"]
        assert _create(first, tmp_path, 1, session_id="s2",
                       participation="3/2")[0].status_code == 409
        assert _create(first, tmp_path, 1, session_id="s2",
                       participation="1.5")[0].status_code == 422
        assert _create(first, tmp_path, 1, session_id="s2",
                       clients=["a", "a"])[0].status_code == 422
        assert _create(first, tmp_path, 1, session_id="s2", extra=1)[0].status_code == 422
        assert first.get("/sessions/s2/status", headers=_auth(op)).status_code == 404
        assert first.delete("/sessions/sx", headers=_auth(op)).status_code == 204
        assert first.get("/sessions/sx/status", headers=_auth(op)).status_code == 404
        assert first.get("/server").json()["mpc_address"] == MPC[0]


@pytest.mark.timeout(300)
def test_demo_end_to_end(tmp_path):
    from feddpsyn.distaim_demo import run_distaim_demo
    report = run_distaim_demo(tmp_path / "out", rounds=3, say=lambda _: None)
    assert report["rows_union"] == 740 and report["excluded_clients"] == {}
    assert report["epsilon_spent"] <= report["epsilon_budget"]
    assert report["noise"]["extra_delta"] <= report["noise"]["delta_reserved"]
    assert set(report["workload_error"]) == {"one_way", "two_way", "three_way"}
    assert report["workload_error"]["two_way"] < 0.6
    rows = (tmp_path / "out" / "synthetic.csv").read_text().splitlines()
    assert len(rows) == report["rows_synthetic"] + 1
    assert np.all(np.array(report["upload_bytes_per_client"]) < 100_000)


def test_tls_on_the_mpc_channels_is_part_of_the_plan(tmp_path):
    tls = {"ca": "ca.pem", "cert": "party{pid}.pem", "key": "party{pid}.key"}
    with TestClient(create_app(tmp_path / "s1", 1, MPC[0], mpc_tls=tls)) as first:
        assert first.get("/server").json()["mpc_channel_tls"] is True
        plain, _ = _create(first, tmp_path, 1)
        assert plain.status_code == 409 and "with TLS" in plain.json()["detail"]
        made, _ = _create(first, tmp_path, 1, mpc_channel_tls=True)
        assert made.status_code == 201 and made.json()["plan"]["mpc_channel_tls"] is True
    local = json.loads((tmp_path / "s1" / "sessions" / "sx" / "session.json").read_text())
    assert local["mpc_tls"] == tls and local["pid"] == 0
