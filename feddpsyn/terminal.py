"""What both command lines (``feddpsyn.cli``, ``feddpsyn.distaim_cli``) say and read the same
way: an error line and its exit status, a bearer token from its file."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer

__all__ = ["fail", "read_token"]


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
