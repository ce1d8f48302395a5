"""Estimators compared on the same release: the served default's noisy marginals, synthesized
by each estimator in turn.

A comparison of two synthesis methods across separate sessions mixes their difference with
the release noise (two runs of 5 repeats differ by 2-3%). Here each repeat draws one release
exactly as ``feddpsyn-default`` does (``fedbench.methods.feddpsyn_served.default_release``: the
servers' plan, noises and selection, on ``fedbench.runner``'s split and owners for that
repeat), then hands the same marginals to every estimator with the same sampling seed, so the
paired differences carry only the estimators' own variation. Estimators:

* ``auto``: what ``feddpsyn synthesize`` does by default (``synthesis.synthesize``);
* ``pgm``, ``pgm@<MB>``: Private-PGM on a junction tree of at most that many MB
  (``synthesis.pgm``; default ``DEFAULT_MAX_MODEL_MB``); each row also records the 2-way
  L1 of the fitted model's own pair marginals before sampling (``<name> model``), so the
  sampler's share of the error is the difference;
* ``pgm-draw``, ``pgm-draw@<MB>``: ``pgm``'s records as its sampler draws them, without
  the local search toward the model's pair marginals (``synthesis.polish``), for the search's
  share of the error;
* ``pgm-model``, ``pgm-model@<MB>``: ``pgm`` with the search aimed at the model's answer on
  every pair, the released pairs the tree left out included (``synthesis.pgm``'s step 4
  off), for that step's share; ``pgm`` rows record how many pairs it aimed at their
  released values (``pgm held-out targets``);
* ``gum``: PrivSyn's GUM from independent 1-way draws (``synthesis.gum``);
* ``pgm+gum``, ``pgm+gum@<alpha0>``: GUM started from Private-PGM's sample instead of
  independent draws (its first step size ``alpha0``, default 1), which keeps PGM's
  completion of the pairs not released and fits every released pair;
* ``pgm+gum?``, ``pgm+gum?@<ratio>``: ``pgm+gum`` only where Private-PGM's sample misses
  the released pairs its junction tree left out by more than their noise explains: the
  mean L1 of its marginals from those pairs' released (consistent) values over the mean L1
  their noise alone would give (sd x sqrt(2/pi) a cell) above ``ratio`` (default 1.5), else
  ``pgm``. The ratio of each release is recorded (``<name> held-out ratio``); a release
  whose tree holds every released pair has none and stays ``pgm``.

Synthesis is post-processing: nothing here spends budget beyond the release's.

    .venv/bin/python experiments/synthesis_estimators/bench_synthesis_paired.py \\
        --tables wages,adult --eps 1,4 --repeats 3 --estimators pgm,gum,pgm+gum --json FILE
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.accuracy.bench_served_vs_central import TABLES, _table  # noqa: E402
from feddpsyn.fedbench.methods.feddpsyn_served import default_release  # noqa: E402
from feddpsyn.fedbench.provenance import commit  # noqa: E402
from feddpsyn.fedbench.runner import Setting, partition_owner  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402
from feddpsyn.params.table_codec import encode_csv  # noqa: E402
from feddpsyn.synthesis.consistency import make_consistent  # noqa: E402
from feddpsyn.synthesis.evaluate import marginal, workload_error  # noqa: E402
from feddpsyn.synthesis.gum import fit_gum  # noqa: E402
from feddpsyn.synthesis.marginals import NoisyMarginal  # noqa: E402
from feddpsyn.synthesis.pgm import (  # noqa: E402
    DEFAULT_MAX_MODEL_MB,
    fit_model,
    fit_pgm,
    held_out_targets,
    kept_pairs,
)
from feddpsyn.synthesis.synthesize import synthesize_records  # noqa: E402


def _parameter(name: str, default: float) -> float:
    return float(name.split("@", 1)[1]) if "@" in name else default


def check_estimator(name: str) -> None:
    """Refuse an estimator name this bench does not know, before any release is drawn."""
    base = name.split("@", 1)[0]
    if base not in ("auto", "pgm", "pgm-draw", "pgm-model", "gum", "pgm+gum", "pgm+gum?") or (
            base in ("auto", "gum") and "@" in name):
        raise ValueError(f"unknown estimator {name!r} "
                         "(auto, pgm[@MB], pgm-draw[@MB], pgm-model[@MB], gum, pgm+gum[@alpha0], "
                         "pgm+gum?[@ratio])")
    if "@" in name and not _parameter(name, 1.0) > 0:
        raise ValueError(f"{name!r}: the parameter after @ must be positive")


def held_out_ratio(sample: np.ndarray, consistent: list[NoisyMarginal],
                   sizes: tuple[int, ...], total: float) -> float | None:
    """How far a Private-PGM sample's marginals are from the released pairs its junction tree
    left out, over what their noise alone gives (module docstring); None when it kept all."""
    kept = set(kept_pairs(consistent, sizes, DEFAULT_MAX_MODEL_MB))
    left = [m for m in consistent if len(m.attrs) == 2 and tuple(m.attrs) not in kept]
    if not left:
        return None
    seen = [float(np.abs(marginal(sample, tuple(m.attrs), sizes)
                         - np.maximum(m.counts.ravel(), 0) / max(total, 1.0)).sum())
            for m in left]
    noise = [m.counts.size * math.sqrt(m.variance) * math.sqrt(2 / math.pi) / max(total, 1.0)
             for m in left]
    return statistics.fmean(seen) / statistics.fmean(noise)


def model_error(model, truth: np.ndarray, sizes: tuple[int, ...]) -> float:
    """The 2-way L1 of the model's own pair marginals (exact, before sampling) against
    ``truth``'s, averaged over every pair as ``workload_error``'s 2-way is."""
    errors = []
    for pair in itertools.combinations(range(len(sizes)), 2):
        answer = model.answer(pair)
        errors.append(float(np.abs(answer / max(answer.sum(), 1e-300)
                                   - marginal(truth, pair, sizes)).sum()))
    return statistics.fmean(errors)


def estimate(name: str, schema: Schema, marginals: list[NoisyMarginal], seed: int,
             notes: dict | None = None, truth: np.ndarray | None = None) -> np.ndarray:
    """The synthetic records ``name`` (module docstring) makes from ``marginals``; ``notes``
    receives the held-out ratio of ``pgm+gum?`` and, given the ``truth`` records, the 2-way
    L1 of ``pgm``'s model before sampling (``model``)."""
    sizes = tuple(schema.domain_sizes)
    rng = np.random.default_rng(seed)
    if name == "auto":
        return synthesize_records(schema, marginals, "auto", None, rng)
    consistent, total = make_consistent(marginals, sizes)
    rows = max(1, int(round(total)))
    base = name.split("@", 1)[0]
    if base in ("pgm", "pgm-draw", "pgm-model"):
        mb = _parameter(name, DEFAULT_MAX_MODEL_MB)
        model = fit_model(marginals, consistent, total, sizes, max_model_mb=mb)
        if notes is not None and truth is not None:
            notes["model"] = model_error(model, truth, sizes)
        targets = held_out_targets(model, consistent, sizes) if base == "pgm" else None
        if notes is not None and targets is not None:
            notes["held-out targets"] = len(targets)
        return model.sample(rows, rng, polish=base != "pgm-draw", targets=targets)
    if base == "gum":
        return fit_gum(consistent, sizes, rows, rng)
    start = fit_pgm(marginals, consistent, total, sizes, rows, rng)
    if base == "pgm+gum?":
        ratio = held_out_ratio(start, consistent, sizes, total)
        if notes is not None:
            notes["held-out ratio"] = ratio
        if ratio is None or ratio <= _parameter(name, 1.5):
            return start
        return fit_gum(consistent, sizes, rows, rng, start=start)
    return fit_gum(consistent, sizes, rows, rng, alpha0=_parameter(name, 1.0), start=start)


