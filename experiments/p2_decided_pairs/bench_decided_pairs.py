"""Could P2 skip the pairs that noisy-greedy can never choose? What it would save, measured.

noisy-greedy's rule (``params.run_time.select_pairs``, PrivSyn's greedy loop) adds a pair only
when its noisy score exceeds what adding it costs in noise, and that cost is least when the
pair would be the first one chosen: its own expected L1 noise with no other pair in the
allocation (:func:`first_pick_cost`; every later pick shares the budget with more weight,
and raises the others' noise too). With the joint score noise the noise is bounded
(|Z| <= span / 2), so a pair whose score plus span / 2 is below that cost is never chosen,
whatever the draw: P2 could skip it, and the selection and the release would be exactly
those of today (the skipped scores are never computed, which only removes work).

Two rules are counted, for the servers' default plan on the six shared tables, 4 uniform
owners, the 1-ways drawn as the servers draw them, eps 0.3/1/4, 5 repeats:

* ``public``: what the servers could apply, from public values only: a score is at most
  max_rows + the sum of the pair's expected counts K (|C - K| <= C + K cell by cell).
* ``oracle``: the true InDif of the draw (no server knows it): the most any rule that keeps
  the selection exactly as it is could skip.

For each, the share of P2's lookups (``crypto.indif.chunk_bootstraps`` over the plan's
chunks at the full width) in the skipped pairs. Where the scores carry two Gaussians
instead of the joint noise there is no hard bound: the count then uses 10 sd of their sum
(a bound that holds with probability above 1 - 1e-22 per score, not always), and says so.
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

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments" / "p2_widths"))

from bench_p2_widths import TABLES, published_draw, table  # noqa: E402

from feddpsyn.crypto.indif import chunk_bootstraps, indif_exact  # noqa: E402
from feddpsyn.dp.privsyn_allocation import allocation_weight  # noqa: E402
from feddpsyn.fedbench.provenance import commit  # noqa: E402
from feddpsyn.params import run_time  # noqa: E402
from feddpsyn.params.session_plan import SessionPlan  # noqa: E402

SCALE = math.sqrt(2 / math.pi)


def first_pick_cost(plan: SessionPlan, cells: dict, pair: tuple[int, int]) -> float:
    """The least noise cost of choosing ``pair`` under the plan's greedy rule: its own
    expected L1 noise when it is the first pair chosen (the rule's ``total_error`` with
    only this pair selected, minus the error with none)."""
    two = plan.release("two_way")
    w = float(allocation_weight(cells[pair]))
    if plan.one_way_topup:
        rho = float(plan.release("one_way").rho + two.rho)
        base = sum(float(allocation_weight(s.size)) for s in plan.layout.one_way)
        rho_p = rho * w / (base + w)
        return SCALE * cells[pair] * math.sqrt(run_time.variance_ratio(plan, rho_p)
                                               / (2 * rho_p))
    # Alone in the allocation, the pair holds the release's whole rho, even or PrivSyn's.
    return SCALE * cells[pair] * math.sqrt(1 / (2 * float(two.rho)))


def one_draw(records, schema, eps: float, seed: int) -> dict:
    plan, union, _, expected = published_draw(records, schema, eps,
                                              np.random.default_rng([seed, 11]))
    cells = {s.attrs: s.size for s in plan.layout.two_way}
    joint = plan.selection.score_joint
    if joint is not None:
        half, bound = joint.span // 2, "joint span / 2"
    else:
        half, bound = 10 * math.sqrt(2 * float(plan.selection.noise_sigma2)), "10 sd"
    k = plan.selection.indif_bits
    lookups = dict.fromkeys(cells, 0)
    for index, _, size in plan.indif_chunks():
        lookups[plan.layout.two_way[index].attrs] += chunk_bootstraps(size, k)
    skipped: dict[str, list] = {"public": [], "oracle": []}
    costs, public_bounds = [], []
    for slot in plan.layout.two_way:
        cost = first_pick_cost(plan, cells, slot.attrs)
        public = plan.selection.max_rows + float(np.sum(expected[slot.attrs]))
        costs.append(cost)
        public_bounds.append(public)
        if public + half < cost:
            skipped["public"].append(slot.attrs)
        true = indif_exact(union[slot.offset:slot.offset + slot.size], expected[slot.attrs])
        if true + half < cost:
            skipped["oracle"].append(slot.attrs)
    total = sum(lookups.values())
    return {"pairs": len(cells), "lookups": total, "bound": bound, "half": half,
            "cost_range": [min(costs), max(costs)], "public_min": min(public_bounds),
            **{f"{rule}_pairs": len(p) for rule, p in skipped.items()},
            **{f"{rule}_share": sum(lookups[q] for q in p) / total
               for rule, p in skipped.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--eps", default="0.3,1,4")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for name in args.tables.split(","):
        records, schema = table(name)
        for eps in [float(e) for e in args.eps.split(",")]:
            draws = [one_draw(records, schema, eps, seed) for seed in range(args.repeats)]
            row = {"table": name, "rows": len(records), "eps": eps,
                   "pairs": draws[0]["pairs"], "p2_lookups": draws[0]["lookups"],
                   "noise_bound": draws[0]["bound"], "noise_half": round(draws[0]["half"], 1),
                   "first_pick_cost_range": [round(min(d["cost_range"][0] for d in draws), 1),
                                             round(max(d["cost_range"][1] for d in draws), 1)],
                   "public_bound_min": round(min(d["public_min"] for d in draws), 1),
                   "repeats": args.repeats}
            for rule in ("public", "oracle"):
                row[f"{rule}_pairs_mean"] = statistics.mean(d[f"{rule}_pairs"] for d in draws)
                row[f"{rule}_lookup_share_mean"] = round(
                    statistics.mean(d[f"{rule}_share"] for d in draws), 4)
            rows.append(row)
            print(f"{name:16s} eps {eps:<4} {row['pairs']:3d} pairs, {row['p2_lookups']:7d} "
                  f"P2 lookups; noise bound {row['noise_half']} ({row['noise_bound']}), "
                  f"first-pick costs {row['first_pick_cost_range']}, public score bound "
                  f">= {row['public_bound_min']}: public rule skips "
                  f"{row['public_pairs_mean']:.1f} pairs ({row['public_lookup_share_mean']:.1%}"
                  f" of P2), oracle {row['oracle_pairs_mean']:.1f} "
                  f"({row['oracle_lookup_share_mean']:.1%})", flush=True)
    if args.json:
        args.json.write_text(json.dumps({
            "what": "P2's lookups in pairs noisy-greedy can never choose: a public bound's "
                    "and the true score's (an oracle's) share",
            "command": "python experiments/p2_decided_pairs/bench_decided_pairs.py --json "
                       + str(args.json),
            "commit": commit(), "machine": platform.node(),
            "date": datetime.date.today().isoformat(), "results": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
