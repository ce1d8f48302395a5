"""One DistAIM server's MPC run: ``python -m distaim.party --pid I --parties H:P,H:P,H:P ...``.

Reads the session (``session.json``) and the client uploads addressed to this server from a
session directory, connects to the two other servers (bound to the configured host, every
wait bounded), admits clients (agreement + degree check, ``distaim.protocol``; then each
client's counts checked inside MPC, ``distaim.validation``), adds the admitted shares, runs
AIM with ``MpcOracle`` and writes ``party<I>.json``: the admission record, the opened
measurements, the accounting, per-step timings and the run's cost (``run_stats``: bytes
sent to and received from each peer, peak resident memory, when AIM started and ended;
like the timings, a server keeps these out of the release it serves). The run's computed
extra delta (the samplers' deviations and the validation's openings, each times
(1 + e^eps)) is checked against the plan's reserve (delta / 1000) before the report is
written, by the check a plan passes at creation on the least its runs add
(``distaim.reserve``); over it, the party exits 7 and writes nothing.

Right after connecting, the three parties exchange the digest of their session plan
(``distaim.plan.plan_digest``) and refuse to run (exit 6) if they differ. ``session.json``
is read as the plan's mapping (``distaim.plan.DistPlanFields.mapping`` plus this server's
own keys), so the digest is the typed plan's; a session written by hand may leave out the
keys the run does not need (an absent ``schedule`` is read as ``distaim.plan.schedule_of``
says: interleaved at participation below 1, as plans without the key ran). The session
directory is what ``distaim.app`` keeps per session (or a test writes); per client, the
explicit share vectors of parties 2 and 3 (``share2.bin``, ``share3.bin``: fixed-width
field elements, ``distaim.sharing.encode_vector``) and party 1's 32-byte seed
(``seed1.bin``).
"""

from __future__ import annotations

import argparse
import json
import resource
import ssl
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from feddpsyn.common.serving import write_private
from feddpsyn.distaim import sharing
from feddpsyn.distaim.mpc_runtime import (
    EM_SECINT_BITS,
    SECINT_BITS,
    PartyAddress,
    exit_after,
    mpyc_module,
    party_runtime,
    traffic,
)
from feddpsyn.distaim.plan import plan_digest, schedule_of
from feddpsyn.distaim.protocol import Participation, Schedule, admit_clients, aggregate
from feddpsyn.distaim.reserve import ReserveExceeded, check_reserve, tv_to_delta
from feddpsyn.distaim.validation import validate_clients, validation_tv
from feddpsyn.params.layout import MarginalLayout

__all__ = ["write_client_upload", "session_modulus", "tls_contexts", "run_party", "main",
           "PlanMismatch", "EXIT_PLAN_MISMATCH", "ReserveExceeded", "EXIT_RESERVE_EXCEEDED"]

EXIT_PLAN_MISMATCH = 6
EXIT_RESERVE_EXCEEDED = 7


class PlanMismatch(RuntimeError):
    """The three servers hold different plans for the session: nothing is run."""


def session_modulus() -> int:
    """The prime of the servers' count type (MPyC's SecInt(64) field)."""
    mpyc_module()
    from mpyc.sectypes import SecInt
    return SecInt(SECINT_BITS).field.modulus


def write_client_upload(session_dir: Path, session_id: str, client_id: str,
                        vector: np.ndarray, modulus: int, parties=(1, 2, 3)) -> int:
    """Seed-compressed shares of ``vector`` into the session's intake; returns bytes written.

    ``parties`` lets a test leave a server out (a partial upload)."""
    seed, (s2, s3) = sharing.share_vector_seeded([int(v) for v in vector], modulus,
                                                 session_id, client_id)
    folder = session_dir / "uploads" / client_id
    folder.mkdir(parents=True, exist_ok=True)
    blobs = {1: ("seed1.bin", seed), 2: ("share2.bin", sharing.encode_vector(s2, modulus)),
             3: ("share3.bin", sharing.encode_vector(s3, modulus))}
    written = 0
    for x in parties:
        name, blob = blobs[x]
        (folder / name).write_bytes(blob)
        written += len(blob)
    return written


def _load_shares(session_dir: Path, session_id: str, x: int, modulus: int,
                 length: int) -> tuple[dict[str, list[int]], dict[str, str]]:
    shares, unreadable = {}, {}
    for folder in sorted((session_dir / "uploads").iterdir()):
        cid = folder.name
        try:
            if x == 1:
                path = folder / "seed1.bin"
                if path.exists():
                    shares[cid] = sharing.expand_share(path.read_bytes(), modulus, session_id,
                                                       cid, length)
            else:
                path = folder / f"share{x}.bin"
                if path.exists():
                    shares[cid] = sharing.decode_vector(path.read_bytes(), modulus, length)
        except ValueError as exc:
            unreadable[cid] = f"unreadable upload: {exc}"
    return shares, unreadable


