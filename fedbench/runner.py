"""``feddpsyn bench utility``: every method on the same partitions and seeds, every metric.

Writes ``results.csv`` (one row per method x eps x clients x partition setting x repeat),
``summary.md`` (mean and standard deviation per cell) and PNG plots (error vs eps per
method; error vs number of clients and vs heterogeneity when those vary).
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import time
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from feddpsyn.fedbench import partitions
from feddpsyn.fedbench.methods import METHODS, MethodResult
from feddpsyn.fedbench.metrics import random_range_queries, range_query_error, wasserstein_one_way
from feddpsyn.fedbench.ml_efficacy import ml_efficacy
from feddpsyn.fedbench.wasserstein import wasserstein_two_way
from feddpsyn.params.schema import ContinuousColumn, Schema
from feddpsyn.params.table_codec import encode_csv
from feddpsyn.synthesis.evaluate import workload_error

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


@dataclass(frozen=True)
class Task:
    """One method at one budget on one partition of one repeat: one row of results.csv."""

    method: str
    eps: float
    setting: Setting
    repeat: int


# A method whose charges are irrational (a square root) rounds them down to rationals; what
# it may leave unspent that way is far below this relative slack.
BUDGET_TOLERANCE = Fraction(1, 10 ** 9)


def check_budget(method: str, result: MethodResult) -> None:
    """Never more than the budget; exactly the budget (equal as rationals, or within
    ``BUDGET_TOLERANCE`` relative) unless the method says why it spent less."""
    spent, budget = Fraction(result.rho_spent), Fraction(result.rho_budget)
    if spent > budget:
        raise RuntimeError(f"{method} overspent: rho {spent} > {budget}")
    if not result.unspent_reason and budget - spent > budget * BUDGET_TOLERANCE:
        raise RuntimeError(f"{method} claims to spend its budget but spent rho "
                           f"{float(spent)!r} of {float(budget)!r}")


def _evaluate(task: Task, train: np.ndarray, owner: np.ndarray, test: np.ndarray,
              schema: Schema, target: int, range_queries, delta: float, seed: int) -> dict:
    ordered = tuple(isinstance(c, ContinuousColumn) for c in schema.columns)
    started = time.perf_counter()
    result = METHODS[task.method](train, owner, schema, task.eps, delta,
                                  seed * 1000 + task.repeat)
    seconds = time.perf_counter() - started
    check_budget(task.method, result)
    synth = result.records
    errors = workload_error(train, synth, schema.domain_sizes)
    ml = ml_efficacy(synth, test, schema.domain_sizes, target)
    return {"method": task.method, "eps": task.eps, "clients": len(np.unique(owner)),
            "partition": task.setting.partition,
            "beta": "" if task.setting.beta is None else task.setting.beta,
            "repeat": task.repeat, **errors,
            "range_query": range_query_error(train, synth, range_queries),
            "wasserstein": wasserstein_one_way(train, synth, schema.domain_sizes, ordered),
            "wasserstein_two_way": wasserstein_two_way(train, synth, schema.domain_sizes,
                                                       ordered),
            "f1_gbt": ml["gbt"], "f1_linear": ml["linear"],
            "seconds": seconds, "bytes_per_client": result.bytes_per_client,
            "rho_spent": float(result.rho_spent), "rho_budget": float(result.rho_budget),
            # A method that is not DP as published says so in every row.
            "privacy": result.notes.get("dp", "DP"),
            "selected_pairs": len(result.notes.get("selected_pairs", []))}


def _single_threaded() -> None:
    """Worker start-up: one BLAS/torch thread per worker, so ``jobs`` workers use ``jobs``
    cores instead of each oversubscribing all of them."""
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # pragma: no cover - torch is a dependency, but the runner needs none
        pass


def run_utility(csv_path: Path, schema: Schema, target_name: str, methods: list[str],
                eps_list: list[float], settings: list[Setting], repeats: int, out: Path,
                delta: float = 1e-5, seed: int = 0, natural_column: str | None = None,
                queries: int = 200, say=print, jobs: int = 1,
                resume: Path | None = None) -> list[dict]:
    """Every (repeat, setting, eps, method) once; ``jobs`` > 1 runs them in that many worker
    processes. Rows come back in the same order either way, and every finished row is in
    ``results.partial.csv`` at once, so an interrupted run loses nothing it finished:
    ``resume`` (that file, or a ``results.csv``, of an earlier run of the same command) gives
    the rows of the tasks it holds, which are not run again. The splits and partitions come
    from (seed, repeat, clients) alone, so a resumed row is the task this run would make."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {sorted(METHODS)}")
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    if target_name not in schema.names:
        raise ValueError(f"target {target_name!r} is not a column of the schema "
                         f"(columns: {', '.join(schema.names)})")
    # Methods that train a classifier read the target from the schema (fedbench.methods.target).
    schema = dataclasses.replace(schema, target=target_name)
    records = encode_csv(csv_path, schema).records
    target = schema.names.index(target_name)
    natural_index = schema.names.index(natural_column) if natural_column else None
    ordered = tuple(isinstance(c, ContinuousColumn) for c in schema.columns)
    out.mkdir(parents=True, exist_ok=True)
    work = []  # (task, evaluate's arguments), in the order rows are reported
    for repeat in range(repeats):
        rng = np.random.default_rng([seed, repeat])
        test_mask = rng.random(len(records)) < 0.2
        train, test = records[~test_mask], records[test_mask]
        range_queries = random_range_queries(schema.domain_sizes, ordered, 2, queries, rng)
        for setting in settings:
            owner = partition_owner(setting, train, schema, target, natural_index,
                                    np.random.default_rng([seed, repeat, setting.clients]))
            for eps, method in itertools.product(eps_list, methods):
                work.append((Task(method, eps, setting, repeat),
                             (train, owner, test, schema, target, range_queries, delta, seed)))
    finished = _finished_rows(resume) if resume is not None else {}
    partial = out / "results.partial.csv"
    partial.unlink(missing_ok=True)
    rows: list[dict | None] = [None] * len(work)

    def done(index: int, row: dict) -> None:
        rows[index] = row
        _append_row(partial, row)
        beta = "" if row["beta"] == "" else f" beta={row['beta']}"
        say(f"[bench] {row['method']} eps={row['eps']} K={row['clients']} "
            f"{row['partition']}{beta} rep={row['repeat']}: 2-way {row['two_way']:.4f}, "
            f"F1 {row['f1_gbt']:.3f}, {row['seconds']:.1f} s "
            f"({sum(r is not None for r in rows)}/{len(rows)})")

    work_left = []
    for index, (task, arguments) in enumerate(work):
        earlier = finished.get(_task_key(task))
        if earlier is None:
            work_left.append((index, (task, arguments)))
        else:
            done(index, earlier)
    if len(work_left) < len(work):
        say(f"[bench] {len(work) - len(work_left)} of {len(work)} tasks taken from {resume}")
    if jobs == 1:
        for index, (task, arguments) in work_left:
            done(index, _evaluate(task, *arguments))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # spawn: the parent may hold threads (jax, torch) that fork would copy mid-state.
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_single_threaded) as pool:
            futures = {pool.submit(_evaluate, task, *arguments): index
                       for index, (task, arguments) in work_left}
            for future in as_completed(futures):
                done(futures[future], future.result())
    write_results(rows, out)
    partial.unlink(missing_ok=True)
    return rows


