"""Private files written so that a kill at any point leaves the old file or the new one.

Shared by the servers and the client agent (its mask seed); it imports nothing beyond the
standard library, so the client side of the project needs no web framework.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

__all__ = ["sha256_of_file", "write_private", "write_private_stream"]


def write_private(path: Path, data: bytes) -> None:
    """Write atomically with mode 0600 (temporary file, fsync, rename)."""
    _write_atomically(path, (data,), None)


def write_private_stream(path: Path, chunks: Iterable[bytes], sha256_hex: str) -> None:
    """:func:`write_private` of a body that arrives in ``chunks``, kept only when its SHA-256
    is ``sha256_hex``: a truncated or altered transfer leaves the old file (or none) and
    raises ValueError. Memory: one chunk."""
    _write_atomically(path, chunks, sha256_hex)


def _write_atomically(path: Path, chunks: Iterable[bytes], sha256_hex: str | None) -> None:
    """The chunks to a 0600 temporary file beside ``path``, fsynced, then renamed over it
    (and the directory fsynced) only if their SHA-256 is ``sha256_hex`` (None: no check)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    digest = hashlib.sha256() if sha256_hex is not None else None
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in chunks:  # bounded by the body's length
                if digest is not None:
                    digest.update(chunk)
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        if digest is not None and digest.hexdigest() != sha256_hex:
            raise ValueError(f"{path.name}: the body's SHA-256 is not the one announced")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def sha256_of_file(path: Path, block: int = 1 << 20) -> str:
    """The file's SHA-256, read a block at a time (hashlib releases the GIL on each)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for piece in iter(lambda: fh.read(block), b""):  # bounded by the file's size
            digest.update(piece)
    return digest.hexdigest()
