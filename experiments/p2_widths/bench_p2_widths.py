"""P2 at a width per chunk (``params.indif_widths``): lookups saved, scores changed, and the
module's compile and P2 time, against P2 at the full width in the same run.

Counts (default): for each shared table, eps and repeat, the servers' default plan
(``feddpsyn-default``'s: ``fedbench.methods.feddpsyn_served.served_plan``), its 1-ways
published as the servers draw them (4 uniform owners), and P2's chunks at their widths:
lookups by ``crypto.indif.chunk_bootstraps`` (at the full width and at each chunk's), the
cells whose public bound failed (a wrapped cell), and the pairs whose score differs from the
full-width InDif. Where no pair's score differs, the selection, the release and therefore
the accuracy are those of the full width on the same draw.

``--time TABLE``: compile the default noisy-greedy module with and without the narrower
widths (compile + keygen each), then run one chunk of every (size, width) the plan's
chunks use, at its width and at the full width, on encrypted random inputs (each decrypted
score checked against ``crypto.indif.indif_at_width``), alternating, ``--runs`` times;
P2's time for the session is projected from the per-call times and the chunk counts, and
the machine's lookup rate is measured in the same run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from feddpsyn.crypto.indif import chunk_bootstraps, indif_at_width, indif_exact  # noqa: E402
from feddpsyn.demo import data_dir  # noqa: E402
from feddpsyn.demo import dataset as bundled  # noqa: E402
from feddpsyn.dp.pair_selection import expected_counts_for_pairs  # noqa: E402
from feddpsyn.fedbench.methods.feddpsyn_served import served_plan  # noqa: E402
from feddpsyn.fedbench.methods.feddpsyn_sim import simulate_release  # noqa: E402
from feddpsyn.fedbench.partitions import uniform  # noqa: E402
from feddpsyn.fedbench.provenance import commit  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402
from feddpsyn.params.table_codec import encode_csv  # noqa: E402

TABLES = {
    "fed_heart_disease": None, "adult": None,
    "mroz": ("mroz/mroz.csv", "mroz/mroz.schema.json"),
    "wages": ("wages/wages.csv", "wages/wages.schema.json"),
    "computers": ("computers/computers.csv", "computers/computers.schema.json"),
    "doctor_contacts": ("doctor_contacts/doctor_contacts.csv",
                        "doctor_contacts/doctor_contacts.schema.json"),
}


def table(name: str) -> tuple[np.ndarray, Schema]:
    if TABLES[name] is None:
        ds = bundled(name)
        csv, schema = ds.csv, Schema.load(ds.schema)
    else:
        csv_name, schema_name = TABLES[name]
        csv, schema = data_dir() / csv_name, Schema.load(data_dir() / schema_name)
    return encode_csv(csv, schema).records, schema


def session_draw(records, schema, eps: float, rng: np.random.Generator):
    """One default noisy-greedy session over 4 uniform owners (``rng`` splits the rows):
    (its plan, the union's counts, the 1-way release's marginals as the servers draw
    them)."""
    owner = uniform(len(records), 4, rng)
    plan = served_plan(schema, len(records), eps, 1e-5, "noisy-greedy", None)
    counts = [plan.layout.counts(records[owner == c]) for c in range(4)]
    one_way, _ = simulate_release(plan, counts, names=("one_way",), noise="plan")
    return plan, np.sum(counts, axis=0), one_way


def published_draw(records, schema, eps: float, rng: np.random.Generator):
    """:func:`session_draw` as (its plan, the union's counts, the published 1-ways, P2's
    expected counts K)."""
    plan, union, one_way = session_draw(records, schema, eps, rng)
    published = [m.counts.ravel() for m in one_way]
    expected = expected_counts_for_pairs(published, plan.layout.pairs, plan.selection.max_rows)
    return plan, union, published, expected


def one_draw(records, schema, eps: float, seed: int) -> dict:
    """One session's published 1-ways and P2's chunks at their widths (module docstring)."""
    plan, union, published, expected = published_draw(records, schema, eps,
                                                       np.random.default_rng([seed, 7]))
    k = plan.selection.indif_bits
    full = sum(chunk_bootstraps(size, k) for _, _, size in plan.indif_chunks())
    narrow = wrapped = 0
    scores = dict.fromkeys(plan.layout.pairs, 0)
    widths: dict[int, int] = {}
    for index, cells, size, width in plan.indif_chunks_by_width(published):
        slot = plan.layout.two_way[index]
        local = cells - slot.offset
        d = union[cells] - expected[slot.attrs][local]
        wrapped += int((np.abs(d) > 2 ** (width - 1)).sum())
        scores[slot.attrs] += indif_at_width(union[cells], expected[slot.attrs][local], width)
        narrow += chunk_bootstraps(size, width)
        widths[width] = widths.get(width, 0) + 1
    changed = sum(scores[s.attrs] != indif_exact(union[s.offset:s.offset + s.size],
                                                 expected[s.attrs])
                  for s in plan.layout.two_way)
    return {"k": k, "widths": list(plan.selection.indif_widths),
            "margin": round(plan.wrap_margin(), 1), "max_rows": plan.selection.max_rows,
            "full": full, "narrow": narrow, "wrapped_cells": wrapped,
            "changed_scores": int(changed), "chunks_by_width": widths,
            "cells": int(sum(s.size for s in plan.layout.two_way))}


def counts(tables: list[str], eps_list: list[float], repeats: int) -> list[dict]:
    rows = []
    for name in tables:
        records, schema = table(name)
        for eps in eps_list:
            draws = [one_draw(records, schema, eps, seed) for seed in range(repeats)]
            first = draws[0]
            ratio = [d["narrow"] / d["full"] for d in draws]
            row = {"table": name, "rows": len(records), "eps": eps, "k": first["k"],
                   "max_rows": first["max_rows"], "margin": first["margin"],
                   "widths": first["widths"], "cells": first["cells"],
                   "p2_lookups_full": first["full"],
                   "p2_lookups_by_width_mean": statistics.mean(d["narrow"] for d in draws),
                   "ratio_mean": round(statistics.mean(ratio), 4),
                   "ratio_range": [round(min(ratio), 4), round(max(ratio), 4)],
                   "wrapped_cells": sum(d["wrapped_cells"] for d in draws),
                   "changed_scores": sum(d["changed_scores"] for d in draws),
                   "repeats": repeats}
            rows.append(row)
            print(f"{name:16s} eps {eps:<4} k {row['k']:2d} widths {row['widths']} "
                  f"margin {row['margin']:7.1f}: P2 lookups x{row['ratio_mean']:.3f} "
                  f"({row['ratio_range'][0]:.3f}-{row['ratio_range'][1]:.3f}), "
                  f"wrapped cells {row['wrapped_cells']}, scores changed "
                  f"{row['changed_scores']}", flush=True)
    return rows


def timing(name: str, runs: int) -> dict:
    """Compile and P2 call times with and without the narrower widths (module docstring)."""
    import secrets
    from dataclasses import replace

    from bench.scale.lookup_rate import rate_in_subprocess
    from feddpsyn.crypto.indif import digits_of, indif_offset
    from feddpsyn.crypto.noisy_scores import compile_noisy_scores
    from feddpsyn.crypto.private_selection import indif_name

    records, schema = table(name)
    plan = served_plan(schema, len(records), 1.0, 1e-5, "noisy-greedy", None)
    draw = np.random.default_rng(0)
    owner = uniform(len(records), 4, draw)
    per_owner = [plan.layout.counts(records[owner == c]) for c in range(4)]
    one_way, _ = simulate_release(plan, per_owner, names=("one_way",), noise="plan")
    chunks = plan.indif_chunks_by_width([m.counts.ravel() for m in one_way])
    k = plan.selection.indif_bits
    shape = plan.selection.noisy_shape(plan.used_chunk_sizes())
    out: dict = {"table": name, "k": k, "widths": list(shape.widths),
                 "lookup_rate": rate_in_subprocess()}
    modules = {}
    for label, s in (("full", replace(shape, widths=())), ("by_width", shape)):
        start = time.perf_counter()
        module = compile_noisy_scores(s, plan.selection.p_error)
        compiled = time.perf_counter() - start
        module.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
        out[f"compile_s_{label}"] = round(compiled, 1)
        out[f"compile_keygen_s_{label}"] = round(time.perf_counter() - start, 1)
        modules[label] = module
    module = modules["by_width"]
    used = sorted({(size, width) for _, _, size, width in chunks})
    per_call: dict[str, list[float]] = {}
    rng = np.random.default_rng(1)
    for _ in range(runs):
        for size, width in used:
            for bits in ([width, k] if width != k else [k]):
                name_ = indif_name(size, None if bits == k else bits)
                fn = getattr(module, name_)
                counts_ = rng.integers(0, 40, size)
                expected = rng.integers(0, 40, size)
                mask = rng.integers(0, 2 ** bits, size)
                masked, _ = fn.encrypt(digits_of((counts_ + mask) % 2 ** bits, bits), None)
                start = time.perf_counter()
                result = fn.run(masked, digits_of(indif_offset(mask, expected, bits), bits))
                per_call.setdefault(f"{size}/{bits}", []).append(time.perf_counter() - start)
                got = sum(int(b) << i for i, b in enumerate(fn.decrypt(result).tolist()))
                assert got == indif_at_width(counts_, expected, bits), (size, bits)
    median = {key: statistics.median(v) for key, v in per_call.items()}
    full_s = sum(median[f"{size}/{k}"] for _, _, size, _ in chunks)
    narrow_s = sum(median[f"{size}/{width}"] for _, _, size, width in chunks)
    out.update({"per_call_median_s": {key: round(v, 3) for key, v in median.items()},
                "p2_projected_s_one_core_full": round(full_s, 1),
                "p2_projected_s_one_core_by_width": round(narrow_s, 1),
                "ratio": round(narrow_s / full_s, 3), "runs": runs})
    print(json.dumps(out, indent=1))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--eps", default="0.3,1,4")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--time", metavar="TABLE", help="time the module and P2's calls")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result: dict = {"what": "P2 at a width per chunk against the full width",
                    "command": "python experiments/p2_widths/bench_p2_widths.py "
                               + " ".join(sys.argv[1:]),
                    "commit": commit(), "machine": platform.node(),
                    "date": datetime.date.today().isoformat()}
    if args.time:
        result["timing"] = timing(args.time, args.runs)
    else:
        result["rows"] = counts(args.tables.split(","),
                                [float(e) for e in args.eps.split(",")], args.repeats)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
