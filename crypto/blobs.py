"""A minimal length-prefixed container for lists of serialized ciphertexts.

Format: magic ``FDPB1``, a 4-byte big-endian count, then per item a 4-byte big-endian length
and the bytes. Parsing checks every length against the remaining buffer, so a truncated or
padded body is refused instead of read past its end. A container in a file can be read one
item at a time (:func:`blob_index`, :func:`read_blob`), so a step that needs one chunk of a
client's upload at a time never holds the whole upload.

>>> unpack_blobs(pack_blobs([b"ab", b""]))
[b'ab', b'']
"""

from __future__ import annotations

from pathlib import Path

_MAGIC = b"FDPB1"


class BlobFormatError(ValueError):
    pass


def pack_blobs(items: list[bytes]) -> bytes:
    parts = [_MAGIC, len(items).to_bytes(4, "big")]
    for item in items:
        parts += [len(item).to_bytes(4, "big"), item]
    return b"".join(parts)


def unpack_blobs(data: bytes, *, expected: int | None = None) -> list[bytes]:
    if not data.startswith(_MAGIC) or len(data) < len(_MAGIC) + 4:
        raise BlobFormatError("not a ciphertext container (bad magic or too short)")
    pos = len(_MAGIC)
    count = int.from_bytes(data[pos:pos + 4], "big")
    pos += 4
    if expected is not None and count != expected:
        raise BlobFormatError(f"container holds {count} items, expected {expected}")
    items = []
    for i in range(count):
        if pos + 4 > len(data):
            raise BlobFormatError(f"container truncated at item {i}")
        size = int.from_bytes(data[pos:pos + 4], "big")
        pos += 4
        if pos + size > len(data):
            raise BlobFormatError(f"container truncated inside item {i}")
        items.append(data[pos:pos + size])
        pos += size
    if pos != len(data):
        raise BlobFormatError("trailing bytes after the last item")
    return items


def blob_index(path: Path, *, expected: int | None = None) -> list[tuple[int, int]]:
    """(offset, size) of each item of the container in the file ``path``, from its headers
    alone, with :func:`unpack_blobs`'s checks.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp) / "blobs.bin"
    ...     _ = path.write_bytes(pack_blobs([b"ab", b"cde"]))
    ...     index = blob_index(path, expected=2)
    ...     (index, read_blob(path, index[1]))
    ([(13, 2), (19, 3)], b'cde')
    """
    with open(path, "rb") as handle:
        head = handle.read(len(_MAGIC) + 4)
        if not head.startswith(_MAGIC) or len(head) < len(_MAGIC) + 4:
            raise BlobFormatError("not a ciphertext container (bad magic or too short)")
        count = int.from_bytes(head[len(_MAGIC):], "big")
        if expected is not None and count != expected:
            raise BlobFormatError(f"container holds {count} items, expected {expected}")
        end = handle.seek(0, 2)
        pos, items = len(head), []
        for i in range(count):
            handle.seek(pos)
            size_bytes = handle.read(4)
            if len(size_bytes) < 4:
                raise BlobFormatError(f"container truncated at item {i}")
            size = int.from_bytes(size_bytes, "big")
            pos += 4
            if pos + size > end:
                raise BlobFormatError(f"container truncated inside item {i}")
            items.append((pos, size))
            pos += size
        if pos != end:
            raise BlobFormatError("trailing bytes after the last item")
    return items


def read_blob(path: Path, entry: tuple[int, int]) -> bytes:
    """One item of the container in ``path``, at an (offset, size) of :func:`blob_index`."""
    offset, size = entry
    with open(path, "rb") as handle:
        handle.seek(offset)
        item = handle.read(size)
    if len(item) != size:
        raise BlobFormatError("container changed since it was indexed")
    return item
