"""P2's widths from a typical bound beside the worst case: lookups, wrapped cells, moved
scores and noisy-greedy's selection under the same noise, against the worst-case bound.

The worst-case bound on a cell's |C - K| (``params.indif_widths``) is about three times
what the cells' own need (``experiments/p2_cost_floor/``). With a multiple z the servers
bound each cell by

    B_z = min(z sqrt(K + v (p_a^2 + p_b^2) + 1), the worst-case bound)

(``params.indif_widths.cell_bounds`` with a ``Typical``): z deviations of a cell of an
independent pair, K's own error from the published 1-ways included. A cell past its width
wraps (P2 scores its distance to the nearest multiple of 2^w: at most |C - K|, 1-Lipschitz,
so privacy is unchanged) and lowers its pair's score. Whether that matters is decided by the
selection, so for each table, eps and draw of the published 1-ways (4 uniform owners, drawn
as the servers draw them) this compares, through the servers' own code (the plan's chunks
and ``fedbench.methods.feddpsyn_sim.pair_scores``):

* P2's lookups (``crypto.indif.chunk_bootstraps`` over the chunks) with B_z and the widths
  the module would compile for it, against the worst-case bound's chunks and widths;
* the cells that wrapped and the pairs whose score moved;
* noisy-greedy's kept pairs with the same score noise added to both sets of scores
  (``NOISE_TRIALS`` noise draws a draw): where they are the same, so is the release.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments" / "p2_widths"))

from bench_p2_widths import TABLES, session_draw, table  # noqa: E402

from feddpsyn.crypto.indif import chunk_bootstraps  # noqa: E402
from feddpsyn.dp.pair_selection import expected_counts_for_pairs  # noqa: E402
from feddpsyn.fedbench.methods import feddpsyn_served  # noqa: E402
from feddpsyn.fedbench.methods.feddpsyn_sim import pair_scores  # noqa: E402
from feddpsyn.fedbench.provenance import commit  # noqa: E402
from feddpsyn.params.indif_widths import narrow_widths  # noqa: E402

# Score-noise draws per draw of the 1-ways: the same noise under both bounds.
NOISE_TRIALS = 4


def with_bound(plan: Any, z: float | None) -> Any:
    """The plan with B_z (z None: the worst-case bound alone) and the widths its module
    would compile for it."""
    selection = plan.selection
    widths = narrow_widths(selection.indif_bits, plan.wrap_margin(), selection.max_rows, z)
    return dataclasses.replace(plan, selection=dataclasses.replace(
        selection, indif_widths=widths, indif_typical=int(z) if z and widths else None))


def lookups_and_wraps(plan: Any, union: np.ndarray, published: list[np.ndarray]
                      ) -> tuple[int, int]:
    """P2's lookups over the plan's chunks at their widths, and the cells that wrapped."""
    expected = expected_counts_for_pairs(published, plan.layout.pairs, plan.selection.max_rows)
    lookups = wrapped = 0
    for index, cells, size, width in plan.indif_chunks_by_width(published):
        slot = plan.layout.two_way[index]
        lookups += chunk_bootstraps(size, width)
        d = union[cells] - np.asarray(expected[slot.attrs])[cells - slot.offset]
        wrapped += int((np.abs(d) > 1 << (width - 1)).sum())
    return lookups, wrapped


def kept_pairs_differ(plan: Any, pairs: list, first: dict, second: dict,
                      noise: np.ndarray) -> int:
    """How many pairs noisy-greedy's kept sets differ by (symmetric difference) between two
    sets of scores with the same noise added to both."""
    def kept(scores: dict) -> set:
        return set(plan.select_pairs({p: scores[p] + int(z)
                                      for p, z in zip(pairs, noise, strict=True)}))
    return len(kept(first) ^ kept(second))


def one_setting(name: str, records: np.ndarray, schema: Any, eps: float, repeats: int,
                z: float) -> dict[str, Any]:
    draws = []
    for repeat in range(repeats):
        plan, union, one_way = session_draw(records, schema, eps,
                                            np.random.default_rng([repeat, 7]))
        published = [m.counts.ravel() for m in one_way]
        worst, typical = with_bound(plan, None), with_bound(plan, z)
        pairs, before = pair_scores(worst, union, one_way, plan.selection.max_rows)
        _, after = pair_scores(typical, union, one_way, plan.selection.max_rows)
        noises = [feddpsyn_served._score_noise(plan, len(pairs))[0]
                  for _ in range(NOISE_TRIALS)]
        narrow, wrapped = lookups_and_wraps(typical, union, published)
        draws.append({
            "lookups_worst": lookups_and_wraps(worst, union, published)[0],
            "lookups_typical": narrow, "wrapped_cells": wrapped,
            "moved_pairs": sum(1 for p in pairs if before[p] != after[p]),
            "largest_drop": max(before[p] - after[p] for p in pairs),
            "kept_differ": [kept_pairs_differ(plan, pairs, before, after, noise)
                            for noise in noises],
            "widths": list(typical.selection.indif_widths),
            "worst_case_widths": list(worst.selection.indif_widths)})
    trials = [t for d in draws for t in d["kept_differ"]]
    return {"table": name, "rows": len(records), "eps": eps, "z": z, "draws": repeats,
            "widths": draws[0]["widths"],
            "worst_case_widths": draws[0]["worst_case_widths"],
            "lookup_ratio": round(statistics.mean(d["lookups_typical"] for d in draws)
                                  / statistics.mean(d["lookups_worst"] for d in draws), 3),
            "cells": int(sum(s.size for s in plan.layout.two_way)),
            "wrapped_cells": statistics.mean(d["wrapped_cells"] for d in draws),
            "moved_pairs": statistics.mean(d["moved_pairs"] for d in draws),
            "largest_drop": max(d["largest_drop"] for d in draws),
            "paired_trials": len(trials), "same_selection": sum(t == 0 for t in trials),
            "pairs_differing": statistics.mean(trials)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--eps", default="0.3,1,4")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--z", default="12", help="comma-separated multiples z")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    for name in args.tables.split(","):
        records, schema = table(name)
        for eps in (float(e) for e in args.eps.split(",")):
            for z in (float(v) for v in args.z.split(",")):
                row = one_setting(name, records, schema, eps, args.repeats, z)
                rows.append(row)
                print(f"{name:16s} eps {eps:<4} z {z:g} widths {row['widths']} (worst case "
                      f"{row['worst_case_widths']}): lookups x{row['lookup_ratio']:.3f}, "
                      f"wrapped cells {row['wrapped_cells']:.1f} of {row['cells']}, moved "
                      f"pairs {row['moved_pairs']:.1f}, same selection in "
                      f"{row['same_selection']} of {row['paired_trials']}", flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "what": "P2's widths from a typical bound against the worst-case bound: lookups, "
                "wrapped cells, moved scores, noisy-greedy's kept pairs under the same noise",
        "command": "python experiments/p2_wrapped_widths/bench_wrapped_widths.py "
                   + " ".join(sys.argv[1:]),
        "commit": commit(), "machine": platform.node(),
        "date": datetime.date.today().isoformat(), "noise_trials": NOISE_TRIALS,
        "results": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
