"""Property-based API fuzzing (schemathesis) of the three servers' OpenAPI documents, bounded.

The key server, the compute server and a DistAIM server (server 1, which takes a seed, and
server 2, which takes a share vector: their documents differ there) are fuzzed with every
check schemathesis has (``--checks all``'s single-request checks: no server error, statuses,
headers and bodies as documented, valid data accepted and invalid data refused, the
documented methods only, credentials not ignored), sent as each caller with a real
credential (operator, client, peer), and to the compute server also as no one (every
check's own requests without credentials cover the others'). Path ids are the real session's and
client's, so the requests reach the code behind the credential checks. Any failed check
fails the test. A longer run: ``bench/robustness/fuzz_api.py``; the CLI against live servers
(``schemathesis run URL/openapi.json --checks all``): docs/deployment.md.

Nothing is built when the module is imported: the apps (whose session generates keys), their
OpenAPI schemas and the peer key server are session- and module-scoped fixtures, and the
schemas reach ``parametrize`` through ``schemathesis.pytest.from_fixture``, so collecting the
suite builds nothing and each operation runs as a subtest of its credential's test.
"""

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.core.parameters import ParameterLocation

from feddpsyn.common import wire
from feddpsyn.common.serving import write_private
from feddpsyn.computeserver.app import create_app as create_compute_app
from feddpsyn.demo import ServerProcess, free_port
from feddpsyn.distaim.app import create_app as create_distaim_app
from feddpsyn.distaim.plan import SessionRequest
from feddpsyn.keyserver.app import create_app as create_key_app
from feddpsyn.operator_api import create_session
from feddpsyn.params.parameter_sets import PARAMETER_SETS, SELECTION_SETS

# schemathesis 4.32's lazy schemas (``from_fixture``) read and rename ``item._nodeid``, which
# pytest 9.2's items no longer have (their id is ``item.nodeid``). This alias lets them run;
# the item keeps its id, and each operation is still reported as its own subtest.
if not hasattr(pytest.Function, "_nodeid"):
    pytest.Function._nodeid = property(lambda item: item.nodeid, lambda item, value: None)

PEER = "peer-token-for-fuzzing"
CLIENT = "c1"
SCHEMA = {"columns": [{"name": "a", "type": "categorical", "i2s": ["x", "y"]},
                      {"name": "b", "type": "continuous", "min": 0, "max": 9, "bins": 3}]}
# Operations that would end the session the others are fuzzed on: sent with drawn ids.
DESTRUCTIVE = {("DELETE", "/sessions/{session_id}"), ("POST", "/sessions/{session_id}/run")}
# Bounded in the suite; bench/robustness/fuzz_api.py raises it for the long run.
FUZZ = settings(max_examples=int(os.environ.get("FEDDPSYN_FUZZ_EXAMPLES", "4")), deadline=None,
                derandomize=True, suppress_health_check=list(HealthCheck))


def test_documented_parameter_sets_are_the_servers():
    """The enums of the key server's document (``common.wire``, which may not import
    ``params``) list exactly the parameter sets the servers know."""
    assert set(wire.ParameterSetName.__args__) == set(PARAMETER_SETS)
    assert set(wire.SelectionSetName.__args__) == set(SELECTION_SETS)


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
        schema=SCHEMA, clients=[CLIENT], parameter_set="test-small",
        budget=wire.BudgetSpec(epsilon=1, delta=1e-6), max_rows=100,
        selection=wire.SelectionRequest(mode="none")))
    public = service.preparation.wait_ready(accepted.session_id, timeout=600)
    return wire.SessionCreated(session=public, client_tokens=accepted.client_tokens)


@pytest.fixture(scope="session")
def credentials(state, session) -> dict:
    """Who -> bearer token; ``peer-client`` is filled in by :func:`peer_key_server`, the
    DistAIM servers' by :func:`distaim_apps`."""
    operator = (state / "ks" / "operator.token").read_text().strip()
    return {"operator": operator, "client": session.client_tokens[CLIENT], "peer": PEER,
            "none": None, "peer-client": None}


@pytest.fixture(scope="session")
def distaim_apps(state, credentials):
    """DistAIM servers 1 and 2 (their MPC parties never start: the session's run is only
    sent with drawn ids), one session at each, its client's tokens in ``credentials``."""
    mpc = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    request = SessionRequest(session_id="fuzz", schema=SCHEMA, clients=[CLIENT], epsilon=1,
                             delta=1e-5, mpc_parties=mpc, mpc_timeout=1, mpc_deadline=5)
    apps = {}
    for party in (1, 2):
        app = create_distaim_app(state / f"distaim{party}", party, mpc[party - 1])
        created, _ = app.state.service.create(request)
        credentials[f"distaim{party}-operator"] = (
            state / f"distaim{party}" / "operator.token").read_text().strip()
        credentials[f"distaim{party}-client"] = created.client_tokens[CLIENT]
        apps[party] = app
    yield apps
    for app in apps.values():
        app.state.service.close()


