"""DistAIM in FLAIM's setting vs central AIM in the same run (FLAIM paper, Table 1 / Fig. 2).

    .venv/bin/python bench/distaim/bench_distaim_flaim.py --repeats 5 --bins 32 --oracle plain \
        --json bench/results/distaim_flaim_32.json
    .venv/bin/python bench/distaim/bench_distaim_flaim.py --repeats 3 --bins 10 \
        --json bench/results/distaim_flaim.json

Needs the bench extra for FLAIM's UMAP split: ``.venv/bin/pip install -e '.[bench]'``
(umap-learn==0.5.12); the split is cached (``--split-cache``) after the first run.

Setting as in FLAIM's experiments and code: Adult with FLAIM's 14 attributes, K = 100
clients from FLAIM's clustering split (``fedbench.partitions.umap_clusters``: UMAP then
k-means, one split for every repeat as FLAIM caches it; heterogeneity printed on FLAIM's
Table 4 measure), its workload (64 3-way marginals, ``default_rng(123).choice`` over
``combinations``), client participation p = 0.1 (a client's shares count from the first
round it is sampled on and stay: ``distaim.protocol.Participation``, the servers' joint
coins), T = 10 rounds (FLAIM's fixed-T mode of ``synthesis.aim``: no annealing, exactly T
selections), eps = 1, delta = 1e-5, continuous columns in 32 bins as FLAIM (``--bins 10``:
the project's default; ``--bins pgm``: private-pgm's Adult sizes). FLAIM reports DistAIM
0.42 vs AIM 0.20 workload error (ratio 2.1), and ~140 MB uploaded per client.

Schedules (``distaim.protocol.Schedule``, ``--schedule``). ``interleaved`` is FLAIM's
Algorithm 3 as written: AIM round t reads the clients joined by participation round t.
``deferred`` (the default) runs the same participation rounds first and AIM
after them, every round on the clients joined by round T: the same clients upload in the
same rounds and nothing is released earlier, so it is the same setting with one data set
per run instead of eleven growing ones. Measured, 32 bins, plain oracle, UMAP split
(heterogeneity 0.522), error = FLAIM's l1_avg_err over the workload's downward closure:

| DistAIM p = 0.1 | repeats | DistAIM | central AIM, same T and rho | ratio |
|---|---|---|---|---|
| interleaved (FLAIM's Algorithm 3) | 3 | 0.253 +- 0.033 | 0.106 +- 0.005 | 2.38 |
| deferred (default) | 5 | 0.156 +- 0.006 | 0.102 +- 0.001 | 1.52 |
| deferred + enrolment 1-ways | 5 | 0.124 +- 0.008 | 0.103 +- 0.004 | 1.20 |
| FLAIM Table 1 (10 runs, 43,958 rows) | 10 | 0.42 | 0.20 | 2.1 |

At 10 bins the servers' MPC program (one-party runtime), deferred, 3 repeats: 0.108 +- 0.007
vs 0.070 +- 0.009 (1.54), DistAIM at p = 1 0.074 +- 0.005; with enrolment 1-ways 0.103 +-
0.009 vs 0.072 +- 0.007 (1.42). At ``--bins pgm`` (private-pgm's sizes, which FLAIM's code
reads), deferred, 3 repeats: 0.179 +- 0.016 vs 0.138 +- 0.003 (1.30); interleaved, before
the schedule: 0.292 +- 0.019 vs 0.136 +- 0.003 (2.14).

What is left is not noise but data: the exact marginals of the clients joined by round T
(about 68 of 100) are 0.097 +- 0.014 from the union's at 32 bins and 0.079 +- 0.013 at 10
bins (20 participation draws each), i.e. 0.94x / 1.2x central AIM's whole error before any
noise is added (``subset_floor`` in the JSON, per repeat). Within FLAIM's availability model
(a client never sampled never uploads) no schedule can see the remaining clients.
``central_aim_subset`` (every run) is central AIM with the same T and rho run by a trusted
curator on those joined clients only and scored against the union: what AIM can reach within
that availability model with no protocol at all. ``--enrolment-one-ways`` assumes more: every client uploads its 1-way marginals once at
enrolment (271 cells at 32 bins), and the 1-way initialisation reads all of them; it spends
no extra budget (the same measurements, of a larger set) and is off by default.

DistAIM's MPC program (``MpcOracle`` inside ``synthesis.aim.aim``: secure L1 scores, in-MPC
exponential mechanism and Gaussian, the secure sums of the clients each round reads, and,
when rounds read different sets, the noisy sizes that rescale them) runs in a ONE-PARTY in-process MPyC runtime: the same code
the three servers run without the communication (which changes no opened value); its budget
is a session's (rho from (eps, delta - delta / 1000)). Central AIM (``PlainOracle``, exact
samplers) runs on the union with the same workload, T and the same rho, so the two differ
only in the subsampling. DistAIM at p = 1 runs too (unless ``--skip-p1``): with every client
from round 0 its engine is central AIM's. Error = FLAIM's Definition 2.2 as its code computes
it (``l1_avg_err``): mean L1 distance of the normalised marginals between the union and the
synthetic table (as many rows as the union) over the workload's downward closure. Upload bytes per client: raw seed-compressed Shamir shares (two vectors of
12-byte field elements + a 32-byte seed) and the JSON/base64 request bytes ``distaim.client``
sends (the layout is public, so the same for all clients).
"""