def run_table(table: str, eps_list: list[float], repeats: int, estimators: list[str],
              delta: float, say=print) -> list[dict]:
    """One row per (repeat, eps): each estimator's 2-way L1 and seconds on one release."""
    path, schema, target = _table(table)
    schema = dataclasses.replace(schema, target=target)
    records = encode_csv(path, schema).records
    target_index = schema.names.index(target)
    rows = []
    for repeat in range(repeats):
        # fedbench.runner's split and owners for this repeat (seed 0, 4 uniform owners).
        test = np.random.default_rng([0, repeat]).random(len(records)) < 0.2
        train = records[~test]
        setting = Setting(4, "uniform", None)
        owner = partition_owner(setting, train, schema, target_index, None,
                                np.random.default_rng([0, repeat, setting.clients]))
        for eps in eps_list:
            release = default_release(train, owner, schema, eps, delta)
            row: dict = {"table": table, "eps": eps, "repeat": repeat,
                         "pairs": len(release.notes["selected_pairs"])}
            for name in estimators:
                started = time.perf_counter()
                notes: dict = {}
                synth = estimate(name, schema, release.marginals, 1000 + repeat, notes, train)
                row[name] = workload_error(train, synth, schema.domain_sizes)["two_way"]
                row[f"{name} seconds"] = time.perf_counter() - started
                for key, value in notes.items():
                    row[f"{name} {key}"] = value
            say(f"{table} eps {eps:g} repeat {repeat} ({row['pairs']} pairs): " + ", ".join(
                f"{n} {row[n]:.4f}" for n in estimators))
            rows.append(row)
    return rows