def _task_key(task: Task) -> tuple:
    beta = task.setting.beta
    return (task.method, float(task.eps), task.setting.clients, task.setting.partition,
            "" if beta is None else float(beta), task.repeat)


def _finished_rows(path: Path) -> dict[tuple, dict]:
    """An earlier run's rows by task (:func:`_task_key`); a file that is not one is refused."""
    if not path.is_file():
        raise ValueError(f"resume: no file {path}")
    with path.open(newline="") as fh:
        header = next(csv.reader(fh), [])
    needed = {"method", "eps", "clients", "partition", "beta", "repeat", "two_way"}
    if not needed <= set(header):
        raise ValueError(f"resume: {path} is not a benchmark's results file (it needs the "
                         f"columns {', '.join(sorted(needed))})")
    return {(row["method"], row["eps"], row["clients"], row["partition"], row["beta"],
             row["repeat"]): row for row in read_results(path)}


def _append_row(path: Path, row: dict) -> None:
    new = not path.exists()
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(row))
        if new:
            writer.writeheader()
        writer.writerow(row)
        fh.flush()


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
    for key in sorted(groups, key=_setting_order):
        cells = []
        for m in METRICS:
            values = np.array([g[m] for g in groups[key]], dtype=float)
            cells.append(f"{values.mean():.4g} ({values.std():.2g})")
        lines.append("| " + " | ".join(map(str, key)) + " | " + " | ".join(cells) + " |")
    lines += [""] + winners(rows)
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    plot(rows, out)


CENTRAL = ("central-privsyn", "central-privsyn-all", "central-aim", "central-mst")


def _setting_order(key: tuple) -> tuple:
    """(partition, beta, clients, eps, ...) in reading order: numbers as numbers."""
    return (key[0], str(key[1]), *key[2:])


