"""Keep SIGPIPE ignored in a process that runs concrete.

concrete's runtime (HPX), started by the first circuit run (or compile) in a process, replaces
Python's SIGPIPE disposition (ignored: a broken pipe is an ``EPIPE`` error) with a handler
that aborts. A server writing to a client that just hung up, or a pool feeding a worker that
was just killed, would then take the whole process down (a core dump showed it). Every
process that runs circuits calls :func:`ignore_sigpipe` after them. Through libc, because
``signal.signal`` works only in the main thread and circuits run in others.
"""

from __future__ import annotations

import ctypes
import signal

__all__ = ["ignore_sigpipe"]


def ignore_sigpipe() -> None:
    """Ignore SIGPIPE in this process again (module docstring)."""
    libc = ctypes.CDLL(None)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
    libc.signal(signal.SIGPIPE, ctypes.c_void_p(1))  # SIG_IGN
