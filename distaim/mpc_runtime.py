"""MPyC runtimes for DistAIM: an in-process one for tests, and a bounded, host-bound one for
the three server processes.

Design concerns (DESIGN.md, "DistAIM on MPyC"): MPyC's stock ``Runtime.start`` listens on all
interfaces and retries its connects forever; a party here **listens only on its configured
host and gives up after a deadline**, its shutdown is bounded too, a peer lost mid-run
aborts the process at once, and ``exit_after`` bounds the whole run. ``mpyc.runtime``
parses ``sys.argv`` when imported, so it is imported here with an empty argument list (the
options a runtime needs are passed explicitly). MPyC keeps its runtime in module globals, so
one process runs one runtime at a time; ``install`` points those globals at ours.

The PRSS keys (from which every secret random bit is derived) come from ``secrets`` at each
party; ``local_runtime(prss_seed=...)`` replaces them by fixed keys so that statistical tests
are reproducible -- never use that outside tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import os
import ssl as ssl_module
import sys
import threading
import time
from dataclasses import dataclass

__all__ = ["PartyAddress", "PartyTimeout", "mpyc_module", "local_runtime", "party_runtime",
           "install", "exit_after", "traffic", "SECINT_BITS", "EM_SECINT_BITS"]

# Counts, utility scores and noise live in SecInt(64) (a 96-bit prime field: 12 bytes per
# shared value); the exponential mechanism's fixed-point weights need room for 2 x 56-bit
# products and run in SecInt(128) after a conversion of the few scores.
SECINT_BITS = 64
EM_SECINT_BITS = 128

log = logging.getLogger("distaim")


PEER_LOST_EXIT = 5
DEADLINE_EXIT = 4


def exit_after(seconds: float) -> threading.Timer:
    """Bound a whole MPC run: after ``seconds`` the process exits (non-zero), whatever it is
    waiting for. MPyC's own waits for peers' messages have no timeout."""
    def _expire() -> None:
        sys.stderr.write(f"distaim: MPC run exceeded its deadline of {seconds} s; aborting\n")
        sys.stderr.flush()
        os._exit(DEADLINE_EXIT)
    timer = threading.Timer(seconds, _expire)
    timer.daemon = True
    timer.start()
    return timer


class PartyTimeout(RuntimeError):
    """A peer did not connect (or answer) before the deadline."""


@dataclass(frozen=True)
class PartyAddress:
    host: str
    port: int


def mpyc_module():
    """``mpyc.runtime``, imported without letting it parse this process's command line."""
    if "mpyc.runtime" not in sys.modules:
        saved = sys.argv
        sys.argv = [saved[0] if saved else "distaim"]
        try:
            import mpyc.runtime  # noqa: F401
        finally:
            sys.argv = saved
    return sys.modules["mpyc.runtime"]


def _options(threshold: int, no_async: bool):
    import mpyc
    mpyc_module()
    options = mpyc._get_arg_parser().parse_args([])
    options.threshold = threshold
    options.no_async = no_async
    options.no_log = True
    return options


def install(rt) -> None:
    """Make ``rt`` the runtime MPyC's modules use (they keep it in module globals)."""
    import mpyc.asyncoro
    import mpyc.mpctools
    import mpyc.random
    import mpyc.secgroups
    import mpyc.seclists
    import mpyc.secpols
    import mpyc.sectypes
    import mpyc.statistics
    for module in (mpyc.sectypes, mpyc.asyncoro, mpyc.mpctools, mpyc.seclists, mpyc.secpols,
                   mpyc.secgroups, mpyc.random, mpyc.statistics):
        module.runtime = rt
    mpyc_module().mpc = rt


def traffic(rt) -> dict[str, dict[str, int]]:
    """Bytes this party sent to and received from each peer so far, by server number (1, 2,
    3): ``sent`` is MPyC's count of its messages (payload + 12-byte header each),
    ``received`` the bytes its connection from that peer delivered (the peer's messages and
    its greeting: pid and PRSS keys). Application bytes, before TLS if the channels use it.
    Read before ``shutdown`` (which drops the connections)."""
    sent, received = {}, {}
    for peer in rt.parties:
        if peer.pid == rt.pid or peer.protocol is None:
            continue
        sent[str(peer.pid + 1)] = int(peer.protocol.nbytes_sent)
        received[str(peer.pid + 1)] = int(getattr(peer.protocol, "nbytes_received", 0))
    return {"sent": sent, "received": received}


def local_runtime(prss_seed: bytes | None = None):
    """A one-party runtime in this process (threshold 0, synchronous evaluation).

    Runs the same MPyC programs as the three servers (only communication is absent), which is
    what the statistical tests of the in-MPC samplers need. ``prss_seed`` fixes the PRSS key
    (tests only).
    """
    runtime = mpyc_module()
    rt = runtime.Runtime(0, [runtime.Party(0)], _options(0, True))
    if prss_seed is not None:
        rt._prss_keys = {(0,): hashlib.sha256(b"distaim/test-prss" + prss_seed).digest()[:16]}
        rt.prfs.cache_clear()
    install(rt)
    rt.start_time = time.time()
    return rt


