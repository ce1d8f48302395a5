"""A minimal length-prefixed container for lists of serialized ciphertexts.

Format: magic ``FDPB1``, a 4-byte big-endian count, then per item a 4-byte big-endian length
and the bytes. Parsing checks every length against the remaining buffer, so a truncated or
padded body is refused instead of read past its end.

>>> unpack_blobs(pack_blobs([b"ab", b""]))
[b'ab', b'']
"""

from __future__ import annotations

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
