"""Every command that connects refuses a malformed id or server URL in one line, exit 2,
before it reads a file or sends anything (``common.ids``, ``feddpsyn.terminal``'s option
callbacks). In process (typer's runner): no server."""

import pytest
from typer.testing import CliRunner

from feddpsyn.cli import app
from feddpsyn.common.ids import id_problem, url_problem

GOOD_URL = "http://127.0.0.1:9"
BAD_IDS = ["s-1\nx", "", "a/b", "x" * 65, "s 1", "../etc"]
BAD_URLS = ["127.0.0.1:8700", "ftp://host", "http://", "http://host\n", "http://h:port",
            "http://host/?q=1"]


def _run(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "100"})


def _one_line_refusal(result, flag: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: "), result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("bad", BAD_IDS)
def test_a_malformed_id_is_refused_in_one_line_by_every_command(bad, tmp_path):
    token = tmp_path / "t.token"  # never read: the id is checked first
    cases = [
        (["client", "upload", "--keyserver", GOOD_URL, "--computeserver", GOOD_URL,
          "--session", bad, "--client-id", "alice", "--token-file", str(token), "--csv",
          "x.csv"], "--session"),
        (["client", "upload", "--keyserver", GOOD_URL, "--computeserver", GOOD_URL,
          "--session", "s-1", "--client-id", bad, "--token-file", str(token), "--csv",
          "x.csv"], "--client-id"),
        (["client", "release", "--keyserver", GOOD_URL, "--session", bad, "--client-id", "a",
          "--token-file", str(token), "--out", "r.json"], "--session"),
        (["session", "status", "--keyserver", GOOD_URL, "--session", bad,
          "--operator-token-file", str(token)], "--session"),
        (["distaim", "upload", "--session", bad, "--client-id", "a", "--token-file",
          str(token), "--csv", "x.csv", "--schema", "s.json"], "--session"),
    ]
    if bad:  # an empty item of a comma-separated list is skipped, as the command does
        cases.append((["session", "create", "--keyserver", GOOD_URL, "--operator-token-file",
                       str(token), "--schema", "s.json", "--clients", f"alice,{bad}",
                       "--epsilon", "1", "--delta", "1e-5", "--tokens-dir", str(tmp_path)],
                      "--clients"))
    for args, flag in cases:
        _one_line_refusal(_run(*args), flag)


@pytest.mark.parametrize("bad", BAD_URLS)
def test_a_malformed_server_url_is_refused_in_one_line(bad, tmp_path):
    token = tmp_path / "t.token"
    _one_line_refusal(_run("client", "upload", "--keyserver", bad, "--computeserver", GOOD_URL,
                           "--session", "s-1", "--client-id", "a", "--token-file", str(token),
                           "--csv", "x.csv"), "--keyserver")
    _one_line_refusal(_run("client", "upload", "--keyserver", GOOD_URL, "--computeserver", bad,
                           "--session", "s-1", "--client-id", "a", "--token-file", str(token),
                           "--csv", "x.csv"), "--computeserver")
    _one_line_refusal(_run("session", "status", "--keyserver", bad, "--session", "s-1",
                           "--operator-token-file", str(token)), "--keyserver")
    _one_line_refusal(_run("computeserver", "--state-dir", str(tmp_path / "cs"),
                           "--keyserver", bad), "--keyserver")


def test_the_checks_accept_what_the_servers_accept():
    assert id_problem("s-20261207-ab_c.1") is None
    assert url_problem("https://ks.example.org:8443/prefix") is None
    assert url_problem("http://[::1]:8700") is None