def party_runtime(pid: int, addresses: list[PartyAddress], threshold: int = 1,
                  ssl_context_server: ssl_module.SSLContext | None = None,
                  ssl_context_client: ssl_module.SSLContext | None = None):
    """A runtime for party ``pid`` of ``len(addresses)`` whose ``start``/``shutdown`` are bound
    to the configured host and to deadlines (see ``BoundRuntime``)."""
    runtime = mpyc_module()
    if not 0 <= pid < len(addresses):
        raise ValueError("pid out of range")
    parties = [runtime.Party(i, a.host, a.port) for i, a in enumerate(addresses)]
    rt = _bound_runtime_class()(pid, parties, _options(threshold, False))
    rt.ssl_context_server = ssl_context_server
    rt.ssl_context_client = ssl_context_client
    install(rt)
    return rt


_BOUND = None


def _bound_runtime_class():
    global _BOUND
    if _BOUND is not None:
        return _BOUND
    runtime = mpyc_module()
    from mpyc.asyncoro import MessageExchanger as _MpycExchanger

    class MessageExchanger(_MpycExchanger):
        """MPyC's channel, but a reset connection is a lost peer too (MPyC re-raises it in
        a callback, where nobody waits for it). It also counts the bytes read from the
        peer's connection (``nbytes_received``: everything the transport delivers, the
        peer's greeting included; MPyC's ``nbytes_sent`` counts its messages, 12-byte
        headers included)."""

        nbytes_received = 0

        def data_received(self, data):
            self.nbytes_received += len(data)
            super().data_received(data)

        def connection_lost(self, exc):
            if exc is not None and self.peer_pid is not None:
                self.runtime.unset_protocol(self.peer_pid)
            super().connection_lost(exc)

    class BoundRuntime(runtime.Runtime):
        """MPyC's runtime with a host-bound listener and bounded connect/shutdown."""

        ssl_context_server = None
        ssl_context_client = None

        async def start(self, timeout: float = 60.0) -> None:
            loop = self._loop
            deadline = loop.time() + timeout
            for peer in self.parties:
                peer.protocol = asyncio.Future(loop=loop) if peer.pid == self.pid else None
            me = self.parties[self.pid]
            server = None
            if self.pid:  # lower pids connect to us
                server = await loop.create_server(lambda: MessageExchanger(self), host=me.host,
                                                  port=me.port, ssl=self.ssl_context_server)
            for peer in self.parties[self.pid + 1:]:
                for attempt in itertools.count():
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise PartyTimeout(f"party {peer.pid} at {peer.host}:{peer.port} did "
                                           f"not accept a connection within {timeout} s")
                    try:
                        await asyncio.wait_for(loop.create_connection(
                            lambda peer=peer: MessageExchanger(self, peer.pid), peer.host,
                            peer.port, ssl=self.ssl_context_client,
                            server_hostname=(f"MPyC party {peer.pid}"
                                             if self.ssl_context_client else None)),
                            timeout=min(remaining, 5.0))
                        break
                    except (TimeoutError, OSError) as exc:
                        if attempt % 50 == 0:
                            log.debug("connect to party %d: %s", peer.pid, exc)
                    await asyncio.sleep(0.1)
            try:
                await asyncio.wait_for(self.parties[self.pid].protocol,
                                       timeout=max(0.1, deadline - loop.time()))
            except TimeoutError:
                raise PartyTimeout(f"not all parties connected within {timeout} s") from None
            finally:
                if server is not None:
                    server.close()
            self.start_time = time.time()

        def unset_protocol(self, peer_pid):
            # A peer that goes away before our shutdown leaves MPyC waiting forever for its
            # messages: fail closed and at once instead (the process exits non-zero, its
            # server records the run as failed).
            if not self._closing:
                sys.stderr.write(f"distaim: MPC peer {peer_pid} disconnected; aborting\n")
                sys.stderr.flush()
                os._exit(PEER_LOST_EXIT)
            super().unset_protocol(peer_pid)

        _closing = False

        async def shutdown(self, timeout: float = 60.0) -> None:
            self._closing = True
            try:
                await asyncio.wait_for(super().shutdown(), timeout=timeout)
            except TimeoutError:
                for peer in self.parties:
                    if peer.pid != self.pid and peer.protocol is not None:
                        peer.protocol.close_connection()
                raise PartyTimeout(f"shutdown barrier not reached within {timeout} s") from None

    _BOUND = BoundRuntime
    return _BOUND