from __future__ import annotations

import argparse
import itertools
import json
import secrets
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.distaim.distaim_common import adult_flaim  # noqa: E402
from feddpsyn.distaim.mpc_runtime import EM_SECINT_BITS, SECINT_BITS, local_runtime  # noqa: E402
from feddpsyn.distaim.oracle import MpcOracle  # noqa: E402
from feddpsyn.distaim.plan import session_rho  # noqa: E402
from feddpsyn.distaim.protocol import Layout, Participation, Schedule, client_vector  # noqa: E402
from feddpsyn.fedbench.partitions import feature_skew, umap_clusters  # noqa: E402
from feddpsyn.synthesis.aim import PlainOracle, aim, completion  # noqa: E402
from feddpsyn.synthesis.evaluate import marginal  # noqa: E402
from feddpsyn.synthesis.graphical_model import marginal_counts  # noqa: E402

FLAIM_TABLE_1 = {"distaim": 0.42, "central_aim": 0.20}


def workload_l1(real, synth, sizes, workload) -> float:
    """Mean L1 distance of the normalised marginals over ``workload``."""
    return float(np.mean([np.abs(marginal(real, c, sizes) - marginal(synth, c, sizes)).sum()
                          for c in workload]))


def errors_of(real, synth, sizes, workload) -> dict[str, float]:
    """``flaim``: FLAIM's reported workload error (its code's ``l1_avg_err``: the mean over the
    workload's downward closure, every 1-, 2- and 3-way subset of the 64 triples);
    ``three_way``: the mean over the 64 triples alone (this bench's former number)."""
    return {"flaim": workload_l1(real, synth, sizes, completion(workload)),
            "three_way": workload_l1(real, synth, sizes, workload)}


def flaim_workload(d: int, triples: int, seed: int) -> list[tuple[int, ...]]:
    """FLAIM's workload rule: ``triples`` of the 3-way marginals in ``combinations`` order,
    drawn by ``numpy.random.default_rng(seed).choice`` without replacement (its code's
    ``WorkloadManager`` with seed 123 over the same column order picks the same triples)."""
    every = list(itertools.combinations(range(d), 3))
    if not triples:
        return every
    pick = np.random.default_rng(seed).choice(len(every), min(triples, len(every)),
                                              replace=False)
    return [every[i] for i in pick]


