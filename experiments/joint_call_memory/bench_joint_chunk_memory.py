"""Benchmark: the peak resident memory of the compute server's joint-release calls, one chunk
at a time and two at once.

A joint release's call (``crypto.joint_noise``) takes one chunk of cells and, for each, the
key server's encrypted bits; concrete expands each compressed bit into its full mask while
the call runs (~36 KB a bit), so a call's memory grows with cells x bits
(``params.noise_rules.JOINT_MAX_BITS_PER_CALL`` caps it). The compute server's in-process
executor runs as many calls at once as it has threads (two on a 2-core machine), so what a
server process reaches is about its base plus that many calls.

Each case runs in a fresh spawned process, so its high-water mark (``VmHWM``) is its own: it
compiles the ``default`` set's joint circuit at ``--columns`` bits a cell (4 clients, the set's
chunk of cells), makes keys, encrypts ``--concurrent`` chunks' inputs, notes the high-water
mark, then runs the chunks on that many threads (``computeserver.executor.InProcessExecutor``'s
pool) and notes it again. Every call is decrypted and checked against the plaintext circuit.
The output is each case's high-water mark before the calls (keys and inputs), after them,
and the difference per call.

Run: .venv/bin/python experiments/joint_call_memory/bench_joint_chunk_memory.py
     [--columns 256,384] [--concurrent 1,2] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from feddpsyn.fedbench.provenance import commit  # noqa: E402
from feddpsyn.peak_memory import status_kb  # noqa: E402

CLIENTS = 4


def _hwm_mb() -> float:
    kb = status_kb(os.getpid(), "VmHWM")
    if kb is None:
        raise RuntimeError("no VmHWM in /proc/self/status")
    return kb / 1024


def _case(columns: int, concurrent: int, out: Any) -> None:
    """One case in this (fresh) process: its figures go to ``out``."""
    from feddpsyn.crypto.joint_noise import (
        JointNoiseShape,
        compile_joint_release,
        joint_release_plaintext,
    )
    from feddpsyn.params.parameter_sets import get_parameter_set

    p = get_parameter_set("default")
    # A shape of 2-bit uniforms as wide as the columns: its weights are the circuit's types.
    circuit = compile_joint_release(CLIENTS, p.chunk_cells, p.count_bits,
                                    JointNoiseShape(columns // 2, 2), p.p_error)
    circuit.keygen()
    rng = np.random.default_rng(columns * 10 + concurrent)
    calls = []
    for _ in range(concurrent):  # bounded
        masked = [rng.integers(0, 1 << 12, p.chunk_cells).astype(np.int64)
                  for _ in range(CLIENTS)]
        # Stand-ins for the key server's bits: the memory does not depend on their values.
        bits = rng.integers(0, 2, (p.chunk_cells, columns)).astype(np.int64)
        weights = (2 * rng.integers(0, 2, (p.chunk_cells, columns)) - 1).astype(np.int64)
        select = np.ones(p.chunk_cells, dtype=np.int64)
        offset = np.full(p.chunk_cells, columns, dtype=np.int64)
        inputs = circuit.encrypt(*masked, bits, None, None, None)
        want = joint_release_plaintext(masked, bits, weights, select, offset, p.count_bits)
        calls.append((inputs, weights, select, offset, want))
    before = _hwm_mb()

    def run(call):
        inputs, weights, select, offset, want = call
        got = circuit.decrypt(circuit.run(*inputs[:CLIENTS], inputs[CLIENTS], weights,
                                          select, offset))
        return bool(np.array_equal(np.asarray(got, dtype=np.int64), want))

    with ThreadPoolExecutor(max_workers=concurrent) as pool:
        correct = list(pool.map(run, calls))
    after = _hwm_mb()
    out.put({"columns": columns, "concurrent": concurrent, "cells": p.chunk_cells,
             "bits_per_call": p.chunk_cells * columns, "hwm_before_calls_mb": before,
             "hwm_after_calls_mb": after, "per_call_mb": (after - before) / concurrent,
             "correct": all(correct)})


def measure(columns: int, concurrent: int) -> dict:
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    worker = context.Process(target=_case, args=(columns, concurrent, out))
    worker.start()
    try:
        result = out.get(timeout=1800)
    finally:
        worker.join(60)
    if worker.exitcode not in (0, None):
        raise SystemExit(f"the case {columns} bits x {concurrent} calls failed")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", default="256",
                        help="encrypted bits a cell, comma-separated (the envelope: 256)")
    parser.add_argument("--concurrent", default="1,2", help="calls at once, comma-separated")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.json is not None and args.json.exists():
        raise SystemExit(f"{args.json} exists: results are never overwritten")
    try:
        columns = [int(c) for c in args.columns.split(",") if c]
        concurrent = [int(c) for c in args.concurrent.split(",") if c]
    except ValueError:
        parser.error("--columns and --concurrent take comma-separated integers")
    # The circuit's stand-in shape has columns / 2 uniforms of 2 bits, and a joint shape
    # needs an even number of uniforms (its centring).
    if not columns or any(c < 4 or c % 4 for c in columns):
        parser.error("--columns: multiples of 4 bits, at least 4")
    if not concurrent or any(c < 1 or c > 8 for c in concurrent):
        parser.error("--concurrent: 1 to 8 calls")
    os.environ["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
    cases = []
    for c in columns:
        for n in concurrent:
            case = measure(c, n)
            if not case["correct"]:
                raise SystemExit(f"{c} bits x {n} calls do not decrypt to the plaintext circuit")
            print(f"{c} bits a cell x {case['cells']} cells ({case['bits_per_call']} bits a "
                  f"call), {n} at once: peak {case['hwm_after_calls_mb']:.0f} MB "
                  f"({case['hwm_before_calls_mb']:.0f} MB before the calls, "
                  f"{case['per_call_mb']:.0f} MB a call)", flush=True)
            cases.append(case)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "what": "peak resident memory (VmHWM) of the default set's joint-release calls, "
                    "one process a case, the calls on that many threads",
            "command": "python experiments/joint_call_memory/bench_joint_chunk_memory.py "
                       + " ".join(sys.argv[1:]),
            "commit": commit(), "date": datetime.date.today().isoformat(),
            "machine": platform.node(), "clients": CLIENTS, "cases": cases}, indent=1) + "\n")


if __name__ == "__main__":
    main()
