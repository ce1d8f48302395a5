"""``common.files``: private files that a kill or a bad transfer never leaves half-written."""

import hashlib

import pytest

from feddpsyn.common.files import sha256_of_file, write_private, write_private_stream


def test_a_streamed_body_is_kept_only_when_its_digest_matches(tmp_path):
    body = [b"a" * 1000, b"b" * 3, b"", b"c" * 70_000]
    digest = hashlib.sha256(b"".join(body)).hexdigest()
    path = tmp_path / "sub" / "keys.bin"
    write_private_stream(path, iter(body), digest)
    assert path.read_bytes() == b"".join(body)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert sha256_of_file(path, block=4096) == digest
    # A truncated transfer: the old file stays, no temporary is left behind.
    with pytest.raises(ValueError, match="SHA-256"):
        write_private_stream(path, iter(body[:2]), digest)
    assert path.read_bytes() == b"".join(body)
    assert sorted(p.name for p in path.parent.iterdir()) == ["keys.bin"]


def test_a_transfer_that_fails_midway_leaves_nothing(tmp_path):
    def broken():
        yield b"x" * 10
        raise ConnectionError("peer went away")

    path = tmp_path / "server.zip"
    with pytest.raises(ConnectionError):
        write_private_stream(path, broken(), "0" * 64)
    assert list(tmp_path.iterdir()) == []
    write_private(path, b"whole")
    assert sha256_of_file(path) == hashlib.sha256(b"whole").hexdigest()