def winners(rows: list[dict], metric: str = "two_way") -> list[str]:
    """Markdown: per setting, the DP method with the lowest mean ``metric``, overall and among
    federated methods (the central-* references excluded), with the runner-up's mean so a
    reader sees whether the win is within the spread over repeats."""
    cells = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["privacy"] == "DP":  # a method that is not DP cannot win
            cells[(r["partition"], r["beta"], r["clients"], r["eps"])][r["method"]].append(
                r[metric])
    lines = [f"## Lowest {metric.replace('_', '-')} error per setting (DP methods only)", "",
             "| partition | beta | clients | eps | best | best federated | runner-up federated |",
             "|---|---|---|---|---|---|---|"]

    def cell(name: str, values: list) -> str:
        spread = f" +- {np.std(values):.3f}" if len(values) > 1 else ""
        return f"{name} {np.mean(values):.3f}{spread}"

    for key in sorted(cells, key=_setting_order):
        ranked = sorted(cells[key].items(), key=lambda item: np.mean(item[1]))
        federated = [item for item in ranked if item[0] not in CENTRAL]
        runner_up = cell(*federated[1]) if len(federated) > 1 else "-"
        best_fed = cell(*federated[0]) if federated else "-"
        lines.append("| " + " | ".join(map(str, key)) + f" | {cell(*ranked[0])} | {best_fed} | "
                     f"{runner_up} |")
    return lines


def read_results(path: Path) -> list[dict]:
    """``results.csv`` back into rows with their types (to re-summarise or re-plot a run)."""
    integer = {"clients", "repeat", "selected_pairs"}
    text = {"method", "partition", "privacy"}
    rows = []
    with path.open(newline="") as fh:
        for raw in csv.DictReader(fh):
            row: dict = {}
            for key, value in raw.items():
                if key in text or (key == "beta" and value == ""):
                    row[key] = value
                elif key in integer:
                    row[key] = int(value)
                else:
                    row[key] = float(value)
            rows.append(row)
    if not rows:
        raise ValueError(f"{path} has no rows")
    return rows


def _heterogeneity(row: dict) -> str:
    """The partition as a heterogeneity level (uniform: none; Dirichlet: smaller beta, more)."""
    if row["partition"] == "dirichlet":
        return f"Dirichlet {row['beta']:g}"
    return row["partition"]


def _heterogeneity_order(level: str) -> tuple:
    if level.startswith("Dirichlet "):
        return (1, -float(level.split()[1]))
    return (0 if level == "uniform" else 2, level)


def plot(rows: list[dict], out: Path, metric: str = "two_way") -> None:
    """error_vs_eps, error_vs_clients and error_vs_heterogeneity (each when its variable
    takes at least two values), mean over everything else, log error axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [dict(r, heterogeneity=_heterogeneity(r)) for r in rows]
    for x_field, name in (("eps", "error_vs_eps"), ("clients", "error_vs_clients"),
                          ("heterogeneity", "error_vs_heterogeneity")):
        levels = sorted({r[x_field] for r in rows},
                        key=_heterogeneity_order if x_field == "heterogeneity" else None)
        if len(levels) < 2:
            continue
        series = defaultdict(lambda: defaultdict(list))
        for r in rows:
            series[r["method"]][r[x_field]].append(r[metric])
        fig, ax = plt.subplots(figsize=(8, 4.5))
        # Fifteen methods need more than the default ten colours: a 20-colour map plus
        # markers keeps every line distinguishable.
        colours = plt.cm.tab20(np.linspace(0, 1, 20))
        categorical = x_field == "heterogeneity"
        position = {level: (i if categorical else level) for i, level in enumerate(levels)}
        for i, (method, points) in enumerate(sorted(series.items())):
            xs = [x for x in levels if x in points]
            ax.plot([position[x] for x in xs], [np.mean(points[x]) for x in xs],
                    marker="osd^v<>P*X"[i % 10], color=colours[i % 20], label=method)
        ax.set_xlabel({"eps": "epsilon", "clients": "clients",
                       "heterogeneity": "partition (left to right: more label skew)"}[x_field])
        ax.set_ylabel(f"average L1 error, {metric.replace('_', '-')} marginals")
        if x_field == "eps":
            ax.set_xscale("log")
        ax.set_xticks([position[x] for x in levels])
        ax.set_xticklabels([x if categorical else f"{x:g}" for x in levels])
        ax.set_yscale("log")  # errors span two orders of magnitude across methods
        ax.minorticks_off()
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / f"{name}.png", dpi=120)
        plt.close(fig)