def summarise(rows: list[dict], estimators: list[str]) -> list[dict]:
    """Per (table, eps, estimator): mean and sd of the 2-way L1 over repeats, the mean
    paired difference from the first estimator, relative to its mean, with its standard
    error, and for ``pgm`` the mean 2-way L1 of its model before sampling."""
    out = []
    for table, eps in sorted({(r["table"], r["eps"]) for r in rows}):
        cell = [r for r in rows if r["table"] == table and r["eps"] == eps]
        ref = statistics.fmean(r[estimators[0]] for r in cell)
        for name in estimators:
            values = [r[name] for r in cell]
            diffs = [(r[name] - r[estimators[0]]) / ref for r in cell]
            out.append({"table": table, "eps": eps, "method": name,
                        "mean": statistics.fmean(values),
                        "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
                        "repeats": len(values),
                        "paired_vs_first": statistics.fmean(diffs),
                        "paired_se": (statistics.stdev(diffs) / math.sqrt(len(diffs))
                                      if len(diffs) > 1 else 0.0),
                        "seconds_mean": statistics.fmean(r[f"{name} seconds"] for r in cell)})
            if all(f"{name} model" in r for r in cell):
                out[-1]["model_mean"] = statistics.fmean(r[f"{name} model"] for r in cell)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--eps", default="0.3,1,4")
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--estimators", default="pgm,gum,pgm+gum",
                        help="comma-separated; the first is the paired reference")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    tables = [t for t in args.tables.split(",") if t]
    unknown = [t for t in tables if t not in TABLES]
    if unknown:
        parser.error(f"unknown tables {unknown}; known: {', '.join(TABLES)}")
    estimators = [e for e in args.estimators.split(",") if e]
    try:
        for name in estimators:
            check_estimator(name)
    except ValueError as exc:
        parser.error(str(exc))
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    eps_list = [float(e) for e in args.eps.split(",") if e]
    started = datetime.datetime.now(datetime.UTC)
    rows = []
    for table in tables:
        rows += run_table(table, eps_list, args.repeats, estimators, args.delta)
        # Written after every table, so a stopped run keeps what it finished.
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "what": ("2-way L1 of estimators on the same served default release per repeat "
                     "(4 uniform owners); paired_vs_first: mean relative difference from "
                     f"{estimators[0]} on the same releases"),
            "command": "python " + " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:]),
            "commit": commit(), "machine": platform.node(), "delta": args.delta,
            "date": started.date().isoformat(), "tables_done": sorted({r["table"] for r in rows}),
            "results": summarise(rows, estimators), "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