def tls_contexts(tls: dict | None):
    """Mutual TLS between the servers' MPC channels, from the session's ``mpc_tls``
    (``{"ca": ..., "cert": ..., "key": ...}``: this server's certificate and key, issued
    with common name "MPyC party <pid>" by the consortium's CA). Both directions require a
    certificate from that CA, and a server's name is checked against the pid it claims."""
    if not tls:
        return None, None
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=tls["ca"])
    server.load_cert_chain(tls["cert"], tls["key"])
    server.verify_mode = ssl.CERT_REQUIRED
    client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls["ca"])
    client.load_cert_chain(tls["cert"], tls["key"])
    return server, client


class _PhaseClock:
    """Each phase's wall seconds, this process's CPU seconds and the bytes it sent to its
    peers; a phase runs from the end of the previous one (or the clock's creation)."""

    def __init__(self, rt):
        self.rt = rt
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.sent: dict[str, int] = {}
        self._at = self._now()

    def _now(self) -> tuple[float, float, int]:
        return time.time(), time.process_time(), sum(traffic(self.rt)["sent"].values())

    def end(self, phase: str) -> None:
        now = self._now()
        self.wall[phase] = now[0] - self._at[0]
        self.cpu[phase] = now[1] - self._at[1]
        self.sent[phase] = now[2] - self._at[2]
        self._at = now


