"""Loopback ports for the servers the tests start: free now, never handed out twice in one
process, and never one that the kernel could hand to anything else.

``feddpsyn.demo.free_port`` binds port 0, reads the port and closes the socket. Linux picks
such a port at random among the odd ports of ``ip_local_port_range`` (14,116 of them on a
default range), so two successive bind(0) draws return the same port about once in 14,000
(measured on this machine: 73 in 1,000,000 pairs, 14,104 distinct ports). ``free_port``
now draws again rather than hand out a port twice in one process, but the other test worker,
and every outgoing connection, still takes ports from the same range between a draw and the
server's bind (before that redraw, ``start_servers``' two ports and DistAIM's port triples
collided in about 4e-3 of suite runs, estimated).

Here a port comes from just below the kernel's ephemeral range (which neither bind(0) nor an
outgoing connection ever uses), from the residue class of this xdist worker (two workers
never draw the same port), is checked free by binding it, and is remembered, so one process
never gets it twice. ``tests/conftest.py`` puts :func:`loopback_port` in place of
``feddpsyn.demo.free_port`` for everything the tests start in-process.
"""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path

__all__ = ["loopback_port"]

_SPAN = 8192  # ports below the ephemeral range to draw from
_TRIES = 2000
_handed_out: set[int] = set()
_lock = threading.Lock()
_draw = random.Random()  # which free port a test server gets: nothing private rests on it


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _worker() -> tuple[int, int]:
    """(this worker's index, the number of workers); (0, 1) outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0
    return index % max(count, 1), max(count, 1)


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def loopback_port() -> int:
    """A free port on 127.0.0.1 for a server this process is about to start."""
    high = _ephemeral_low()
    low = max(1024, high - _SPAN)
    index, count = _worker()
    candidates = range(low + index, high, count)
    with _lock:
        for _ in range(_TRIES):  # bounded: a busy range fails loudly below
            port = _draw.choice(candidates)
            if port not in _handed_out and _is_free(port):
                _handed_out.add(port)
                return port
    raise RuntimeError(f"no free loopback port in {_TRIES} draws from [{low}, {high})")
