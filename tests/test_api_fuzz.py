"""Property-based API fuzzing (schemathesis) of both servers' OpenAPI documents, bounded.

Every generated request (valid and invalid, with operator, client, peer or no credentials)
must get a non-5xx answer whose body conforms to the documented schema. A longer run:
``bench/fuzz_api.py``.

Nothing is built when the module is imported: the apps (whose session generates keys), their
OpenAPI schemas and the peer key server are session- and module-scoped fixtures, and the
schemas reach ``parametrize`` through ``schemathesis.pytest.from_fixture``, so collecting the
suite builds nothing and each operation runs as a subtest of its credential's test.
"""

import os

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
from feddpsyn.operator_api import create_session
from keyserver.app import create_app as create_key_app

# schemathesis 4.32's lazy schemas (``from_fixture``) read and rename ``item._nodeid``, which
# pytest 9.2's items no longer have (their id is ``item.nodeid``). This alias lets them run;
# the item keeps its id, and each operation is still reported as its own subtest.
if not hasattr(pytest.Function, "_nodeid"):
    pytest.Function._nodeid = property(lambda item: item.nodeid, lambda item, value: None)

PEER = "peer-token-for-fuzzing"
# Who a request is sent as; the fixture ``credentials`` gives each its token.
WHO = ["client", "none", "operator", "peer", "peer-client"]
# status_code_conformance: every status a server returns is declared in its OpenAPI document.
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]
# Bounded in the suite; bench/fuzz_api.py raises it for the long run.
FUZZ = settings(max_examples=int(os.environ.get("FEDDPSYN_FUZZ_EXAMPLES", "12")), deadline=None,
                derandomize=True, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="session")
def state(tmp_path_factory):
    return tmp_path_factory.mktemp("feddpsyn-fuzz")


@pytest.fixture(scope="session")
def peer_port() -> int:
    """The port of the real key server process that the compute server under test talks to."""
    return free_port()


@pytest.fixture(scope="session")
def key_app(state):
    app = create_key_app(state / "ks", PEER)
    yield app
    # Sessions the fuzzer created are being prepared in child processes: stop them.
    app.state.service.close()


@pytest.fixture(scope="session")
def compute_app(state, peer_port):
    return create_compute_app(state / "cs", f"http://127.0.0.1:{peer_port}", PEER)


@pytest.fixture(scope="session")
def session(key_app):
    """A session at the in-process key server, with its one client, ready."""
    service = key_app.state.service
    accepted = service.create_session(wire.SessionCreate(
        schema={"columns": [{"name": "a", "type": "categorical", "i2s": ["x", "y"]},
                            {"name": "b", "type": "continuous", "min": 0, "max": 9, "bins": 3}]},
        clients=["c1"], parameter_set="test-small",
        budget=wire.BudgetSpec(epsilon=1, delta=1e-6), max_rows=100,
        selection=wire.SelectionRequest(mode="none")))
    public = service.preparation.wait_ready(accepted.session_id, timeout=600)
    return wire.SessionCreated(session=public, client_tokens=accepted.client_tokens)


@pytest.fixture(scope="session")
def credentials(state, session) -> dict:
    """Who -> bearer token; ``peer-client`` is filled in by :func:`peer_key_server`."""
    operator = (state / "ks" / "operator.token").read_text().strip()
    return {"operator": operator, "client": session.client_tokens["c1"], "peer": PEER,
            "none": None, "peer-client": None}


@pytest.fixture(scope="session")
def key_api(key_app):
    return schemathesis.openapi.from_asgi("/openapi.json", key_app)


@pytest.fixture(scope="session")
def compute_api(compute_app):
    return schemathesis.openapi.from_asgi("/openapi.json", compute_app)


key_schema = schemathesis.pytest.from_fixture("key_api")
compute_schema = schemathesis.pytest.from_fixture("compute_api")


@pytest.fixture(scope="module")
def peer_key_server(state, peer_port, session, credentials):
    """A key server process for the compute server, with one session and its client."""
    write_private(state / "peer.token", PEER.encode())
    ks = ServerProcess(["keyserver", "--port", str(peer_port), "--state-dir",
                        str(state / "peer-ks"), "--peer-token-file", str(state / "peer.token")],
                       state / "peer-ks.log", f"http://127.0.0.1:{peer_port}")
    ks.wait_healthy()
    operator = (state / "peer-ks" / "operator.token").read_text().strip()
    created = create_session(ks.url, operator, wire.SessionCreate(
        schema=session.session.schema_, clients=["c1"], parameter_set="test-small",
        budget=wire.BudgetSpec(epsilon=1, delta=1e-6), max_rows=100,
        selection=wire.SelectionRequest(mode="none")), timeout=600, poll=0.25)
    credentials["peer-client"] = created.client_tokens["c1"]
    yield created.session.session_id
    ks.stop()


@pytest.fixture
def who(request) -> str:
    """Who a fuzzed request is sent as: each test's ``parametrize(..., indirect=True)``. A
    fixture rather than a plain argument, since the lazily loaded schema's test takes its
    arguments from fixtures."""
    return request.param


def headers(credentials: dict, who: str) -> dict:
    token = credentials[who]
    return {"Authorization": f"Bearer {token}"} if token else {}


@pytest.mark.parametrize("who", WHO, indirect=True)
@key_schema.parametrize()
@pytest.mark.usefixtures("who")
@FUZZ
def test_key_server_never_fails_and_keeps_its_contract(case, who, session, credentials):
    if "session_id" in (case.path_parameters or {}) and who != "none":
        case.path_parameters["session_id"] = session.session.session_id
    case.call_and_validate(headers=headers(credentials, who), checks=CHECKS)


@pytest.mark.parametrize("who", ["peer-client", "client", "none"], indirect=True)
@compute_schema.parametrize()
@pytest.mark.usefixtures("who")
@FUZZ
def test_compute_server_never_fails_and_keeps_its_contract(case, who, peer_key_server,
                                                           credentials):
    if "session_id" in (case.path_parameters or {}) and who == "peer-client":
        case.path_parameters["session_id"] = peer_key_server
    case.call_and_validate(headers=headers(credentials, who), checks=CHECKS)


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
def test_malformed_bytes_get_a_documented_status_and_the_one_error_shape(
        app_name, peer_key_server, key_app, compute_app, session, credentials):
    from starlette.testclient import TestClient

    app = key_app if app_name == "key" else compute_app
    session_id = session.session.session_id if app_name == "key" else peer_key_server
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
                                              **headers(credentials, who),
                                              "Content-Type": "application/json"})
                assert response.status_code in documented, (method, path, who, body[:20],
                                                             response.status_code,
                                                             response.text)
                if response.status_code >= 400:
                    assert set(response.json()) == {"detail"}
                    assert isinstance(response.json()["detail"], str)
