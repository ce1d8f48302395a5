"""Property-based API fuzzing (schemathesis) of both servers' OpenAPI documents, bounded.

Every generated request (valid and invalid, with operator, client, peer or no credentials)
must get a non-5xx answer whose body conforms to the documented schema. A longer run:
``bench/fuzz_api.py``.
"""

import os
import tempfile
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from common import wire
from common.serving import write_private
from computeserver.app import create_app as create_compute_app
from feddpsyn.demo import ServerProcess, free_port
from keyserver.app import create_app as create_key_app

STATE = Path(tempfile.mkdtemp(prefix="feddpsyn-fuzz-"))
PEER = "peer-token-for-fuzzing"
KEY_APP = create_key_app(STATE / "ks", PEER)
# The compute server under test talks to a real key server process (started below).
PEER_PORT = free_port()
COMPUTE_APP = create_compute_app(STATE / "cs", f"http://127.0.0.1:{PEER_PORT}", PEER)
OPERATOR = (STATE / "ks" / "operator.token").read_text().strip()
SESSION = KEY_APP.state.service.create_session(wire.SessionCreate(
    schema={"columns": [{"name": "a", "type": "categorical", "i2s": ["x", "y"]},
                        {"name": "b", "type": "continuous", "min": 0, "max": 9, "bins": 3}]},
    clients=["c1"], parameter_set="test-small", budget=wire.BudgetSpec(epsilon=1, delta=1e-6),
    max_rows=100, selection=wire.SelectionRequest(mode="none")))
CLIENT = SESSION.client_tokens["c1"]

CREDENTIALS = {"operator": OPERATOR, "client": CLIENT, "peer": PEER, "none": None,
               "peer-client": None}
# status_code_conformance: every status a server returns is declared in its OpenAPI document.
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
# Bounded in the suite; bench/fuzz_api.py raises it for the long run.
FUZZ = settings(max_examples=int(os.environ.get("FEDDPSYN_FUZZ_EXAMPLES", "12")), deadline=None,
                derandomize=True, suppress_health_check=list(HealthCheck))

key_schema = schemathesis.openapi.from_asgi("/openapi.json", KEY_APP)
compute_schema = schemathesis.openapi.from_asgi("/openapi.json", COMPUTE_APP)


@pytest.fixture(scope="module")
def peer_key_server():
    """A key server process for the compute server, with one session and its client."""
    write_private(STATE / "peer.token", PEER.encode())
    ks = ServerProcess(["keyserver", "--port", str(PEER_PORT), "--state-dir",
                        str(STATE / "peer-ks"), "--peer-token-file", str(STATE / "peer.token")],
                       STATE / "peer-ks.log", f"http://127.0.0.1:{PEER_PORT}")
    ks.wait_healthy()
    operator = (STATE / "peer-ks" / "operator.token").read_text().strip()
    created = wire.SessionCreated.model_validate_json(httpx.post(
        f"{ks.url}/sessions", headers={"Authorization": f"Bearer {operator}",
                                       "Content-Type": "application/json"}, timeout=120,
        content=wire.SessionCreate(schema=SESSION.session.schema_, clients=["c1"],
                                   parameter_set="test-small",
                                   budget=wire.BudgetSpec(epsilon=1, delta=1e-6),
                                   max_rows=100, selection=wire.SelectionRequest(mode="none")
                                   ).model_dump_json(by_alias=True)).content)
    CREDENTIALS["peer-client"] = created.client_tokens["c1"]
    yield created.session.session_id
    ks.stop()


def headers(who: str) -> dict:
    token = CREDENTIALS[who]
    return {"Authorization": f"Bearer {token}"} if token else {}


@pytest.mark.parametrize("who", sorted(CREDENTIALS))
@key_schema.parametrize()
@FUZZ
def test_key_server_never_fails_and_keeps_its_contract(case, who):
    if "session_id" in (case.path_parameters or {}) and who != "none":
        case.path_parameters["session_id"] = SESSION.session.session_id
    case.call_and_validate(headers=headers(who), checks=CHECKS)


@pytest.mark.parametrize("who", ["peer-client", "client", "none"])
@compute_schema.parametrize()
@FUZZ
def test_compute_server_never_fails_and_keeps_its_contract(case, who, peer_key_server):
    if "session_id" in (case.path_parameters or {}) and who == "peer-client":
        case.path_parameters["session_id"] = peer_key_server
    case.call_and_validate(headers=headers(who), checks=CHECKS)


# Bodies no generator is sure to try: bytes that are not UTF-8, a BOM, truncated JSON,
# nesting deeper than the parser's recursion limit, JSON's forbidden constants, nothing.
MALFORMED_BODIES = [b"\xff\xfe\x00{", b"\xc3(", "\ufeff{}".encode(), b'{"schema": ',
                    b"[" * 100_000 + b"]" * 100_000, b'{"epsilon": NaN}', b"", b"null"]


def _json_body_operations(app) -> list[tuple[str, str, dict]]:
    document = app.openapi()
    found = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" in content:
                found.append((method.upper(), path, operation))
    return found


def _concrete_path(path: str, session_id: str) -> str:
    return path.replace("{session_id}", session_id).replace("{client_id}", "c1")


@pytest.mark.parametrize("app_name", ["key", "compute"])
def test_malformed_bytes_get_a_documented_status_and_the_one_error_shape(app_name,
                                                                          peer_key_server):
    from starlette.testclient import TestClient

    app = KEY_APP if app_name == "key" else COMPUTE_APP
    session_id = SESSION.session.session_id if app_name == "key" else peer_key_server
    operations = _json_body_operations(app)
    # POST /sessions and PUT .../masked at the key server, PUT .../seed at the compute server.
    assert {p for _, p, _ in operations} >= (
        {"/sessions", "/sessions/{session_id}/clients/{client_id}/masked"}
        if app_name == "key" else {"/sessions/{session_id}/clients/{client_id}/seed"})
    client = TestClient(app)
    who_list = ["operator", "client", "peer", "none"] if app_name == "key" else [
        "peer-client", "none"]
    for method, path, operation in operations:
        documented = {int(code) for code in operation["responses"] if code.isdigit()}
        for who in who_list:
            for body in MALFORMED_BODIES:
                response = client.request(method, _concrete_path(path, session_id),
                                          content=body, headers={
                                              **headers(who),
                                              "Content-Type": "application/json"})
                assert response.status_code in documented, (method, path, who, body[:20],
                                                             response.status_code,
                                                             response.text)
                if response.status_code >= 400:
                    assert set(response.json()) == {"detail"}
                    assert isinstance(response.json()["detail"], str)
