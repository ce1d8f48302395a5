"""P2 at widths from a typical bound instead of the worst case: lookups saved against the
default's accuracy, in the same run.

Today each chunk runs at the width its cells' public worst-case bound needs
(``params.indif_widths``: |C - K| <= max(K, min(C_a, C_b) + t - K)), about three times
what the cells' own |C - K| need (``experiments/p2_cost_floor/``). Here each cell's bound is
a multiple of the deviation a cell would show if the pair were independent:

    B_z = min(z sqrt(K + v (p_a^2 + p_b^2) + 1), public bound)

with K the expected count, v the published 1-ways' noise variance (K's own error is about
p_b e_a + p_a e_b) and p the published shares. A cell beyond B_z wraps: at width w P2
scores its distance to the nearest multiple of 2^w, at most |C - K| and still 1-Lipschitz,
so the score's sensitivity, the noise, the budget and the privacy record are the
default's; only the scores of the cells far from independence (the dependence the score is
there to find) can be lowered. The cells of a pair are ordered by B_z, cut into the
plan's chunk sizes, and each chunk runs at the least width that holds its largest B_z, any
width from 2 (the best case for lookups: the servers' module compiles at most four).

The what-if ``feddpsyn-default@wrap=<z>`` is :func:`fedbench.methods.feddpsyn_served
.feddpsyn_default` with its pair scores computed that way (the scorer is replaced for the
session and restored after it; ``--jobs 1``); both run on the same splits and seeds
(``fedbench.runner.run_utility``, 4 uniform owners). P2's lookups of each draw are counted
from its chunks by ``crypto.indif.chunk_bootstraps``: today's (the plan's chunks at their
widths) and the what-if's, with how many cells wrapped and how many pairs' scores moved.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.accuracy.bench_served_vs_central import TABLES, _table  # noqa: E402
from feddpsyn.crypto.indif import chunk_bootstraps, indif_at_width  # noqa: E402
from feddpsyn.dp.pair_selection import expected_counts_for_pairs  # noqa: E402
from feddpsyn.fedbench.methods import (  # noqa: E402
    KINDS,
    METHODS,
    WHAT_IF,
    feddpsyn_served,
)
from feddpsyn.fedbench.methods.feddpsyn_sim import pair_scores as default_scores  # noqa: E402
from feddpsyn.fedbench.provenance import commit  # noqa: E402
from feddpsyn.fedbench.runner import Setting, run_utility  # noqa: E402
from feddpsyn.params.indif_widths import cell_bounds, narrow_widths, width_for  # noqa: E402
from feddpsyn.params.selection_plan import chunk_sizes_for  # noqa: E402

# Per what-if and draw (in call order): lookups today and here, wrapped cells, moved pairs.
DRAWS: dict[str, list[dict[str, Any]]] = {}


def one_way_variance(plan: Any) -> float:
    """The variance of one published 1-way count's noise (the first release's)."""
    spec = plan.release("one_way")
    return float(spec.joint.variance) if spec.joint is not None else 2 * float(spec.sigma2)


def compiled_widths(plan: Any, z: float) -> tuple[int, ...]:
    """The widths a module would compile for the rule: from the least any cell can need
    (B_z >= z) to k - 1, at most four (``params.indif_widths.narrow_widths``'s spacing)."""
    return narrow_widths(plan.selection.indif_bits, z, plan.selection.max_rows)


def wrapped_scores(plan: Any, union_counts: np.ndarray, one_way: list, max_rows: int,
                   z: float, widths: tuple[int, ...] | None = None
                   ) -> tuple[list[tuple[int, int]], dict[tuple[int, int], int], dict[str, int]]:
    """Every pair's score with each chunk at the width of its largest B_z (module
    docstring): any width when ``widths`` is None, else the least of ``widths`` (or k) that
    holds it; with the chunks' lookups and the cells that wrapped."""
    pairs = [slot.attrs for slot in plan.layout.two_way]
    published = [np.maximum(m.counts.ravel().astype(float), 0.0) for m in one_way]
    expected = expected_counts_for_pairs([m.counts.ravel() for m in one_way], pairs, max_rows)
    rows = max(float(published[0].sum()), 1.0)
    variance = one_way_variance(plan)
    margin, k = plan.wrap_margin(), plan.selection.indif_bits
    sizes = plan.selection.chunk_sizes
    scores: dict[tuple[int, int], int] = {}
    lookups = wrapped = 0
    for slot in plan.layout.two_way:
        a, b = (published[i] / rows for i in slot.attrs)
        kk = np.asarray(expected[slot.attrs], dtype=np.int64)
        typical = z * np.sqrt(kk + variance * np.add.outer(a * a, b * b).ravel() + 1)
        bound = np.minimum(typical, cell_bounds(published, slot.attrs, kk, margin, max_rows))
        counts = union_counts[slot.offset:slot.offset + slot.size]
        order = np.argsort(bound, kind="stable")
        start, score = 0, 0
        for size in chunk_sizes_for(slot.size, sizes):
            part = order[start:start + size]
            need = width_for(float(bound[part].max()))
            width = (min(need, k) if widths is None
                     else min([w for w in widths if w >= need], default=k))
            lookups += chunk_bootstraps(size, width)
            score += indif_at_width(counts[part], kk[part], width)
            wrapped += int((np.abs(counts[part] - kk[part]) > 1 << (width - 1)).sum())
            start += size
        scores[slot.attrs] = score
    return pairs, scores, {"lookups": lookups, "wrapped_cells": wrapped}


def draw_stats(plan: Any, union_counts: np.ndarray, one_way: list, max_rows: int, z: float,
               widths: tuple[int, ...] | None) -> dict[str, Any]:
    """One draw: today's lookups and the rule's, wrapped cells, pairs whose score moved."""
    pairs, today = default_scores(plan, union_counts, one_way, max_rows)
    _, scores, stats = wrapped_scores(plan, union_counts, one_way, max_rows, z, widths)
    chunks = plan.indif_chunks_by_width([m.counts.ravel() for m in one_way])
    return {"lookups_today": sum(chunk_bootstraps(size, w) for *_, size, w in chunks),
            **stats, "cells": int(sum(slot.size for slot in plan.layout.two_way)),
            "moved_pairs": sum(1 for p in pairs if scores[p] != today[p]),
            "largest_drop": max(today[p] - scores[p] for p in pairs)}


def wrapped_scorer(z: float, label: str):
    def pair_scores(plan, union_counts, one_way, max_rows):
        DRAWS.setdefault(label, []).append(
            draw_stats(plan, union_counts, one_way, max_rows, z, None))
        pairs, scores, _ = wrapped_scores(plan, union_counts, one_way, max_rows, z)
        return pairs, scores
    return pair_scores


def at_z(z: float, label: str):
    def method(records, owner, schema, epsilon, delta, seed):
        saved = feddpsyn_served.pair_scores
        feddpsyn_served.pair_scores = wrapped_scorer(z, label)
        try:
            return feddpsyn_served.feddpsyn_default(records, owner, schema, epsilon, delta,
                                                    seed)
        finally:
            feddpsyn_served.pair_scores = saved
    return method


def counts(tables: list[str], eps_list: list[float], repeats: int,
           zs: list[float]) -> list[dict[str, Any]]:
    """Without synthesis: per table, eps and z, over ``repeats`` draws of the published
    1-ways (4 uniform owners, as the servers draw them), the rule's lookups (any width, and
    the widths a module would compile) against today's, the wrapped cells and the pairs whose
    score moved. Where no score moves the selection and release are today's on that draw."""
    sys.path.insert(0, str(ROOT / "experiments" / "p2_widths"))
    from bench_p2_widths import table

    from feddpsyn.fedbench.methods.feddpsyn_sim import simulate_release
    from feddpsyn.fedbench.partitions import uniform

    out = []
    for name in tables:
        records, schema = table(name)
        for eps in eps_list:
            draws: dict[tuple[float, str], list[dict[str, Any]]] = {}
            for repeat in range(repeats):
                rng = np.random.default_rng([repeat, 7])
                owner = uniform(len(records), 4, rng)
                plan = feddpsyn_served.served_plan(schema, len(records), eps, 1e-5,
                                                   "noisy-greedy", None)
                union = np.sum([plan.layout.counts(records[owner == c]) for c in range(4)],
                               axis=0)
                one_way, _ = simulate_release(plan, [plan.layout.counts(records[owner == c])
                                                     for c in range(4)],
                                              names=("one_way",), noise="plan")
                max_rows = plan.selection.max_rows
                for z in zs:
                    for kind, widths in (("any", None), ("compiled", compiled_widths(plan, z))):
                        stats = draw_stats(plan, union, one_way, max_rows, z, widths)
                        stats["widths"] = list(widths) if widths is not None else "any"
                        draws.setdefault((z, kind), []).append(stats)
            for (z, _kind), rows in draws.items():
                entry = {"table": name, "rows": len(records), "eps": eps, "z": z,
                         "widths": rows[0]["widths"], "draws": len(rows),
                         "lookups_today": statistics.mean(r["lookups_today"] for r in rows),
                         "lookups": statistics.mean(r["lookups"] for r in rows),
                         "wrapped_cells": statistics.mean(r["wrapped_cells"] for r in rows),
                         "cells": rows[0]["cells"],
                         "moved_pairs": statistics.mean(r["moved_pairs"] for r in rows),
                         "draws_with_a_moved_pair": sum(r["moved_pairs"] > 0 for r in rows),
                         "largest_drop": max(r["largest_drop"] for r in rows)}
                entry["lookup_ratio"] = round(entry["lookups"] / entry["lookups_today"], 3)
                out.append(entry)
                print(f"{name:16s} eps {eps:<4} z {z:g} widths {entry['widths']}: lookups "
                      f"x{entry['lookup_ratio']:.3f}, wrapped cells {entry['wrapped_cells']:.1f}"
                      f" of {entry['cells']}, moved pairs {entry['moved_pairs']:.1f} "
                      f"({entry['draws_with_a_moved_pair']} of {len(rows)} draws), largest "
                      f"drop {entry['largest_drop']}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--eps", default="0.3,1,4")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--z", default="8", help="comma-separated multiples z")
    parser.add_argument("--counts", action="store_true",
                        help="no synthesis: lookups, wrapped cells and moved scores only")
    parser.add_argument("--out", type=Path, help="the accuracy runs' folder")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    labels = {}
    for z in (float(v) for v in args.z.split(",")):
        label = f"feddpsyn-default@wrap={z:g}"
        METHODS[label] = at_z(z, label)
        KINDS[label] = WHAT_IF
        labels[label] = z
    eps_list = [float(e) for e in args.eps.split(",")]
    if args.counts:
        rows = counts(args.tables.split(","), eps_list, args.repeats, list(labels.values()))
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "what": "P2 at widths from a typical bound: lookups, wrapped cells and moved "
                    "scores against today's widths, same draws (no synthesis)",
            "command": "python experiments/p2_wrapped_widths/bench_wrapped_widths.py "
                       + " ".join(sys.argv[1:]),
            "commit": commit(), "machine": platform.node(),
            "date": datetime.date.today().isoformat(), "results": rows}, indent=1) + "\n")
        return
    if args.out is None:
        parser.error("--out is needed for the accuracy runs")
    entries = []
    for table in args.tables.split(","):
        csv, schema, target = _table(table)
        DRAWS.clear()
        rows = run_utility(csv, schema, target, ["feddpsyn-default", *labels], eps_list,
                           [Setting(4, "uniform", None)], args.repeats, args.out / table)
        for label, z in labels.items():
            draws = DRAWS.get(label, [])
            if len(draws) != len(eps_list) * args.repeats:
                raise RuntimeError(f"{label}: {len(draws)} scored draws, expected "
                                   f"{len(eps_list) * args.repeats} (run with one job)")
            for e_index, eps in enumerate(eps_list):
                base, wrapped = ([float(r["two_way"]) for r in rows
                                  if r["method"] == method and math.isclose(float(r["eps"]), eps)]
                                 for method in ("feddpsyn-default", label))
                # run_utility's order: repeat, then eps, then method.
                mine = [draws[r * len(eps_list) + e_index] for r in range(args.repeats)]
                entry = {"table": table, "eps": eps, "z": z, "repeats": args.repeats,
                         "default_two_way_mean": statistics.mean(base),
                         "wrapped_two_way_mean": statistics.mean(wrapped),
                         "ratio": statistics.mean(wrapped) / statistics.mean(base),
                         "per_draw_ratios": [w / b for w, b in zip(wrapped, base, strict=True)],
                         "lookups_today": statistics.mean(d["lookups_today"] for d in mine),
                         "lookups": statistics.mean(d["lookups"] for d in mine),
                         "wrapped_cells": statistics.mean(d["wrapped_cells"] for d in mine),
                         "cells": mine[0]["cells"],
                         "moved_pairs": statistics.mean(d["moved_pairs"] for d in mine)}
                entry["lookup_ratio"] = entry["lookups"] / entry["lookups_today"]
                entries.append(entry)
                print(f"{table:16s} eps {eps:<4} z {z:g}: 2-way L1 "
                      f"{entry['default_two_way_mean']:.4f} -> {entry['wrapped_two_way_mean']:.4f}"
                      f" (x{entry['ratio']:.3f}); P2 lookups x{entry['lookup_ratio']:.3f}; "
                      f"wrapped cells {entry['wrapped_cells']:.1f} of {entry['cells']}; "
                      f"moved pairs {entry['moved_pairs']:.1f}", flush=True)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "what": "noisy-greedy's scores with P2 at widths from a typical bound: 2-way L1 "
                    "and P2 lookups against the default, same draws",
            "command": "python experiments/p2_wrapped_widths/bench_wrapped_widths.py "
                       + " ".join(sys.argv[1:]),
            "commit": commit(), "machine": platform.node(),
            "date": datetime.date.today().isoformat(), "results": entries}, indent=1) + "\n")


if __name__ == "__main__":
    main()