def run_party(pid: int, addresses: list[PartyAddress], session_dir: Path, out: Path,
              timeout: float = 120.0) -> dict:
    from feddpsyn.distaim.oracle import SCORE_GRID_BITS, MpcOracle
    from feddpsyn.synthesis.aim import aim
    session = json.loads((session_dir / "session.json").read_text())
    layout = MarginalLayout.for_workload(session["domain_sizes"],
                                         [tuple(c) for c in session["workload"]])
    tls = session.get("mpc_tls")
    if tls:  # paths may name the server as "{pid}" (one file shared by a test's servers)
        tls = {k: str(v).format(pid=pid) for k, v in tls.items()}
    server_tls, client_tls = tls_contexts(tls)
    rt = party_runtime(pid, addresses, ssl_context_server=server_tls,
                       ssl_context_client=client_tls)
    secint, em_secint = rt.SecInt(SECINT_BITS), rt.SecInt(EM_SECINT_BITS)
    modulus = secint.field.modulus
    if modulus != session["modulus"]:
        raise ValueError("session modulus differs from this server's field")
    clock = _PhaseClock(rt)
    rt.run(rt.start(timeout=timeout))
    sys.stderr.write(f"distaim: party {pid} connected to all parties\n")
    sys.stderr.flush()
    # One plan or none: each server's digest of its own plan, compared before any share is
    # read (a server configured with another budget, workload or field stops the run here).
    digests = rt.run(rt.transfer(plan_digest(session)))
    if len(set(digests)) != 1:
        rt.run(rt.shutdown(timeout=timeout))
        raise PlanMismatch("plan digests differ between the servers: " + ", ".join(
            f"server {i + 1} {d[:16]}" for i, d in enumerate(digests)))
    clock.end("connect")  # connected, and one plan at the three
    shares, unreadable = _load_shares(session_dir, session["session_id"], pid + 1, modulus,
                                      layout.length)
    clock.end("load_shares")
    admission = rt.run(admit_clients(rt, modulus, shares))
    excluded = dict(admission.excluded)
    for cid, why in unreadable.items():
        excluded.setdefault(cid, why)
    clock.end("admission")
    # Every consistent client's shares must hold a table's counts before it is summed
    # (distaim.validation): what makes the privacy claim hold for any client input.
    rows_bound = int(session.get("rows_bound", 1 << 20))
    validation = rt.run(validate_clients(rt, secint, layout.offsets, shares,
                                         admission.admitted, rows_bound,
                                         admission.joint_seed))
    excluded.update(validation.invalid)
    admitted = validation.valid
    clock.end("validation")
    rate = Fraction(session.get("participation", 1))
    participation = Participation(admission.joint_seed, rate)
    rounds = session.get("rounds")
    schedule = Schedule(rounds if rounds is not None else 16 * len(layout.domain_sizes),
                        schedule_of(session),
                        bool(session.get("enrolment_one_ways", False)))
    sums: dict[tuple[str, ...], object] = {}

    def totals_at_round(round_index: int | None):
        joined = tuple(schedule.clients_at(participation, admitted, round_index))
        if joined not in sums:
            total = aggregate(shares, joined, modulus, layout.length)
            sums[joined] = secint.array(secint.field.array(np.array(total, dtype=object)))
        return sums[joined]

    aim_started = time.time()
    oracle = MpcOracle(rt, secint, em_secint, None, layout, session["epsilon"],
                       rows_bound=max(1, len(admitted)) * rows_bound,
                       totals_at_round=totals_at_round,
                       score_grid_bits=int(session.get("score_grid_bits", SCORE_GRID_BITS)),
                       grows=schedule.grows(rate))
    result = aim(oracle, layout.domain_sizes, [tuple(c) for c in session["workload"]],
                 Fraction(session["rho"]), max_rounds=session.get("max_rounds", 1000),
                 rounds=session.get("rounds"),
                 round_iters=session.get("round_iters"),
                 final_iters=session.get("final_iters"),
                 rng=np.random.default_rng(0))
    clock.end("aim")
    run_stats = {"aim_started_at": aim_started, "aim_ended_at": time.time(),
                 "phase_cpu_seconds": clock.cpu, "phase_bytes_sent": clock.sent,
                 "bytes": traffic(rt)}
    rt.run(rt.shutdown(timeout=timeout))
    run_stats["cpu_seconds"] = time.process_time()  # the whole process's, imports included
    run_stats["peak_rss_mb"] = round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # kB on Linux
    coupling = float(tv_to_delta(session["epsilon"]))
    validation = validation_tv(len(layout.cliques))
    report = {
        "pid": pid,
        "admitted": admitted,
        "participation": {"rate": str(participation.rate), "schedule": schedule.mode,
                          "window": schedule.window,
                          "enrolment_one_ways": schedule.enrolment_one_ways,
                          "arrival_round": {c: participation.arrival(c) for c in admitted}},
        "excluded": excluded,
        "selected": [list(c) for c in result.selected],
        "measurements": [{"clique": list(m.attrs), "sigma2": m.variance,
                          "values": np.asarray(m.counts).ravel().tolist()}
                         for m in result.measurements],
        "rho_spent": str(result.rho_spent),
        "selection_extra_delta": float(result.delta_spent),
        "measurement_extra_delta": float(oracle.measure_tv) * coupling,
        "validation_extra_delta": float(validation) * coupling,
        "noisy_sizes": result.notes.get("noisy_sizes", []),
        "delta_reserve": session.get("delta_reserve"),
        "within_reserve": _within_reserve(session, oracle.select_tv + oracle.measure_tv
                                          + validation),
        "phases": clock.wall,
        "timings": oracle.timings,
        "run_stats": run_stats,
    }
    write_private(out, json.dumps(report).encode())
    return report


def _within_reserve(session: dict, tv: Fraction) -> bool:
    """The run's total variation from the ideal mechanisms, as extra delta, against the
    plan's reserve (delta / 1000), by the check the plan passed at creation
    (``distaim.reserve``): a run that exceeds it fails (``ReserveExceeded``) before its report
    is written."""
    reserve = session.get("delta_reserve")
    if reserve is None:
        return True
    check_reserve(session["epsilon"], session.get("delta"), Fraction(reserve), lambda _: tv,
                  source="this run's validation and samplers in MPC added a total variation of")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m distaim.party")
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--parties", required=True, help="host:port,host:port,host:port")
    parser.add_argument("--session-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="bound on connecting and on the shutdown barrier (s)")
    parser.add_argument("--deadline", type=float, default=3600.0,
                        help="bound on the whole run (s): the process exits non-zero after it")
    args = parser.parse_args(argv)
    exit_after(args.deadline)
    addresses = []
    for item in args.parties.split(","):
        host, _, port = item.rpartition(":")
        addresses.append(PartyAddress(host, int(port)))
    try:
        run_party(args.pid, addresses, args.session_dir, args.out, args.timeout)
    except PlanMismatch as exc:
        sys.stderr.write(f"distaim: party {args.pid}: {exc}; refusing to run\n")
        return EXIT_PLAN_MISMATCH
    except ReserveExceeded as exc:
        sys.stderr.write(f"distaim: party {args.pid}: {exc}; no result written\n")
        return EXIT_RESERVE_EXCEEDED
    return 0


if __name__ == "__main__":
    sys.exit(main())
