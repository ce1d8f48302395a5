"""Where P2's lookups go, and four ways to make a cell or a lookup cheaper, each measured
against today's construction (``crypto.indif``) in the same run.

``--parts`` (no FHE, seconds): for each shared table at eps 1 (the default), one draw of
the published 1-ways (4 uniform owners) and P2's chunks at their widths, the session's
lookups by part: the cells (2 ceil(w/2) - 1 + [w even] a cell: carries, sign folds, sign),
the padding (the same for each padded cell of a chunk), the planes' conversion into binary
digits (the rest of ``chunk_bootstraps``), the adds of a pair's chunk scores (2n - 1
each) and the joint score noise (its passes' carries, per pair). Beside them the floor of
any width rule: every cell at the width of its own |C - K|, which no server knows.

``--compile`` (concrete's optimiser, machine-independent; no keys):

* base-8 digits: one 4-bit lookup adds three bits instead of a 3-bit lookup adding two, so
  a cell needs fewer lookups (8 against 11 at k = 11), each dearer;
* leveled column digits: the planes' carry-save takes each column's digit as t - 2 carry
  (no lookup) instead of bits(t)[0] (one lookup);
* p_error from 2^-40 to 2^-28 (a larger one spends more of delta on bootstrap failures).

``--time`` (keys and runs; a few minutes):

* the lookup's cost by its width, 1 to 5 bits (``bench/scale/lookup_rate.py``, one core);
* tables picked by a clear one-hot: the key server knows M, so it could encrypt, for every
  value the compute server's clear offset can take, the digits that offset would produce,
  and the compute server picks its entry by a clear one-hot product (leveled: no lookup).
  Measured: the key server's encryption and the compute server's product, per entry;
* leveled column digits inside the default noisy-greedy module for Fed-Heart-Disease, where
  P2's outputs are wired into ``add`` and ``joint``: one call of each chunk size and of
  ``add``, today's module and the leveled one, alternating.

The study's P2 variant (:func:`indif_variant`) is today's circuit with two switches, the
digit base and the leveled column digits; at base 4 without the switch it compiles to
today's bootstrap count and complexity, which the run checks.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments" / "p2_widths"))

from bench_p2_widths import TABLES, published_draw, table  # noqa: E402

from feddpsyn.crypto.indif import chunk_bootstraps  # noqa: E402
from feddpsyn.fedbench.provenance import commit  # noqa: E402
from feddpsyn.params.indif_widths import width_for  # noqa: E402

EPSILON = 1.0


def cell_lookups(width: int) -> int:
    """P2's lookups a cell at width w: D - 1 carries, one sign fold per full magnitude
    digit, the sign, and the top magnitude bit when w is even (``crypto.indif``)."""
    return 2 * (-(-width // 2)) - 1 + (1 if width % 2 == 0 else 0)


def parts(name: str, seed: int = 0) -> dict[str, Any]:
    """One draw's P2 lookups by part (module docstring)."""
    records, schema = table(name)
    plan, union, published, expected = published_draw(records, schema, EPSILON,
                                                      np.random.default_rng([seed, 7]))
    chosen = plan.selection
    # The floor of any width rule: each cell at the width of its own |C - K| (which no
    # server knows), every chunk full, nothing converted.
    oracle = 0
    for slot in plan.layout.two_way:
        d = union[slot.offset:slot.offset + slot.size] - np.asarray(expected[slot.attrs])
        oracle += sum(cell_lookups(width_for(abs(float(x)))) for x in d)
    cells = padding = conversion = 0
    chunks_of: dict[int, int] = {}
    for index, used, size, width in plan.indif_chunks_by_width(published):
        per = cell_lookups(width)
        cells += len(used) * per
        padding += (size - len(used)) * per
        conversion += chunk_bootstraps(size, width) - size * per
        chunks_of[index] = chunks_of.get(index, 0) + 1
    n = chosen.score_bits
    adds = sum(c - 1 for c in chunks_of.values()) * (2 * n - 1)
    shape = chosen.noisy_shape(plan.used_chunk_sizes())
    noise = (len(shape.pass_sizes) * (shape.out_bits - 1) * len(chunks_of)
             if shape.joint is not None else 0)
    total = cells + padding + conversion + adds + noise
    return {"table": name, "rows": len(records), "pairs": len(chunks_of),
            "count_bits": chosen.indif_bits, "widths": list(chosen.indif_widths),
            "lookups": {"cells": cells, "padding": padding, "conversion": conversion,
                        "adds": adds, "score_noise": noise, "total": total},
            "cells_at_oracle_widths": oracle,
            "share": {k: round(v / total, 3) for k, v in
                      (("cells", cells), ("padding", padding), ("conversion", conversion),
                       ("adds", adds), ("score_noise", noise))}}


