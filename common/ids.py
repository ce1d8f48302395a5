"""What an id and a server URL may be, checked the same way by the servers (``common.wire``'s
path parameters) and by every command before it sends anything. Standard library only: the
data owner's agent imports it without the web stack.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

__all__ = ["ID_PATTERN", "id_problem", "url_problem"]

# A session, client or release id: what the servers' routes accept in a path.
ID_PATTERN = r"^[A-Za-z0-9_.-]{1,64}$"
_ID = re.compile(ID_PATTERN)


def id_problem(value: str) -> str | None:
    """Why ``value`` is not an id, or None.

    >>> id_problem("s-1a2b") is None
    True
    >>> id_problem("s-1\\nx")
    "'s-1\\\\nx' is not an id (1 to 64 letters, digits, '_', '.' or '-')"
    """
    if _ID.fullmatch(value):
        return None
    return f"{value!r} is not an id (1 to 64 letters, digits, '_', '.' or '-')"


def url_problem(value: str) -> str | None:
    """Why ``value`` is not a server's base URL (http or https, a host, no spaces or control
    characters), or None.

    >>> url_problem("https://ks.example:8443") is None
    True
    >>> url_problem("ks.example:8443")
    "'ks.example:8443' is not a server URL: it starts with http:// or https://"
    """
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
        return f"{value!r} is not a server URL: it holds a space or a control character"
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError as exc:
        return f"{value!r} is not a server URL: {exc}"
    if parts.scheme not in ("http", "https"):
        return f"{value!r} is not a server URL: it starts with http:// or https://"
    if not parts.hostname:
        return f"{value!r} is not a server URL: it names no host"
    if parts.query or parts.fragment:
        return f"{value!r} is not a server URL: a base URL has no query or fragment"
    return None
