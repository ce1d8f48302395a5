"""Scoring a wide pair on merged cells: P2's lookups saved against the default's accuracy,
in the same run.

A pair whose table has more than ``cap`` cells is scored on a coarser table: the pair's
larger dimension is halved (adjacent bins summed two by two, an odd last bin alone) until
its cells are at most ``cap``, and the score is sum |C_m - K_m| over the merged cells (C
and K summed alike). The sensitivity stays 1 (a record lies in one merged cell), so the
scores' noise, the budget and the privacy record are the default's; only the score is
coarser (at most the full InDif: merging cannot raise an L1 distance). The release still
publishes each chosen pair in full.

The what-if ``feddpsyn-default@merge=<cap>`` is :func:`fedbench.methods.feddpsyn_served
.feddpsyn_default` with its pair scores computed that way (the selection's scorer is
replaced for the session and restored after it; ``--jobs 1``). Both methods run on the same
splits and seeds (``fedbench.runner.run_utility``, 4 uniform owners, 20% held out), so their
2-way errors compare draw for draw. P2's lookups are counted from the plan's chunks
(``params.selection_plan.chunk_sizes_for`` over each pair's cells, merged or not, each chunk
by ``crypto.indif.chunk_bootstraps`` at the full width).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.accuracy.bench_served_vs_central import TABLES, _table  # noqa: E402
from feddpsyn.crypto.indif import chunk_bootstraps, indif_exact  # noqa: E402
from feddpsyn.dp.pair_selection import expected_counts_for_pairs  # noqa: E402
from feddpsyn.fedbench.methods import (  # noqa: E402
    KINDS,
    METHODS,
    WHAT_IF,
    feddpsyn_served,  # noqa: E402
)
from feddpsyn.fedbench.provenance import commit  # noqa: E402
from feddpsyn.fedbench.runner import Setting, run_utility  # noqa: E402
from feddpsyn.params.selection_plan import chunk_sizes_for  # noqa: E402


def merged_shape(a: int, b: int, cap: int) -> tuple[int, int]:
    """The pair's table after halving its larger dimension until it has at most ``cap``
    cells (a dimension of 1 is never halved)."""
    while a * b > cap and max(a, b) > 1:
        if a >= b:
            a = (a + 1) // 2
        else:
            b = (b + 1) // 2
    return a, b


def merge(table: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """``table`` (a x b) summed over adjacent bins down to ``shape``."""
    out = table
    for axis, target in enumerate(shape):
        while out.shape[axis] > target:
            size = out.shape[axis]
            index = np.arange(size) // 2
            out = np.stack([np.take(out, np.flatnonzero(index == g), axis=axis).sum(axis=axis)
                            for g in range((size + 1) // 2)], axis=axis)
    return out


def merged_scorer(cap: int):
    def pair_scores(plan, union_counts, one_way, max_rows):
        pairs = [slot.attrs for slot in plan.layout.two_way]
        published = [m.counts.ravel() for m in one_way]
        expected = expected_counts_for_pairs(published, pairs, max_rows)
        sizes = plan.layout.domain_sizes
        scores = {}
        for slot in plan.layout.two_way:
            a, b = (sizes[i] for i in slot.attrs)
            shape = merged_shape(a, b, cap)
            c = merge(union_counts[slot.offset:slot.offset + slot.size].reshape(a, b), shape)
            k = merge(np.asarray(expected[slot.attrs]).reshape(a, b), shape)
            scores[slot.attrs] = indif_exact(c.ravel(), k.ravel())
        return pairs, scores
    return pair_scores


def at_merge_cap(cap: int):
    def method(records, owner, schema, epsilon, delta, seed):
        saved = feddpsyn_served.pair_scores
        feddpsyn_served.pair_scores = merged_scorer(cap)
        try:
            return feddpsyn_served.feddpsyn_default(records, owner, schema, epsilon, delta,
                                                    seed)
        finally:
            feddpsyn_served.pair_scores = saved
    return method


def lookups(schema, rows: int, eps: float, cap: int | None) -> int:
    plan = feddpsyn_served.served_plan(schema, rows, eps, 1e-5, "noisy-greedy", None)
    k, sizes = plan.selection.indif_bits, plan.selection.chunk_sizes
    total = 0
    for slot in plan.layout.two_way:
        a, b = (plan.layout.domain_sizes[i] for i in slot.attrs)
        cells = a * b if cap is None else int(np.prod(merged_shape(a, b, cap)))
        total += sum(chunk_bootstraps(s, k) for s in chunk_sizes_for(cells, sizes))
    return total


def paired(tables: list[str], eps_list: list[float], repeats: int, cap: int,
           trials: int = 4) -> list[dict]:
    """Without synthesis: noisy-greedy's kept pairs from the default's scores and from the
    merged ones, the same score noise added to both (``trials`` noise draws per draw of
    the published 1-ways, 4 uniform owners): where they agree, so do the releases."""
    sys.path.insert(0, str(ROOT / "experiments" / "p2_widths"))
    sys.path.insert(0, str(ROOT / "experiments" / "p2_wrapped_widths"))
    from bench_p2_widths import session_draw, table
    from bench_wrapped_widths import kept_pairs_differ

    from feddpsyn.fedbench.methods.feddpsyn_sim import pair_scores

    rows = []
    for name in tables:
        records, schema = table(name)
        for eps in eps_list:
            differ = []
            for repeat in range(repeats):
                plan, union, one_way = session_draw(records, schema, eps,
                                                    np.random.default_rng([repeat, 7]))
                max_rows = plan.selection.max_rows
                pairs, default = pair_scores(plan, union, one_way, max_rows)
                _, merged = merged_scorer(cap)(plan, union, one_way, max_rows)
                for _ in range(trials):
                    noise = feddpsyn_served._score_noise(plan, len(pairs))[0]
                    differ.append(kept_pairs_differ(plan, pairs, default, merged, noise))
            rows.append({"table": name, "eps": eps, "cap": cap, "paired_trials": len(differ),
                         "same_selection": sum(d == 0 for d in differ),
                         "pairs_differing": statistics.mean(differ)})
            print(f"{name:16s} eps {eps:<4} cap {cap}: same selection in "
                  f"{rows[-1]['same_selection']} of {len(differ)}, "
                  f"{rows[-1]['pairs_differing']:.2f} pairs differ on average", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--eps", default="0.3,1,4")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cap", type=int, default=64)
    parser.add_argument("--paired", action="store_true",
                        help="no synthesis: the kept pairs under the same score noise")
    parser.add_argument("--out", type=Path, help="the accuracy runs' folder")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    if args.paired:
        rows = paired(args.tables.split(","), [float(e) for e in args.eps.split(",")],
                      args.repeats, args.cap)
        args.json.write_text(json.dumps({
            "what": "noisy-greedy's kept pairs from merged-cell scores against the default's, "
                    "the same score noise added to both (no synthesis)",
            "command": "python experiments/p2_merged_cells/bench_merged_cells.py "
                       + " ".join(sys.argv[1:]),
            "commit": commit(), "machine": platform.node(),
            "date": datetime.date.today().isoformat(), "results": rows}, indent=1) + "\n")
        return
    if args.out is None:
        parser.error("--out is needed for the accuracy runs")
    name = f"feddpsyn-default@merge={args.cap}"
    METHODS[name] = at_merge_cap(args.cap)
    KINDS[name] = WHAT_IF
    code = commit()
    eps_list = [float(e) for e in args.eps.split(",")]
    entries = []
    for table in args.tables.split(","):
        csv, schema, target = _table(table)
        with open(csv) as handle:
            n = sum(1 for _ in handle) - 1
        sizes = schema.domain_sizes
        wide = [(i, j) for i in range(len(sizes)) for j in range(i + 1, len(sizes))
                if sizes[i] * sizes[j] > args.cap]
        if not wide:
            # No pair is merged: the what-if is the default, draw for draw.
            entries.append({"table": table, "cap": args.cap, "merged_pairs": 0,
                            "largest_pair_cells": max(sizes[i] * sizes[j]
                                                      for i in range(len(sizes))
                                                      for j in range(i + 1, len(sizes))),
                            "ratio": 1.0, "lookup_ratio": 1.0,
                            "note": "no pair above the cap: the same scores as the default"})
            print(f"{table:16s} no pair above {args.cap} cells: identical to the default",
                  flush=True)
            continue
        rows = run_utility(csv, schema, target, ["feddpsyn-default", name], eps_list,
                           [Setting(4, "uniform", None)], args.repeats, args.out / table)
        for eps in eps_list:
            base, merged = ([float(r["two_way"]) for r in rows
                             if r["method"] == method and float(r["eps"]) == eps]
                            for method in ("feddpsyn-default", name))
            full, fewer = lookups(schema, n, eps, None), lookups(schema, n, eps, args.cap)
            entry = {"table": table, "eps": eps, "cap": args.cap, "repeats": args.repeats,
                     "merged_pairs": len(wide),
                     "default_two_way_mean": statistics.mean(base),
                     "merged_two_way_mean": statistics.mean(merged),
                     "ratio": statistics.mean(merged) / statistics.mean(base),
                     "per_draw_ratios": [m / b for m, b in zip(merged, base, strict=True)],
                     "p2_lookups": full, "p2_lookups_merged": fewer,
                     "lookup_ratio": fewer / full}
            entries.append(entry)
            print(f"{table:16s} eps {eps:<4} 2-way L1 {entry['default_two_way_mean']:.4f} -> "
                  f"{entry['merged_two_way_mean']:.4f} (x{entry['ratio']:.3f}); P2 lookups "
                  f"{full} -> {fewer} (x{entry['lookup_ratio']:.3f})", flush=True)
        args.json.write_text(json.dumps({
            "what": "noisy-greedy's scores on merged cells for wide pairs: 2-way L1 and P2 "
                    "lookups against the default, same draws",
            "command": "python experiments/p2_merged_cells/bench_merged_cells.py "
                       + " ".join(sys.argv[1:]),
            "commit": code, "machine": platform.node(),
            "date": datetime.date.today().isoformat(), "results": entries}, indent=1) + "\n")


if __name__ == "__main__":
    main()