# --- the study's P2 variant ----------------------------------------------------------------

def digit_sizes(count_bits: int, digit_bits: int) -> list[int]:
    """Digit widths, least significant first: ``digit_bits`` each, the top one the rest."""
    top = -(-count_bits // digit_bits)
    return [digit_bits] * (top - 1) + [count_bits - digit_bits * (top - 1)]


def digits_in(values: np.ndarray, count_bits: int, digit_bits: int) -> np.ndarray:
    out, shift = [], 0
    for width in digit_sizes(count_bits, digit_bits):
        out.append((values >> shift) & ((1 << width) - 1))
        shift += width
    return np.stack(out)


def indif_variant(count_bits: int, cells: int, digit_bits: int = 2,
                  leveled: bool = False) -> Callable[..., tuple[Any, ...]]:
    """P2 on one chunk as ``crypto.indif._indif_bits_function``, in base 2^digit_bits, with
    the carry-save's column digits leveled when ``leveled``."""
    from concrete import fhe

    from feddpsyn.crypto._concrete import lookup
    from feddpsyn.crypto._concrete import table as lut

    b, sizes = digit_bits, digit_sizes(count_bits, digit_bits)
    top, wide, full = sizes[-1], b + 1, (1 << b) - 1
    carry_t = lut(lambda u: int(u >= (1 << b)), wide)
    fold_t = lut(lambda x: (x & full) ^ (full if x >> b else 0), wide)
    neg_t = lut(lambda u: 1 - ((u >> (top - 1)) & 1), wide)
    low = (1 << (top - 1)) - 1
    top_t = lut(lambda u: (u & low) ^ (low if not (u >> (top - 1)) & 1 else 0), wide)
    maxima = ([(b * i, full * cells) for i in range(len(sizes) - 1)]
              + ([(count_bits - top, low * cells)] if top >= 2 else []) + [(0, cells)])

    def chunk(masked_digits: Any, offset_digits: Any) -> tuple[Any, ...]:
        values, carry = [], None
        for i in range(len(sizes) - 1):
            u = masked_digits[i] + offset_digits[i] + (0 if carry is None else carry)
            carry = lookup(carry_t, u)
            values.append(fhe.hint(u - (1 << b) * carry, can_store=full))
        i = len(sizes) - 1
        u = masked_digits[i] + offset_digits[i] + (0 if carry is None else carry)
        negative = lookup(neg_t, u)
        planes = [np.sum(lookup(fold_t, v + (1 << b) * negative)) for v in values]
        planes += ([np.sum(lookup(top_t, u))] if top >= 2 else []) + [np.sum(negative)]
        planes = [fhe.hint(p, can_store=m) for p, (_, m) in zip(planes, maxima, strict=True)]
        columns: dict[int, list[Any]] = {}
        for plane, (weight, most) in zip(planes, maxima, strict=True):
            for t in range(most.bit_length()):
                columns.setdefault(weight + t, []).append(fhe.bits(plane)[t])
        digits, carry, carry_max = [], None, 0
        for j in range(max(columns) + 2 * max(m.bit_length() for _, m in maxima) + 2):
            terms = columns.get(j, []) + ([] if carry is None else [carry])
            if not terms:
                break
            total = terms[0]
            for term in terms[1:]:
                total = total + term
            total_max = len(columns.get(j, [])) + carry_max
            total = fhe.hint(total, can_store=max(1, total_max))
            if len(terms) > 1:
                carry, carry_max = total // 2, total_max // 2
                digits.append(fhe.hint(total - 2 * carry, can_store=1) if leveled
                              else fhe.bits(total)[0])
            else:
                digits.append(total if leveled and total_max <= 1 else fhe.bits(total)[0])
                carry, carry_max = None, 0
        return tuple(digits)

    return chunk


def compile_variant(count_bits: int, cells: int, digit_bits: int = 2, leveled: bool = False,
                    p_error: float = 2.0 ** -40) -> Any:
    from concrete import fhe

    from feddpsyn.crypto._concrete import ensure_tag_stack

    ensure_tag_stack()
    top = (1 << digit_bits) - 1
    count = len(digit_sizes(count_bits, digit_bits))
    rng = np.random.default_rng(0)
    zero = np.zeros((count, cells), dtype=np.int64)
    centre = digits_in(np.full(cells, 1 << (count_bits - 1)), count_bits, digit_bits)
    inputs = [(zero, zero), (zero + top, zero + top), (zero, centre)] + [
        (rng.integers(0, top + 1, (count, cells)), rng.integers(0, top + 1, (count, cells)))
        for _ in range(8)]
    compiler = fhe.Compiler(indif_variant(count_bits, cells, digit_bits, leveled),
                            {"masked_digits": "encrypted", "offset_digits": "clear"})
    configuration = fhe.Configuration(p_error=p_error, global_p_error=None,
                                      show_progress=False, compress_evaluation_keys=True,
                                      compress_input_ciphertexts=True)
    return compiler.compile(inputs, configuration)


def optimiser(circuit: Any) -> dict[str, Any]:
    return {"bootstraps": int(circuit.statistics["programmable_bootstrap_count"]),
            "complexity": round(circuit.complexity / 1e9, 2)}


def compile_rows() -> dict[str, Any]:
    from feddpsyn.crypto.indif import compile_indif_chunk

    rows = []
    for k, cells in ((11, 8), (11, 16), (11, 32), (17, 8), (17, 32)):
        today = optimiser(compile_indif_chunk(cells, k, 2.0 ** -40))
        same = optimiser(compile_variant(k, cells))
        if same != today:
            raise RuntimeError(f"the variant at base 4 is not today's circuit: {same} {today}")
        base8 = optimiser(compile_variant(k, cells, digit_bits=3))
        level = optimiser(compile_variant(k, cells, leveled=True))
        rows.append({"count_bits": k, "cells": cells, "today": today, "base_8": base8,
                     "leveled_digits": level,
                     "base_8_x": round(base8["complexity"] / today["complexity"], 3),
                     "leveled_x": round(level["complexity"] / today["complexity"], 3)})
        print(json.dumps(rows[-1]), flush=True)
    errors = {f"2^{e}": optimiser(compile_variant(11, 32, p_error=2.0 ** e))["complexity"]
              for e in (-40, -36, -32, -28)}
    print(json.dumps({"p_error_complexity_k11_32_cells": errors}), flush=True)
    return {"chunks": rows, "p_error_complexity_k11_32_cells": errors}


# --- timed ---------------------------------------------------------------------------------

def lookup_costs(widths: tuple[int, ...] = (1, 2, 3, 4, 5)) -> list[dict[str, Any]]:
    env = dict(os.environ, OMP_NUM_THREADS="1", RAYON_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "scale" / "lookup_rate.py"),
                           *map(str, widths)], env=env, capture_output=True, text=True,
                          timeout=1800, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def one_hot_entry_cost(cells: int = 8, entries: int = 1024, fields: int = 4) -> dict[str, Any]:
    """Per table entry: the key server's encryption and the compute server's one-hot
    product, on a circuit that picks ``fields`` 2-bit values a cell from ``entries`` and
    runs one lookup a cell on them (checked against the plaintext pick)."""
    from concrete import fhe

    from feddpsyn.crypto._concrete import ensure_tag_stack, lookup
    from feddpsyn.crypto._concrete import table as lut

    fold = lut(lambda x: (x & 3) ^ (3 if x >> 2 else 0), 3)

    def pick(tables: Any, one_hot: Any) -> Any:
        chosen = np.sum(tables * one_hot.reshape((cells, entries, 1)), axis=1)
        chosen = fhe.hint(chosen, can_store=3)
        return np.sum(lookup(fold, chosen[:, 0] + 4 * (chosen[:, 1] // 2))) + np.sum(
            chosen[:, 2:])

    rng = np.random.default_rng(0)

    def hot() -> np.ndarray:
        out = np.zeros((cells, entries), dtype=np.int64)
        out[np.arange(cells), rng.integers(0, entries, cells)] = 1
        return out

    ensure_tag_stack()
    configuration = fhe.Configuration(p_error=2.0 ** -40, global_p_error=None,
                                      show_progress=False, compress_evaluation_keys=True,
                                      compress_input_ciphertexts=True)
    inputs = [(rng.integers(0, 4, (cells, entries, fields)), hot()) for _ in range(6)]
    inputs.append((np.full((cells, entries, fields), 3), hot()))
    circuit = fhe.Compiler(pick, {"tables": "encrypted", "one_hot": "clear"}).compile(
        inputs, configuration)
    circuit.keygen()
    tables, choice = rng.integers(0, 4, (cells, entries, fields)), hot()
    encrypt, run = [], []
    for _ in range(3):
        started = time.perf_counter()
        arguments = circuit.encrypt(tables, choice)
        encrypt.append(time.perf_counter() - started)
        started = time.perf_counter()
        result = circuit.run(*arguments)
        run.append(time.perf_counter() - started)
    picked = (tables * choice[:, :, None]).sum(axis=1)
    want = int(((picked[:, 0] ^ np.where(picked[:, 1] >= 2, 3, 0))).sum() + picked[:, 2:].sum())
    if int(circuit.decrypt(result)) != want:
        raise RuntimeError("the one-hot pick decrypted to a wrong value")
    n = cells * entries * fields
    return {"cells": cells, "entries": entries, "fields": fields, "ciphertexts": n,
            "bootstraps": int(circuit.statistics["programmable_bootstrap_count"]),
            "encrypt_us_per_entry": round(1e6 * min(encrypt) / n, 1),
            "run_us_per_entry": round(1e6 * min(run) / n, 1),
            "input_bytes_per_entry": round(len(arguments[0].serialize()) / n, 1)}


def best_table_split(count_bits: int, lookup_ms: float, entry_us: float) -> dict[str, Any]:
    """The cheapest split of a cell's k bits into a tabulated top block (its digits, sign
    and carry-in code picked by the clear top offset: 2^t entries) and a tabulated low block
    (2^(k - t) entries, its digits and carry out), costed with the measured rates: two
    lookups to apply the low block's carry to the top block's entry, and one sign fold per
    low digit, against today's ``cell_lookups(k)`` lookups."""
    today_ms = cell_lookups(count_bits) * lookup_ms
    best = None
    for t in range(2, count_bits):
        low = count_bits - t
        lookups = 2 + -(-low // 2)
        entries = (1 << t) * (-(-(t - 1) // 2) + 2) + (1 << low) * (-(-low // 2) + 1)
        ms = lookups * lookup_ms + entries * entry_us / 1000
        if best is None or ms < best["ms_per_cell"]:
            best = {"top_bits": t, "lookups": lookups, "entries": entries,
                    "ms_per_cell": round(ms, 1)}
    assert best is not None
    return {"count_bits": count_bits, "today_ms_per_cell": round(today_ms, 1), **best,
            "x": round(best["ms_per_cell"] / today_ms, 3)}


def module_rows(name: str = "fed_heart_disease", runs: int = 3) -> dict[str, Any]:
    """One call of each P2 chunk size and of add in today's noisy-greedy module and in one
    with leveled column digits, compiled and keyed one after the other, calls alternating
    between the two in the same process."""
    import feddpsyn.crypto.private_selection as private_selection
    from feddpsyn.crypto.indif import digits_of
    from feddpsyn.crypto.noisy_scores import compile_noisy_scores

    records, schema = table(name)
    plan, *_ = published_draw(records, schema, EPSILON, np.random.default_rng([0, 7]))
    shape = plan.selection.noisy_shape(plan.used_chunk_sizes())
    today_function = private_selection._indif_bits_function
    modules: dict[str, Any] = {}
    prepared: dict[str, dict[str, float]] = {}
    for label in ("today", "leveled"):
        if label == "leveled":
            private_selection._indif_bits_function = (  # type: ignore[assignment]
                lambda k, cells: indif_variant(k, cells, leveled=True))
        try:
            started = time.perf_counter()
            module = compile_noisy_scores(shape, plan.selection.p_error)
            compiled = time.perf_counter() - started
            module.keygen()
            prepared[label] = {"compile_s": round(compiled, 1),
                               "keygen_s": round(time.perf_counter() - started - compiled, 1)}
        finally:
            private_selection._indif_bits_function = today_function  # type: ignore[assignment]
        modules[label] = module
    k, rng = shape.count_bits, np.random.default_rng(1)
    calls: dict[str, dict[str, list[float]]] = {"today": {}, "leveled": {}}
    for size in shape.chunk_sizes:
        d = rng.integers(-40, 40, size)
        masked = rng.integers(0, 1 << k, size)
        offset = (d + (1 << (k - 1)) - masked) % (1 << k)
        arguments = {label: getattr(m, f"indif_{size}").encrypt(digits_of(masked, k),
                                                                 digits_of(offset, k))
                     for label, m in modules.items()}
        for _ in range(runs):
            for label, m in modules.items():
                function = getattr(m, f"indif_{size}")
                started = time.perf_counter()
                out = function.run(*arguments[label])
                calls[label].setdefault(f"indif_{size}", []).append(time.perf_counter() - started)
                score = sum(int(b) << i for i, b in enumerate(function.decrypt(out)))
                if score != int(np.abs(d).sum()):
                    raise RuntimeError(f"{label} indif_{size} decrypted to a wrong score")
                if size == shape.chunk_sizes[-1]:
                    started = time.perf_counter()
                    m.add.run(out, out)
                    calls[label].setdefault("add", []).append(time.perf_counter() - started)
    best = {label: {f: round(min(ts), 3) for f, ts in per.items()} for label, per in calls.items()}
    return {"table": name, "shape": str(shape), "prepared": prepared, "call_s": best,
            "leveled_x": {f: round(best["leveled"][f] / best["today"][f], 3)
                          for f in best["today"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", action="store_true", help="P2's lookups by part")
    parser.add_argument("--compile", action="store_true", help="the optimiser's comparisons")
    parser.add_argument("--time", action="store_true", help="the timed comparisons")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if not (args.parts or args.compile or args.time):
        args.parts = True
    out: dict[str, Any] = {
        "what": "P2's lookups by part, and cheaper cells or lookups measured against today's",
        "command": "python experiments/p2_cost_floor/bench_cost_floor.py "
                   + " ".join(a for a in sys.argv[1:]),
        "commit": commit(), "machine": platform.node(), "cores": os.cpu_count(),
        "date": datetime.date.today().isoformat(), "epsilon": EPSILON}
    if args.parts:
        out["parts"] = [parts(name) for name in TABLES]
        for row in out["parts"]:
            print(json.dumps(row), flush=True)
    if args.compile:
        out["compile"] = compile_rows()
    if args.time:
        costs = lookup_costs()
        out["lookup_ms_by_bits"] = {c["lookup_bits"]: c["ms_per_lookup"] for c in costs}
        print(json.dumps(out["lookup_ms_by_bits"]), flush=True)
        entry = one_hot_entry_cost()
        out["one_hot_entry"] = entry
        print(json.dumps(entry), flush=True)
        per_entry = entry["encrypt_us_per_entry"] + entry["run_us_per_entry"]
        three = out["lookup_ms_by_bits"][3]
        out["one_hot_split"] = [best_table_split(k, three, per_entry) for k in (11, 17)]
        out["one_hot_break_even_entries_per_lookup"] = round(1000 * three / per_entry, 1)
        print(json.dumps(out["one_hot_split"]), flush=True)
        out["module"] = module_rows()
        print(json.dumps(out["module"]), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
