"""TLS end to end: a private CA (``tests/servers/tls_files.py``), both servers on HTTPS, the
compute server verifying the key server with ``--ca-file``, the operator creating the
session, two owners uploading and the release downloaded, every command over HTTPS with the
same ``--ca-file``; a CA that did not sign the servers is refused in one line."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from feddpsyn.common.credentials import new_token
from feddpsyn.common.files import write_private
from feddpsyn.common.tls import UNTRUSTED
from feddpsyn.demo import ServerProcess
from tests.ports import loopback_port
from tests.servers.tls_files import PrivateCA

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = {"name": "tiny", "columns": [
    {"name": "sex", "type": "categorical", "i2s": ["F", "M"]},
    {"name": "smoker", "type": "categorical", "i2s": ["no", "yes"]}]}


def feddpsyn(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "feddpsyn.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _one_line(result: subprocess.CompletedProcess, needle: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr


def test_a_session_over_tls_with_a_private_ca(tmp_path):
    ca = PrivateCA(tmp_path / "pki")
    ks_cert, ks_key = ca.issue("keyserver")
    cs_cert, cs_key = ca.issue("computeserver")
    other = PrivateCA(tmp_path / "other-pki", "another CA")
    peer = tmp_path / "peer.token"
    write_private(peer, new_token().encode())
    ks_port, cs_port = loopback_port(), loopback_port()
    ks_url, cs_url = f"https://127.0.0.1:{ks_port}", f"https://127.0.0.1:{cs_port}"
    servers = []
    try:
        ks = ServerProcess(["keyserver", "--host", "127.0.0.1", "--port", str(ks_port),
                            "--state-dir", str(tmp_path / "ks"), "--peer-token-file", str(peer),
                            "--ssl-certfile", str(ks_cert), "--ssl-keyfile", str(ks_key)],
                           tmp_path / "ks.log", ks_url)
        servers.append(ks)
        ks.wait_healthy(verify=str(ca.cert_path))
        cs = ServerProcess(["computeserver", "--host", "127.0.0.1", "--port", str(cs_port),
                            "--state-dir", str(tmp_path / "cs"), "--keyserver", ks_url,
                            "--ca-file", str(ca.cert_path), "--peer-token-file", str(peer),
                            "--ssl-certfile", str(cs_cert), "--ssl-keyfile", str(cs_key)],
                           tmp_path / "cs.log", cs_url)
        servers.append(cs)
        cs.wait_healthy(verify=str(ca.cert_path))

        schema = tmp_path / "tiny.schema.json"
        schema.write_text(json.dumps(SCHEMA))
        operator = tmp_path / "ks" / "operator.token"
        created = feddpsyn("session", "create", "--keyserver", ks_url, "--ca-file",
                           ca.cert_path, "--operator-token-file", operator, "--schema", schema,
                           "--clients", "alice,bob", "--epsilon", 50, "--delta", 1e-6,
                           "--parameter-set", "test-small", "--max-rows", 1000,
                           "--selection", "none", "--tokens-dir", tmp_path / "tokens", "-q")
        assert created.returncode == 0, created.stderr
        session = created.stdout.strip()
        assert session.startswith("s-") and "\n" not in session
        for i, owner in enumerate(("alice", "bob")):
            table = tmp_path / f"{owner}.csv"
            with table.open("w", newline="") as fh:
                writer = csv.writer(fh)
                writer.writerow(["sex", "smoker"])
                writer.writerows([["F", "no"], ["M", "yes"], ["F", "yes"]][: 2 + i])
            uploaded = feddpsyn("client", "upload", "--keyserver", ks_url, "--computeserver",
                                cs_url, "--ca-file", ca.cert_path, "--session", session,
                                "--client-id", owner, "--token-file",
                                tmp_path / "tokens" / f"{owner}.token", "--csv", table,
                                "--state-dir", tmp_path / "agent")
            assert uploaded.returncode == 0, uploaded.stderr
        out = tmp_path / "release.json"
        released = feddpsyn("client", "release", "--keyserver", ks_url, "--ca-file",
                            ca.cert_path, "--session", session, "--client-id", "alice",
                            "--token-file", tmp_path / "tokens" / "alice.token", "--wait", 240,
                            "--out", out)
        assert released.returncode == 0, released.stderr
        document = json.loads(out.read_text())
        assert document["contributors"] == ["alice", "bob"]
        assert sum(document["releases"][0]["marginals"]["0"]["counts"]) == pytest.approx(5, abs=8)
        status = feddpsyn("session", "status", "--keyserver", ks_url, "--ca-file", ca.cert_path,
                          "--session", session, "--operator-token-file", operator)
        assert status.returncode == 0 and "released" in status.stdout, status.stderr

        # Another CA vouches for neither server: every command refuses, in one line.
        _one_line(feddpsyn("client", "release", "--keyserver", ks_url, "--ca-file",
                           other.cert_path, "--session", session, "--client-id", "alice",
                           "--token-file", tmp_path / "tokens" / "alice.token", "--out",
                           tmp_path / "x.json"), UNTRUSTED)
        _one_line(feddpsyn("session", "status", "--keyserver", ks_url, "--ca-file",
                           other.cert_path, "--session", session, "--operator-token-file",
                           operator), UNTRUSTED)
        _one_line(feddpsyn("session", "create", "--keyserver", ks_url, "--ca-file",
                           other.cert_path, "--operator-token-file", operator, "--schema",
                           schema, "--clients", "alice", "--epsilon", 1, "--delta", 1e-6,
                           "--max-rows", 1000, "--tokens-dir", tmp_path / "t2"), UNTRUSTED)
        # Plain HTTP to an HTTPS server is not a session either.
        _one_line(feddpsyn("session", "status", "--keyserver", f"http://127.0.0.1:{ks_port}",
                           "--session", session, "--operator-token-file", operator), "")
    finally:
        for server in reversed(servers):
            server.stop()
