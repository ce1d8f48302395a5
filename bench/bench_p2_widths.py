"""Where P2's time goes in the demo's module, before and after packing P2's XORs.

The demo (Fed-Heart-Disease, ``em``, 4 rounds) compiles one module per session:
``indif_<s>`` per chunk size, ``add`` and ``select`` over the 66 candidates, one key set.
This bench compiles that module at the demo's widths (the session plan's, from the demo's
``max_rows``: the bundled file's rows with 10% room) in three variants and prints concrete's
statistics for each (deterministic, machine independent):

* ``unhinted add``: ``add`` without the width hints of commit 8e37e73 (the code the README's
  11.5 min were measured with), XORs unpacked;
* ``unpacked``: ``add`` with the hints, one 2-bit lookup per XOR (``pack=1``);
* ``packed``: the current code (``crypto.indif.XOR_PACK`` bits per 3-bit lookup).

Printed per variant: the module's complexity and key sizes, the key set (polynomial size,
GLWE and LWE dimensions, levels), bootstraps per function and parameter, the demo's total
bootstraps (its 103 chunks, their sums and ``rounds`` selects) and a digest of the compiled
MLIR. ``--time N`` then generates both modules' keys (about 2 GB each at 66 candidates) and
times a fixed workload, old and new alternating N times (order swapped every repetition, so
machine noise hits both): one chunk of each size and one ``add`` (every decrypted score
checked), plus one ``select`` when ``--select`` is given.

Run: .venv/bin/python bench/bench_p2_widths.py [--candidates 66] [--time 3 [--select]]

Measured (2026-11-23, concrete 2.11, 66 candidates): ``unhinted add`` and ``unpacked``
compile to the same MLIR and key set (complexity 8.856e11; indif_32 749 bootstraps, indif_16
406, indif_8 230, add 21, select 11,682): 8e37e73 changed nothing at Fed-Heart's widths.
``packed``: indif_32 568, indif_16 308, indif_8 176, add and select unchanged (same
bootstrap parameters; two of select's key switches take 4-5 levels instead of 3); module
complexity x0.997 (select dominates it, counted once), the demo's P2 46,179 -> 35,277
bootstraps (x0.764); the bit extraction's key switch 1536 -> 552 at 9 levels becomes
1536 -> 574 at 5. ``--time 2 --select --skip-unhinted`` on 2 cores shared with 2-6 other
processes (4.2 GB peak): P2 60.8 / 34.3 s unpacked against 47.6 / 27.5 s packed (x0.783 and
x0.803 pairwise, x0.790 in all), every score exact; select 273 / 141 s against 168 / 169 s,
within the load's noise (the other processes stopped during the run). Again, 1-5 other
processes: P2 35.4 / 33.1 s against 28.0 / 25.3 s (x0.779 in all), select 151.6 / 175.8 s
against 148.0 / 167.0 s (x0.962).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import json
import secrets
import sys
import time
from pathlib import Path

import numpy as np
from concrete import fhe

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import crypto.private_selection as private_selection  # noqa: E402
from crypto import indif as indif_module  # noqa: E402
from crypto.indif import indif_exact, indif_offset  # noqa: E402
from crypto.selection import clear_arguments, random_share, thresholds  # noqa: E402
from feddpsyn.demo import DEMO_ROUNDS, dataset  # noqa: E402
from keyserver.selection import module_shape  # noqa: E402
from params.schema import Schema  # noqa: E402
from params.session_plan import SessionPlan  # noqa: E402

_DIGIT = fhe.LookupTable([0, 1, 0, 1])
_CARRY = fhe.LookupTable([0, 0, 1, 1])


def _unhinted_score_functions(count_bits, chunk_sizes, score_bits):
    """``score_functions`` as before 8e37e73: ``add`` without declared widths."""
    n = score_bits
    indifs = {private_selection.indif_name(size):
              private_selection._indif_function(count_bits, size, n) for size in chunk_sizes}

    def add(x, y):
        out, carry = [], None
        for j in range(n):
            total = x[j] + y[j] + (0 if carry is None else carry)
            out.append(_DIGIT[total])
            if j + 1 < n:
                carry = _CARRY[total]
        return fhe.array(out)

    return indifs, add


@contextlib.contextmanager
def variant(name: str):
    """Compile with the named P2 variant (module docstring)."""
    saved = (private_selection.score_functions, private_selection._indif_bits_function)
    if name in ("unhinted add", "unpacked"):
        private_selection._indif_bits_function = functools.partial(
            indif_module._indif_bits_function, pack=1)
    if name == "unhinted add":
        private_selection.score_functions = _unhinted_score_functions
    try:
        yield
    finally:
        private_selection.score_functions, private_selection._indif_bits_function = saved


def demo_plan(candidates: int):
    ds = dataset("fed_heart_disease")
    rows = len(ds.csv.read_text().splitlines()) - 1
    max_rows = int(rows * 1.1) + 10  # the demo's rule (feddpsyn/demo.py)
    plan = SessionPlan.build(Schema.load(ds.schema), None, 1.0, 1e-5, None, "default",
                             max_rows, selection="em", rounds=DEMO_ROUNDS["fed_heart_disease"])
    shape = module_shape(plan)
    shape = dataclasses.replace(shape, selection=dataclasses.replace(shape.selection,
                                                                     candidates=candidates))
    return plan, shape, thresholds(plan.selection.shape, plan.selection.step.epsilon)


def _parameter(p) -> str:
    return (f"N={p.polynomial_size()} k={p.glwe_dimension()} n={p.input_lwe_dimension()} "
            f"L={p.level()}")


def describe(module, plan, name: str) -> dict:
    st = module.statistics
    functions = st["functions"]
    chunks = [size for pair in plan.pair_cells()
              for size in private_selection_chunks(pair, plan)]
    pbs = {f: functions[f]["programmable_bootstrap_count"] for f in functions}
    adds = sum(len(private_selection_chunks(pair, plan)) - 1 for pair in plan.pair_cells())
    p2 = sum(pbs[private_selection.indif_name(s)] for s in chunks) + adds * pbs["add"]
    p3 = plan.selection.rounds * pbs["select"]
    digest = hashlib.sha256(module.mlir.encode()).hexdigest()[:16]
    print(f"== {name}: complexity {st['complexity']:.4g}, bootstrap keys "
          f"{st['size_of_bootstrap_keys'] / 1e6:.0f} MB, key-switch keys "
          f"{st['size_of_keyswitch_keys'] / 1e6:.0f} MB, MLIR {digest}")
    keyset = json.loads(module.server.program_info.serialize())["keyset"]
    for key in keyset["lweBootstrapKeys"]:
        p = key["params"]
        print(f"   bootstrap key {key['id']}: N={p['polynomialSize']} k={p['glweDimension']} "
              f"n={p['inputLweDimension']} L={p['levelCount']} base 2^{p['baseLog']}")
    for key in keyset["lweKeyswitchKeys"]:
        p = key["params"]
        print(f"   key switch {key['id']}: {p['inputLweDimension']} -> "
              f"{p['outputLweDimension']} L={p['levelCount']} base 2^{p['baseLog']}")
    for f in sorted(functions):
        per = {_parameter(p): c for p, c in
               functions[f]["programmable_bootstrap_count_per_parameter"].items()}
        print(f"   {f}: {pbs[f]} bootstraps {per}")
    print(f"   the demo: P2 {p2:,} bootstraps ({len(chunks)} chunks, {adds} adds), "
          f"P3 {p3:,} ({plan.selection.rounds} selects)", flush=True)
    return {"complexity": st["complexity"], "p2": p2, "p3": p3, "mlir": digest}


def private_selection_chunks(cells: int, plan) -> list[int]:
    from params.selection_plan import chunk_sizes_for
    return chunk_sizes_for(cells, plan.used_chunk_sizes())


def workload(module, plan, rng, candidates: int, with_select: bool) -> tuple[float, float]:
    """Seconds of P2 (one chunk of each size and their sums, checked exact) and of one
    select (0 unless ``with_select``)."""
    k = plan.selection.indif_bits
    seconds, outputs, total = 0.0, [], 0
    for size in plan.used_chunk_sizes():
        counts = rng.integers(0, 60, size)
        expected = np.clip(counts + rng.integers(-20, 21, size), 0, None)
        mask = rng.integers(0, 2 ** k, size)
        function = getattr(module, private_selection.indif_name(size))
        encrypted, _ = function.encrypt((counts + mask) % 2 ** k, None)
        offset = indif_offset(mask, expected, k)
        started = time.perf_counter()
        out = function.run(encrypted, offset)
        seconds += time.perf_counter() - started
        outputs.append(out)
        total += indif_exact(counts, expected)
    started = time.perf_counter()
    pair = module.add.run(module.add.run(outputs[0], outputs[1]), outputs[2])
    seconds += time.perf_counter() - started
    digits = module.add.decrypt(pair)
    assert sum(int(d) << j for j, d in enumerate(digits)) == total, "P2 disagrees"
    p2, seconds = seconds, 0.0
    if with_select:
        shape = dataclasses.replace(plan.selection.shape, candidates=candidates)
        s = shape.candidates
        args = clear_arguments(np.zeros((1, s, shape.score_bits), dtype=np.int64),
                               np.ones(s, dtype=np.int64), random_share(shape),
                               random_share(shape),
                               rng.integers(0, 2, (1, s, shape.priority_bits)))
        shares = module.select.encrypt(*([None] * (s + 1)), args[2], args[3], None, None)
        candidates = [pair] * s
        started = time.perf_counter()
        module.select.run(*candidates, args[1], *shares[s + 1:s + 3], *args[4:])
        seconds += time.perf_counter() - started
    return p2, seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--candidates", type=int, default=66, help="select's candidates")
    parser.add_argument("--time", type=int, default=0, help="alternating timing repetitions")
    parser.add_argument("--select", action="store_true", help="time one select as well")
    parser.add_argument("--skip-unhinted", action="store_true",
                        help="do not compile the variant before 8e37e73 (saves one compile)")
    args = parser.parse_args()
    plan, shape, c = demo_plan(args.candidates)
    print(f"Fed-Heart-Disease demo: k = {shape.count_bits}, score digits "
          f"{shape.selection.score_bits}, chunk sizes {shape.chunk_sizes}, "
          f"{args.candidates} candidates, p_error {plan.selection.p_error:.3g}", flush=True)
    modules, summary = {}, {}
    names = ("unpacked", "packed") if args.skip_unhinted else ("unhinted add", "unpacked",
                                                                  "packed")
    for name in names:
        with variant(name):
            started = time.perf_counter()
            module = private_selection.compile_private_selection(shape, c,
                                                                 plan.selection.p_error)
            print(f"{name}: compiled in {time.perf_counter() - started:.0f} s")
        summary[name] = describe(module, plan, name)
        if name != "unhinted add":
            modules[name] = module
    old, new = summary["unpacked"], summary["packed"]
    if "unhinted add" in summary:
        print("unhinted add vs unpacked: same MLIR: "
              f"{summary['unhinted add']['mlir'] == old['mlir']}")
    print(f"packed / unpacked: complexity x{new['complexity'] / old['complexity']:.3f}, "
          f"demo P2 bootstraps x{new['p2'] / old['p2']:.3f}, P3 x{new['p3'] / old['p3']:.3f}")
    if not args.time:
        return
    for module in modules.values():
        module.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    seconds = {name: [0.0, 0.0] for name in modules}
    rng = np.random.default_rng(5)
    for repetition in range(args.time):
        order = list(modules) if repetition % 2 == 0 else list(reversed(modules))
        for name in order:
            p2, p3 = workload(modules[name], plan, rng, args.candidates, args.select)
            seconds[name][0] += p2
            seconds[name][1] += p3
            print(f"  repetition {repetition}: {name} P2 {p2:.2f} s (scores exact)"
                  + (f", select {p3:.2f} s" if args.select else ""), flush=True)
    (old_p2, old_p3), (new_p2, new_p3) = seconds["unpacked"], seconds["packed"]
    print(f"timing ({args.time} repetitions, alternating): P2 unpacked {old_p2:.1f} s, packed "
          f"{new_p2:.1f} s: x{new_p2 / old_p2:.3f}"
          + (f"; select unpacked {old_p3:.1f} s, packed {new_p3:.1f} s: x{new_p3 / old_p3:.3f}"
             if args.select else ""))


if __name__ == "__main__":
    main()
