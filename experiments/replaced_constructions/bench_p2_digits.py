"""P2 on base-4 digits against P2 on one k+1-bit ciphertext a cell, in the same run.

The baseline is ``crypto/indif.py`` as it was at ``--baseline`` (default be18d86: one
ciphertext of M per cell, k bit extractions, XORs packed two bits a lookup), loaded from git;
the candidate is the current module (``crypto.indif``: M's base-4 digits, a ripple carry with
the clear offset's digits, every lookup 3 bits wide). Both are compiled for each chunk size
at the same k, keyed once, and run on the same inputs, old and new alternating (the order
swapped every repetition, so machine noise hits both); every decrypted score is checked
against the clear InDif. Printed per size: bootstraps, the optimiser's complexity, seconds of
each and their ratio; then the demo's P2 (its chunk cut at its k) weighted by those seconds.

Run: .venv/bin/python experiments/replaced_constructions/bench_p2_digits.py [--bits 12] \
         [--repeats 3] [--sizes 8 16 32]

Measured (k = 12, ``--repeats 2``, 2 cores shared with other processes, so only
the ratios count): 8 cells 205 -> 157 bootstraps, x0.588 time; 16 cells 358 -> 262, x0.662;
32 cells 656 -> 464, x0.569; the demo's 103 chunks weighted: x0.592; every score exact. The
demo itself then measured P2 at about 275 s against 565 s (README, "Measured").
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from experiments.replaced_constructions.baseline import module_at  # noqa: E402
from feddpsyn.crypto import indif  # noqa: E402
from feddpsyn.demo import dataset  # noqa: E402
from feddpsyn.params.modes import SelectionMode  # noqa: E402
from feddpsyn.params.plan_request import PlanRequest  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402
from feddpsyn.params.session_plan import SessionPlan  # noqa: E402


def baseline_module(rev: str):
    """``crypto/indif.py`` at ``rev``, imported under another name."""
    return module_at(rev, "crypto/indif.py", "indif_baseline")


def timed(circuit, encrypted_args, clear_args) -> tuple[float, int]:
    started = time.perf_counter()
    out = circuit.run(*encrypted_args, *clear_args)
    seconds = time.perf_counter() - started
    return seconds, indif.indif_from_bits(circuit.decrypt(out))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bits", type=int, default=12, help="P2's k (the demo's: 12)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--baseline", default="be18d86")
    args = parser.parse_args()
    if not 1 <= args.repeats <= 50:
        parser.error("--repeats: 1 to 50")
    k, old = args.bits, baseline_module(args.baseline)
    rng = np.random.default_rng(3)
    per_size = {}
    for cells in args.sizes:
        circuits = {"old": old.compile_indif_chunk(cells, k, 2.0 ** -40, output="bits"),
                    "new": indif.compile_indif_chunk(cells, k, 2.0 ** -40)}
        for circuit in circuits.values():
            circuit.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
        seconds = {"old": 0.0, "new": 0.0}
        for repeat in range(args.repeats):
            counts = rng.integers(0, 80, cells)
            expected = np.clip(counts + rng.integers(-40, 41, cells), 0, None)
            mask = rng.integers(0, 1 << k, cells)
            masked = (counts + mask) % (1 << k)
            offset = indif.indif_offset(mask, expected, k)
            inputs = {"old": (masked, offset),
                      "new": (indif.digits_of(masked, k), indif.digits_of(offset, k))}
            order = ("old", "new") if repeat % 2 == 0 else ("new", "old")
            for name in order:
                circuit = circuits[name]
                encrypted = circuit.encrypt(inputs[name][0], None)[0]
                took, score = timed(circuit, (encrypted,), (inputs[name][1],))
                if score != indif.indif_exact(counts, expected):
                    raise AssertionError(f"{name} P2 at {cells} cells disagrees with InDif")
                seconds[name] += took
        stats = {name: (c.statistics["programmable_bootstrap_count"], c.complexity / 1e9)
                 for name, c in circuits.items()}
        per_size[cells] = seconds
        print(f"{cells:3d} cells: bootstraps {stats['old'][0]} -> {stats['new'][0]}, "
              f"complexity {stats['old'][1]:.1f}e9 -> {stats['new'][1]:.1f}e9; "
              f"{seconds['old']:.1f} s -> {seconds['new']:.1f} s over {args.repeats} runs: "
              f"x{seconds['new'] / seconds['old']:.3f}; every score exact", flush=True)
    schema = Schema.load(dataset("fed_heart_disease").schema)
    plan = SessionPlan.build(PlanRequest(schema, 1.0, 1e-5, 1143, selection=SelectionMode.EM,
                                         rounds=4, noise="two-server"))
    sizes = [size for _, _, size in plan.indif_chunks()]
    if set(sizes) <= set(per_size):
        weighted = {name: sum(per_size[s][name] for s in sizes) / args.repeats
                    for name in ("old", "new")}
        print(f"demo P2 ({len(sizes)} chunks at k = {plan.selection.indif_bits}, one chunk at "
              f"a time): {weighted['old']:.0f} s -> {weighted['new']:.0f} s, "
              f"x{weighted['new'] / weighted['old']:.3f}")


if __name__ == "__main__":
    main()
