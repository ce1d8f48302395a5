"""DistAIM server intake (distaim.app) and the end-to-end demo on loopback."""

import base64
import json

import numpy as np
import pytest
from fastapi.testclient import TestClient

from distaim import sharing
from distaim.app import create_app
from distaim.party import session_modulus
from feddpsyn.serving import token_hash

SIZES = [3, 2]
WORKLOAD = [(0, 1)]
CELLS = 3 + 2 + 6


def _server(tmp_path, pid):
    state = tmp_path / f"s{pid}"
    state.mkdir()
    session = {"session_id": "sx", "pid": pid, "mpc_parties": [["127.0.0.1", 1]] * 3,
               "domain_sizes": SIZES, "workload": WORKLOAD, "modulus": session_modulus(),
               "epsilon": 1.0, "rho": "1/10",
               "client_token_hashes": {"a": token_hash("tok-a"), "b": token_hash("tok-b")},
               "operator_token_hash": token_hash("op")}
    (state / "session.json").write_text(json.dumps(session))
    return TestClient(create_app(state))


def _auth(token):
    return {"Authorization": f"Bearer {token}"}


def test_intake_checks_credentials_kind_and_idempotence(tmp_path):
    p = session_modulus()
    seed, (s2, _) = sharing.share_vector_seeded(list(range(CELLS)), p, "sx", "a")
    vector = {"vector_b64": base64.b64encode(sharing.encode_vector(s2, p)).decode()}
    with _server(tmp_path, 0) as first, _server(tmp_path, 1) as second:
        url = "/sessions/sx/clients/a/share"
        assert first.put(url, json={"seed_hex": seed.hex()}).status_code == 401
        assert first.put(url, json={"seed_hex": seed.hex()},
                         headers=_auth("tok-b")).status_code == 403
        assert first.put(url, json=vector, headers=_auth("tok-a")).status_code == 422
        ok = first.put(url, json={"seed_hex": seed.hex()}, headers=_auth("tok-a"))
        assert ok.status_code == 200 and ok.json()["stored"] is True
        again = first.put(url, json={"seed_hex": seed.hex()}, headers=_auth("tok-a"))
        assert again.json()["stored"] is False
        other = first.put(url, json={"seed_hex": "0" * 64}, headers=_auth("tok-a"))
        assert other.status_code == 409
        short = {"vector_b64": base64.b64encode(b"\0" * 12).decode()}
        assert second.put(url, json=short, headers=_auth("tok-a")).status_code == 422
        assert second.put(url, json=vector, headers=_auth("tok-a")).status_code == 200
        info = first.get("/sessions/sx", headers=_auth("tok-b")).json()
        assert (info["party"], info["cells"], int(info["modulus"])) == (1, CELLS, p)
        assert second.get("/sessions/sx", headers=_auth("tok-b")).json()["party"] == 2
        status = first.get("/sessions/sx/status", headers=_auth("tok-b")).json()
        assert status["clients_uploaded"] == ["a"] and status["clients_missing"] == ["b"]
        assert first.post("/sessions/sx/run", headers=_auth("tok-a")).status_code == 403
        assert first.get("/sessions/nope/status", headers=_auth("op")).status_code == 404
        assert first.get("/sessions/sx/result", headers=_auth("op")).status_code == 409
    assert (tmp_path / "s0" / "uploads" / "a" / "seed1.bin").read_bytes() == seed


@pytest.mark.timeout(300)
def test_demo_end_to_end(tmp_path):
    from distaim.demo import run_distaim_demo
    report = run_distaim_demo(tmp_path / "out", rounds=3, say=lambda _: None)
    assert report["rows_union"] == 740 and report["excluded_clients"] == {}
    assert report["epsilon_spent"] <= report["epsilon_budget"]
    assert report["noise"]["extra_delta"] <= report["noise"]["delta_reserved"]
    assert set(report["workload_error"]) == {"one_way", "two_way", "three_way"}
    assert report["workload_error"]["two_way"] < 0.6
    rows = (tmp_path / "out" / "synthetic.csv").read_text().splitlines()
    assert len(rows) == report["rows_synthetic"] + 1
    assert np.all(np.array(report["upload_bytes_per_client"]) < 100_000)
