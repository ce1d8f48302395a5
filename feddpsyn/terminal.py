"""What both command lines (``feddpsyn.cli``, ``feddpsyn.distaim_cli``) say and read the same
way: an error line and its exit status, a bearer token from its file."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer

from feddpsyn.common.ids import id_problem, url_problem

__all__ = ["fail", "read_token", "check_id", "check_ids", "check_url", "CA_HELP"]


# One option for the CA on every command that connects: --ca-file.
CA_HELP = "CA certificate (PEM) to verify HTTPS servers against (default: the system's CAs)"


def fail(message: str, code: int = 2) -> NoReturn:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def read_token(path: Path, code: int = 2) -> str:
    """The token in ``path``, or an error naming the file and exit status ``code``."""
    try:
        token = path.read_text().strip()
    except OSError as exc:
        fail(f"cannot read token file {path}: {exc.strerror}", code)
    if not token:
        fail(f"token file {path} is empty", code)
    return token


# Option callbacks: a malformed id or URL is refused in one line, before anything is read or
# sent (``common.ids``); None (an option left out) passes.
def _flag(param: typer.CallbackParam) -> str:
    return max(param.opts, key=len) if param.opts else str(param.name)


def check_id(param: typer.CallbackParam, value: str | None) -> str | None:
    problem = None if value is None else id_problem(value)
    if problem:
        fail(f"{_flag(param)}: {problem}")
    return value


def check_ids(param: typer.CallbackParam, value: str | None) -> str | None:
    """A comma-separated list of ids (blanks around the commas allowed)."""
    for part in [] if value is None else [p.strip() for p in value.split(",") if p.strip()]:
        problem = id_problem(part)
        if problem:
            fail(f"{_flag(param)}: {problem}")
    return value


def check_url(param: typer.CallbackParam, value: str | None) -> str | None:
    problem = None if value is None else url_problem(value)
    if problem:
        fail(f"{_flag(param)}: {problem}")
    return value
