"""The release of feddpsyn this code is, and which releases may work together.

Every request between the parties (an owner's agent, the operator's commands, the two
servers) carries its sender's version in :data:`VERSION_HEADER`, and every answer the
server's. Each side refuses a peer whose version does not meet its own, in one line saying
which versions meet (:func:`refusal`), before anything of a session is exchanged: two
releases may differ in the plan both servers derive from the public record, in the wire
models or in the circuits, and a session run half by one and half by the other could
publish counts with other noise than its record states.

Versions meet when they share major and minor (``0.2.0`` and ``0.2.5``): a patch release
changes nothing any other party computes. A request without the header (curl, a browser,
an older agent) is served, and its answer carries the server's version. Standard library
only: the data owner's agent imports it.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["VERSION", "VERSION_HEADER", "compatible", "refusal", "VersionMismatch",
           "check_answer"]

# The one place the version is written (pyproject.toml and feddpsyn.__version__ read it).
VERSION = "0.2.0"

VERSION_HEADER = "X-Feddpsyn-Version"


class VersionMismatch(RuntimeError):
    """A peer of a version that does not meet this one's (:func:`refusal`'s message)."""


def _series(version: str) -> tuple[str, str] | None:
    parts = version.strip().split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return None
    return parts[0], parts[1]


def compatible(theirs: str, ours: str = VERSION) -> bool:
    """True when ``theirs`` and ``ours`` share major and minor (module docstring).

    >>> compatible("0.2.7"), compatible("0.3.0"), compatible("1.2.0", "1.2.3")
    (True, False, True)
    >>> compatible("garbage")
    False
    """
    mine = _series(ours)
    return mine is not None and _series(theirs) == mine


def refusal(theirs: str, peer: str, ours: str = VERSION) -> str:
    """The one line that refuses a ``peer`` of version ``theirs``.

    >>> line = refusal("0.3.1", "compute server", "0.2.0")
    >>> line.startswith("this is feddpsyn 0.2.0 and the compute server is 0.3.1: versions meet")
    True
    >>> line.endswith("equal (0.2.x); run the same release on both sides")
    True
    """
    series = _series(ours)
    meet = f"{series[0]}.{series[1]}.x" if series else ours
    return (f"this is feddpsyn {ours} and the {peer} is {theirs[:40]}: versions meet when "
            f"major and minor are equal ({meet}); run the same release on both sides")


def check_answer(headers: Mapping[str, str], peer: str, ours: str = VERSION) -> None:
    """Raise :class:`VersionMismatch` if an answer's headers name a version that does not
    meet ``ours`` (an answer without the header passes: an older server, a proxy's page)."""
    theirs = headers.get(VERSION_HEADER)
    if theirs is not None and not compatible(theirs, ours):
        raise VersionMismatch(refusal(theirs, peer, ours))