def heterogeneity(records, owner, sizes) -> float:
    """FLAIM's Table 4 measure of a split: the mean over clients of the mean total-variation
    distance between the client's and the union's normalised marginals, over every 1-, 2-
    and 3-way marginal (FLAIM reports 0.525 for Adult's clustering split, 0.241 for IID)."""
    clients = int(owner.max()) + 1
    rows = np.bincount(owner, minlength=clients).astype(float)
    cliques = [c for k in (1, 2, 3) for c in itertools.combinations(range(len(sizes)), k)]
    total = np.zeros(clients)
    for clique in cliques:
        union = marginal_counts(records, clique, sizes) / len(records)
        flat = np.zeros(len(records), dtype=np.int64)
        for a in clique:
            flat = flat * sizes[a] + records[:, a]
        keys, counts = np.unique(owner.astype(np.int64) * len(union) + flat, return_counts=True)
        client, cell = keys // len(union), keys % len(union)
        share = counts / rows[client]
        # TV = (sum over the client's cells of |p_k - p| + the union's mass elsewhere) / 2
        inside = np.bincount(client, np.abs(share - union[cell]), clients)
        covered = np.bincount(client, union[cell], clients)
        total += (inside + 1 - covered) / 2
    return float((total / len(cliques)).mean())


def upload_bytes(cells: int) -> tuple[int, int]:
    """(raw share bytes, HTTP request bytes) of one client's seed-compressed upload."""
    raw = 2 * 12 * cells + 32
    vector_json = len('{"vector_b64": ""}') + 4 * ((12 * cells + 2) // 3)
    return raw, 2 * vector_json + len('{"seed_hex": ""}') + 64


def run_distaim(client_vectors, layout, sizes, workload, rho, epsilon, rate, rounds, seed,
                clients_bound, schedule: Schedule):
    rt = local_runtime()
    secint, em = rt.SecInt(SECINT_BITS), rt.SecInt(EM_SECINT_BITS)
    ids = [f"c{k:03d}" for k in range(len(client_vectors))]
    by_id = dict(zip(ids, client_vectors))
    participation = Participation(secrets.token_bytes(32), Fraction(rate))
    sums: dict[tuple[str, ...], object] = {}
    joined_log: list[int] = []
    last_read: list[tuple[str, ...]] = [()]

    def totals_at_round(t):
        joined = tuple(schedule.clients_at(participation, ids, t))
        if t is not None:
            joined_log.append(len(joined))
            last_read[0] = joined
        if joined not in sums:
            total = np.sum([by_id[c] for c in joined], axis=0) if joined else np.zeros(
                layout.length, dtype=np.int64)
            sums[joined] = secint.array(secint.field.array(total.astype(object)))
        return sums[joined]

    oracle = MpcOracle(rt, secint, em, None, layout, epsilon, rows_bound=clients_bound,
                       totals_at_round=totals_at_round, score_grid_bits=0,
                       grows=schedule.grows(participation.rate))
    run = aim(oracle, sizes, workload, rho, rounds=rounds, max_rounds=rounds,
              rng=np.random.default_rng(seed))
    selects = [t for t in oracle.timings if t["step"] == "select"]
    return run, oracle, joined_log, selects, last_read[0]


class SubsetOracle(PlainOracle):
    """DistAIM's algorithm with the data handled in the clear (``--oracle plain``): the
    union of the clients joined by each round, the same participation coins, noisy sizes and
    rescaling, with the exact samplers of central AIM. The MPC program opens values from the
    same distributions up to its samplers' total variation (about 1e-12 a run), so this
    measures the same algorithm's utility faster; the 10-bin runs check both agree."""

    def __init__(self, records, owner, sizes, rate, clients, schedule: Schedule):
        self.ids = [f"c{k:03d}" for k in range(clients)]
        self.width = records.shape[1]
        self.by_client = {cid: records[owner == k] for k, cid in enumerate(self.ids)}
        self.participation = Participation(secrets.token_bytes(32), Fraction(rate))
        self.schedule = schedule
        self.grows = schedule.grows(self.participation.rate)
        self.round = 0
        self.joined_log: list[int] = []
        self._joined: tuple = ()
        super().__init__(self._records(0), sizes)

    def _records(self, t):
        joined = tuple(self.schedule.clients_at(self.participation, self.ids, t))
        self.joined_log.append(len(joined))
        self._joined = joined
        parts = [self.by_client[c] for c in joined]
        return np.concatenate(parts) if parts else np.zeros((0, self.width), int)

    def advance(self) -> bool:
        self.round += 1
        before = self._joined
        records = self._records(self.round)
        if self._joined == before:
            return False
        self.records, self._counts = records, {}
        return True

    def measure_total(self, sigma2, scope) -> int:
        n = sum(len(r) for r in self.by_client.values()) if scope == "all" else len(
            self.records)
        return n + self.sampler.discrete_gaussian(Fraction(sigma2))


def mean_sd(values) -> tuple[float, float]:
    v = np.array(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else float("nan")


def flaim_split(clients: int, cache: Path) -> np.ndarray:
    """FLAIM's clustering split of Adult (``umap_clusters`` on private-pgm's codes, seed 0),
    kept at ``cache`` (it takes minutes; the client of each row, rows in the CSV's order)."""
    if cache.exists():
        owner = np.load(cache)
        if owner.max() + 1 == clients:
            return owner
    try:
        import umap  # noqa: F401
    except ImportError:
        sys.exit("the UMAP split needs umap-learn: install the bench extra, "
                 "`.venv/bin/pip install -e '.[bench]'` (umap-learn==0.5.12), "
                 "or run with --partition kmeans")
    owner = umap_clusters(adult_flaim(None)[0], clients, seed=0)
    np.save(cache, owner)
    return owner


def bins_arg(text: str) -> int | None:
    return None if text == "pgm" else int(text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rate", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--bins", type=bins_arg, default=32, help=(
        "bins per continuous column, or 'pgm': private-pgm's Adult sizes, which FLAIM's "
        "code reads (age 85, fnlwgt 100, education-num 16, capital-gain/loss 100, hours 99)"))
    parser.add_argument("--triples", type=int, default=64,
                        help="3-way marginals in the workload (0: all of them)")
    parser.add_argument("--workload-seed", type=int, default=123, help="FLAIM's is 123")
    parser.add_argument("--partition", choices=["umap", "kmeans"], default="umap", help=(
        "umap: FLAIM's clustering split (one split for every repeat, as FLAIM caches its "
        "split; computed on private-pgm's codes); kmeans: k-means on the one-hot records, a "
        "new split per repeat (stronger skew)"))
    parser.add_argument("--split-cache", type=Path, default=Path(
        "/tmp/feddpsyn-adult-umap-k100-seed0.npy"), help="where the UMAP split is kept")
    parser.add_argument("--skip-p1", action="store_true", help="no DistAIM p=1 reference")
    parser.add_argument("--schedule", choices=["deferred", "interleaved"], default="deferred",
                        help=("which clients AIM's rounds read (distaim.protocol.Schedule): "
                              "deferred, the clients joined by round T; interleaved, FLAIM's "
                              "Algorithm 3 as written, those joined by round t"))
    parser.add_argument("--enrolment-one-ways", action="store_true", help=(
        "the 1-way initialisation reads every client (assumes every client reachable once, "
        "which FLAIM's setting does not)"))
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--oracle", choices=["mpc", "plain"], default="mpc", help=(
        "mpc: the servers' program in a one-party runtime; plain: the same algorithm with "
        "the data in the clear (SubsetOracle), for the larger domains"))
    args = parser.parse_args()
    records, sizes, names = adult_flaim(args.bins)
    d = len(sizes)
    triples = flaim_workload(d, args.triples, args.workload_seed)
    layout = Layout.for_workload(sizes, triples)
    raw, http = upload_bytes(layout.length)
    bins = "pgm" if args.bins is None else args.bins
    print(f"Adult: {len(records)} rows, {d} attributes, domain {sizes}; workload "
          f"{len(triples)} 3-way marginals, completion {len(layout.cliques)} marginals, "
          f"{layout.length} cells; upload per client {raw / 1e6:.2f} MB raw, "
          f"{http / 1e6:.2f} MB over HTTP ({http / layout.length:.1f} B per cell)", flush=True)
    rho = session_rho(args.epsilon, args.delta)
    schedule = Schedule(args.rounds, args.schedule, args.enrolment_one_ways)
    methods = (["distaim"] + ([] if args.skip_p1 else ["distaim_p1"])
               + ["central_aim", "central_aim_subset"])
    errors: dict[str, dict[str, list[float]]] = {
        m: {"flaim": [], "three_way": []} for m in methods}
    seconds: dict[str, list[float]] = {m: [] for m in methods}
    joined_last: list[int] = []
    subset_floor: list[float] = []
    split_heterogeneity: list[float] = []
    for rep in range(args.repeats):
        if args.partition == "umap":
            owner = flaim_split(args.clients, args.split_cache)
        else:
            owner = feature_skew(records, sizes, args.clients, np.random.default_rng(rep))
        split_heterogeneity.append(heterogeneity(records, owner, sizes))
        vectors = ([client_vector(records[owner == k], layout) for k in range(args.clients)]
                   if args.oracle == "mpc" else [])
        bound = int(np.bincount(owner).max())  # any public per-client bound: width only

        def distaim_run(rate):
            if args.oracle == "plain":
                oracle = SubsetOracle(records, owner, sizes, rate, args.clients, schedule)
                run = aim(oracle, sizes, triples, rho, rounds=args.rounds,
                          max_rounds=args.rounds, rng=np.random.default_rng(rep))
                return run, oracle.joined_log, [], oracle._joined
            run, _, joined, selects, last = run_distaim(vectors, layout, sizes, triples, rho,
                                                        args.epsilon, rate, args.rounds, rep,
                                                        args.clients * bound, schedule)
            return run, joined, selects, last

        def record(method, run, started):
            for key, value in errors_of(records, run.synthesize(len(records)), sizes,
                                        triples).items():
                errors[method][key].append(value)
            seconds[method].append(time.time() - started)

        t = time.time()
        run, joined, selects, last = distaim_run(args.rate)
        record("distaim", run, t)
        joined_last.append(joined[-1])
        # no noise, no model: the exact marginals of the clients the last round read
        read = np.isin(owner, [int(c[1:]) for c in last])
        subset_floor.append(errors_of(records, records[read], sizes, triples)["flaim"])
        each = f"{np.mean([s['seconds'] for s in selects]):.1f}" if selects else "-"
        print(f"repeat {rep}: split heterogeneity {split_heterogeneity[-1]:.3f}; DistAIM "
              f"p={args.rate} {seconds['distaim'][-1]:.0f} s ({args.rounds} rounds, {each} s "
              f"a select), clients joined per round {joined}, noisy sizes "
              f"{[round(x) for x in run.notes['noisy_sizes']]}, subset floor "
              f"{subset_floor[-1]:.4f}", flush=True)
        if not args.skip_p1:
            t = time.time()
            run1, *_ = distaim_run(1)
            record("distaim_p1", run1, t)
        t = time.time()
        central = aim(PlainOracle(records, sizes), sizes, triples, rho, rounds=args.rounds,
                      max_rounds=args.rounds, rng=np.random.default_rng(rep))
        record("central_aim", central, t)
        # A trusted curator holding only the data DistAIM may read (the clients joined by
        # round T), same T and rho: what any protocol within FLAIM's availability model can
        # reach with AIM, against the union.
        t = time.time()
        subset = aim(PlainOracle(records[read], sizes), sizes, triples, rho, rounds=args.rounds,
                     max_rounds=args.rounds, rng=np.random.default_rng(rep))
        record("central_aim_subset", subset, t)
        print(f"  errors so far {({m: [round(x, 4) for x in v['flaim']] for m, v in errors.items()})}",
              flush=True)
    summary = {m: {k: mean_sd(v) for k, v in e.items()} for m, e in errors.items()}
    for key in ("flaim", "three_way"):
        c = summary["central_aim"][key][0]
        for name in methods:
            m, sd = summary[name][key]
            print(f"{key:9s} {name:11s} ({len(errors[name][key])} runs): {m:.4f} +- {sd:.4f}, "
                  f"ratio to central {m / c:.2f}, {np.mean(seconds[name]):.0f} s a run")
    print(f"subset floor (exact marginals of the clients the last round read): "
          f"{np.mean(subset_floor):.4f} +- {np.std(subset_floor, ddof=1) if len(subset_floor) > 1 else 0:.4f}")
    print(f"split heterogeneity (FLAIM Table 4: clustering 0.525, IID 0.241): "
          f"{np.mean(split_heterogeneity):.3f}")
    print("FLAIM (Table 1, Adult): DistAIM 0.42, central AIM 0.20, ratio 2.10")
    if args.json:
        flaim = {m: summary[m]["flaim"] for m in methods}
        out = {
            "setting": {"dataset": "adult (32,561 rows; FLAIM: 43,958)", "rows": len(records),
                        "attributes": names, "domain_sizes": list(sizes),
                        "clients": args.clients, "partition": args.partition,
                        "split_heterogeneity": split_heterogeneity,
                        "workload": f"{len(triples)} random 3-way marginals, seed "
                                    f"{args.workload_seed}", "triples": triples,
                        "participation": args.rate, "rounds": args.rounds,
                        "schedule": args.schedule,
                        "enrolment_one_ways": args.enrolment_one_ways,
                        "epsilon": args.epsilon, "delta": args.delta, "rho": str(rho)},
            "metric": ("FLAIM's l1_avg_err: mean L1 between normalised marginals of the union "
                       "and of the synthetic table (as many rows), over the workload's "
                       "downward closure; *_three_way: over the 64 triples alone"),
            "bins": bins,
            "oracle": args.oracle,
            "repeats": args.repeats,
            "distaim": flaim["distaim"][0], "distaim_sd": flaim["distaim"][1],
            "central_aim": flaim["central_aim"][0], "central_aim_sd": flaim["central_aim"][1],
            "ratio": flaim["distaim"][0] / flaim["central_aim"][0],
            "distaim_p1": flaim.get("distaim_p1", (None, None))[0],
            "distaim_p1_sd": flaim.get("distaim_p1", (None, None))[1],
            "central_aim_subset": flaim["central_aim_subset"][0],
            "central_aim_subset_sd": flaim["central_aim_subset"][1],
            "central_aim_subset_note": ("central AIM (same T, rho) on the clients the last "
                                        "round read only, scored against the union"),
            "distaim_three_way": summary["distaim"]["three_way"][0],
            "central_aim_three_way": summary["central_aim"]["three_way"][0],
            "runs": errors, "seconds": seconds, "clients_joined_by_last_round": joined_last,
            "subset_floor": subset_floor,
            "subset_floor_note": ("per repeat, the error of the exact marginals of the clients "
                                  "the last round read (no noise, no model): what the data "
                                  "DistAIM may read is from the union"),
            "upload_bytes_per_client": {"raw": raw, "http": http, "cells": layout.length},
            "flaim_table_1": FLAIM_TABLE_1 | {"ratio": 2.1},
            "command": " ".join(["python", "bench/distaim/bench_distaim_flaim.py", *sys.argv[1:]]),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
