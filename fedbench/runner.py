"""``feddpsyn bench utility``: every method on the same partitions and seeds, every metric.

Writes ``results.csv`` (one row per method x eps x clients x partition setting x repeat),
``summary.md`` (mean and standard deviation per cell) and PNG plots (error vs eps per
method; error vs number of clients and vs heterogeneity when those vary).
"""

from __future__ import annotations

import csv
import itertools
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clients.preprocess import encode_csv
from fedbench import partitions
from fedbench.methods import METHODS
from fedbench.metrics import random_range_queries, range_query_error, wasserstein_one_way
from fedbench.ml_efficacy import ml_efficacy
from fedbench.wasserstein import wasserstein_two_way
from params.schema import ContinuousColumn, Schema
from synthesis.evaluate import workload_error

TARGETS = {"adult": "label", "fed_heart_disease": "target"}
METRICS = ["one_way", "two_way", "three_way", "range_query", "wasserstein",
           "wasserstein_two_way", "f1_gbt", "f1_linear", "seconds", "bytes_per_client"]


@dataclass(frozen=True)
class Setting:
    clients: int
    partition: str
    beta: float | None


def partition_owner(setting: Setting, records: np.ndarray, schema: Schema, target: int,
                    natural_column: int | None, rng: np.random.Generator) -> np.ndarray:
    if setting.partition == "uniform":
        return partitions.uniform(len(records), setting.clients, rng)
    if setting.partition == "dirichlet":
        return partitions.dirichlet_label(records[:, target], setting.clients, setting.beta,
                                          rng)
    if setting.partition == "feature":
        return partitions.feature_skew(records, schema.domain_sizes, setting.clients, rng)
    if setting.partition == "natural":
        if natural_column is None:
            raise ValueError("this data set has no owner column for a natural split")
        return partitions.natural(records[:, natural_column])
    raise ValueError(f"unknown partition {setting.partition!r}")


def run_utility(csv_path: Path, schema: Schema, target_name: str, methods: list[str],
                eps_list: list[float], settings: list[Setting], repeats: int, out: Path,
                delta: float = 1e-5, seed: int = 0, natural_column: str | None = None,
                queries: int = 200, say=print) -> list[dict]:
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {sorted(METHODS)}")
    records = encode_csv(csv_path, schema).records
    target = schema.names.index(target_name)
    natural_index = schema.names.index(natural_column) if natural_column else None
    ordered = tuple(isinstance(c, ContinuousColumn) for c in schema.columns)
    rows = []
    out.mkdir(parents=True, exist_ok=True)
    for repeat in range(repeats):
        rng = np.random.default_rng([seed, repeat])
        test_mask = rng.random(len(records)) < 0.2
        train, test = records[~test_mask], records[test_mask]
        range_queries = random_range_queries(schema.domain_sizes, ordered, 2, queries, rng)
        for setting in settings:
            owner = partition_owner(setting, train, schema, target, natural_index,
                                    np.random.default_rng([seed, repeat, setting.clients]))
            for eps, method in itertools.product(eps_list, methods):
                started = time.perf_counter()
                result = METHODS[method](train, owner, schema, eps, delta,
                                         seed * 1000 + repeat)
                seconds = time.perf_counter() - started
                assert result.rho_spent <= result.rho_budget, f"{method} overspent"
                synth = result.records
                errors = workload_error(train, synth, schema.domain_sizes)
                ml = ml_efficacy(synth, test, schema.domain_sizes, target)
                row = {"method": method, "eps": eps, "clients": len(np.unique(owner)),
                       "partition": setting.partition,
                       "beta": "" if setting.beta is None else setting.beta,
                       "repeat": repeat, **errors,
                       "range_query": range_query_error(train, synth, range_queries),
                       "wasserstein": wasserstein_one_way(train, synth, schema.domain_sizes,
                                                          ordered),
                       "wasserstein_two_way": wasserstein_two_way(train, synth,
                                                                  schema.domain_sizes, ordered),
                       "f1_gbt": ml["gbt"], "f1_linear": ml["linear"],
                       "seconds": seconds, "bytes_per_client": result.bytes_per_client,
                       "rho_spent": float(result.rho_spent),
                       "rho_budget": float(result.rho_budget),
                       # A method that is not DP as published says so in every row.
                       "privacy": result.notes.get("dp", "DP"),
                       "selected_pairs": len(result.notes.get("selected_pairs", []))}
                rows.append(row)
                say(f"[bench] {method} eps={eps} K={row['clients']} {setting.partition}"
                    f"{'' if setting.beta is None else f' beta={setting.beta}'} rep={repeat}: "
                    f"2-way {errors['two_way']:.4f}, F1 {ml['gbt']:.3f}, {seconds:.1f} s")
    write_results(rows, out)
    return rows


def write_results(rows: list[dict], out: Path) -> None:
    with (out / "results.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    groups = defaultdict(list)
    for r in rows:
        method = r["method"] + ("" if r["privacy"] == "DP" else f" ({r['privacy']})")
        groups[(r["partition"], r["beta"], r["clients"], r["eps"], method)].append(r)
    lines = ["# Utility benchmark", "",
             "Mean (standard deviation) over repeats. Errors: lower is better; F1: higher.", "",
             "| partition | beta | clients | eps | method | " + " | ".join(METRICS) + " |",
             "|" + "---|" * (5 + len(METRICS))]
    for key in sorted(groups, key=str):
        cells = []
        for m in METRICS:
            values = np.array([g[m] for g in groups[key]], dtype=float)
            cells.append(f"{values.mean():.4g} ({values.std():.2g})")
        lines.append("| " + " | ".join(map(str, key)) + " | " + " | ".join(cells) + " |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    plot(rows, out)


def plot(rows: list[dict], out: Path, metric: str = "two_way") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def mean_by(key_fields, x_field):
        series = defaultdict(lambda: defaultdict(list))
        for r in rows:
            series[tuple(r[f] for f in key_fields)][r[x_field]].append(r[metric])
        return series

    for x_field, name in (("eps", "error_vs_eps"), ("clients", "error_vs_clients"),
                          ("beta", "error_vs_heterogeneity")):
        if len({r[x_field] for r in rows}) < 2 or (x_field == "beta"
                                                   and "" in {r["beta"] for r in rows}):
            continue
        fig, ax = plt.subplots(figsize=(8, 4.5))
        series = sorted(mean_by(["method"], x_field).items())
        # Fifteen methods need more than the default ten colours: a 20-colour map plus
        # markers keeps every line distinguishable.
        colours = plt.cm.tab20(np.linspace(0, 1, 20))
        for i, ((method,), points) in enumerate(series):
            xs = sorted(points)
            ax.plot(xs, [np.mean(points[x]) for x in xs], marker="osd^v<>P*X"[i % 10],
                    color=colours[i % 20], label=method)
        ax.set_xlabel({"eps": "epsilon", "clients": "clients",
                       "beta": "Dirichlet beta (smaller: more skew)"}[x_field])
        ax.set_ylabel(f"average L1 error, {metric.replace('_', '-')} marginals")
        if x_field in ("eps", "beta"):
            ax.set_xscale("log")
        ticks = sorted({r[x_field] for r in rows})
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{t:g}" for t in ticks])
        ax.set_yscale("log")  # errors span two orders of magnitude across methods
        ax.minorticks_off()
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / f"{name}.png", dpi=120)
        plt.close(fig)