@pytest.fixture(scope="session")
def key_api(key_app):
    return schemathesis.openapi.from_asgi("/openapi.json", key_app)


@pytest.fixture(scope="session")
def compute_api(compute_app):
    return schemathesis.openapi.from_asgi("/openapi.json", compute_app)


@pytest.fixture
def party(request) -> int:
    """Which DistAIM server is fuzzed (``parametrize(..., indirect=True)``, as ``who``)."""
    return request.param


@pytest.fixture
def distaim_api(distaim_apps, party):
    return schemathesis.openapi.from_asgi("/openapi.json", distaim_apps[party])


key_schema = schemathesis.pytest.from_fixture("key_api")
compute_schema = schemathesis.pytest.from_fixture("compute_api")
distaim_schema = schemathesis.pytest.from_fixture("distaim_api")


@pytest.fixture(scope="module")
def peer_key_server(state, peer_port, session, credentials):
    """A key server process for the compute server, with one session and its client."""
    write_private(state / "peer.token", PEER.encode())
    ks = ServerProcess(["keyserver", "--host", "127.0.0.1", "--port", str(peer_port),
                        "--state-dir", str(state / "peer-ks"),
                        "--peer-token-file", str(state / "peer.token")],
                       state / "peer-ks.log", f"http://127.0.0.1:{peer_port}")
    ks.wait_healthy()
    operator = (state / "peer-ks" / "operator.token").read_text().strip()
    created = create_session(ks.url, operator, wire.SessionCreate(
        schema=session.session.schema_, clients=[CLIENT], parameter_set="test-small",
        budget=wire.BudgetSpec(epsilon=1, delta=1e-6), max_rows=100,
        selection=wire.SelectionRequest(mode="none")), timeout=600, poll=0.25)
    credentials["peer-client"] = created.client_tokens[CLIENT]
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


def send(case, credentials: dict, who: str, session_id: str) -> None:
    """Send ``case`` as ``who`` and run every check on the answer. The real session's and
    client's ids replace drawn ones unless the request is sent as no one, the operation would
    end the session, or the ids are the invalid part of a negative case; ``who``'s token
    replaces a drawn Authorization header unless that header is the invalid part."""
    meta = case.meta
    if (who != "none" and (case.method.upper(), case.path) not in DESTRUCTIVE
            and not (meta and meta.is_negative_at(ParameterLocation.PATH))):
        parameters = case.path_parameters or {}
        if "session_id" in parameters:
            parameters["session_id"] = session_id
        if "client_id" in parameters:
            parameters["client_id"] = CLIENT
    as_drawn = meta is not None and meta.is_negative_at(ParameterLocation.HEADER)
    case.call_and_validate(headers=None if as_drawn else headers(credentials, who))


@pytest.mark.parametrize("who", ["client", "operator", "peer"], indirect=True)
@key_schema.parametrize()
@pytest.mark.usefixtures("who")
@FUZZ
def test_key_server_keeps_its_contract(case, who, session, credentials):
    send(case, credentials, who, session.session.session_id)


@pytest.mark.parametrize("who", ["peer-client", "none"], indirect=True)
@compute_schema.parametrize()
@pytest.mark.usefixtures("who")
@FUZZ
def test_compute_server_keeps_its_contract(case, who, peer_key_server, credentials):
    send(case, credentials, who, peer_key_server)


def distaim_credentials(credentials: dict, party: int) -> dict:
    return {**credentials, "operator": credentials[f"distaim{party}-operator"],
            "client": credentials[f"distaim{party}-client"]}


@pytest.mark.parametrize("party", [1, 2], indirect=True)
@pytest.mark.parametrize("who", ["client", "operator"], indirect=True)
@distaim_schema.parametrize()
@pytest.mark.usefixtures("who", "party")
@FUZZ
def test_distaim_server_keeps_its_contract(case, who, party, credentials):
    send(case, distaim_credentials(credentials, party), who, "fuzz")


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
    return path.replace("{session_id}", session_id).replace("{client_id}", CLIENT)


@pytest.mark.parametrize("app_name", ["key", "compute", "distaim"])
def test_malformed_bytes_get_a_documented_status_and_the_one_error_shape(
        app_name, peer_key_server, key_app, compute_app, distaim_apps, session, credentials):
    from starlette.testclient import TestClient

    app, session_id, who_list, expected = {
        "key": (key_app, session.session.session_id, ["operator", "client", "peer", "none"],
                {"/sessions", "/sessions/{session_id}/clients/{client_id}/masked"}),
        "compute": (compute_app, peer_key_server, ["peer-client", "none"],
                    {"/sessions/{session_id}/clients/{client_id}/seed"}),
        "distaim": (distaim_apps[2], "fuzz", ["operator", "client", "none"],
                    {"/sessions", "/sessions/{session_id}/clients/{client_id}/share"}),
    }[app_name]
    if app_name == "distaim":
        credentials = distaim_credentials(credentials, 2)
    operations = _json_body_operations(app)
    assert {p for _, p, _ in operations} >= expected
    client = TestClient(app)
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
