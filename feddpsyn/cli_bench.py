"""``feddpsyn bench``: the utility benchmark and its summary, for researchers."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from feddpsyn.terminal import fail


def bench_utility(dataset: Optional[str] = typer.Option(
                      None, help="adult (default) | fed_heart_disease; or your own table with "
                                 "--csv, --schema and --target"),
                  csv_path: Optional[Path] = typer.Option(
                      None, "--csv", help="your own table (with --schema and --target)"),
                  schema: Optional[Path] = typer.Option(None, help="the schema of --csv"),
                  target: Optional[str] = typer.Option(
                      None, help="with --csv: the column the ML metrics predict (default: the "
                                 "schema's 'target', if it declares one)"),
                  owner_column: Optional[str] = typer.Option(
                      None, help="with --csv: a schema column naming each row's owner, for "
                                 "--partition natural"),
                  methods: str = typer.Option("central-privsyn-pgm,concat,feddpsyn-default",
                                              help="comma-separated, or 'all'"),
                  epsilon: str = typer.Option("0.5,1,2", help="the budgets eps to compare "
                                                              "at, comma-separated"),
                  clients: str = typer.Option("4", help="comma-separated client counts"),
                  partition: str = typer.Option(
                      "uniform", help="comma-separated: uniform | dirichlet | feature | "
                                      "natural"),
                  beta: str = typer.Option("0.1", help="Dirichlet beta(s), for dirichlet"),
                  repeats: int = 3, out: Path = typer.Option(...), delta: float = 1e-5,
                  seed: int = 0,
                  jobs: int = typer.Option(1, help="worker processes (one core each)"),
                  resume: Optional[Path] = typer.Option(
                      None, help="an earlier run's results.partial.csv (or results.csv) of "
                                 "the same command: its tasks are not run again")) -> None:
    """Utility of every method against the real union, on the same partitions and seeds, on
    a bundled data set or your own table."""
    from feddpsyn.demo import dataset as bundled
    from feddpsyn.fedbench.methods import METHODS
    from feddpsyn.fedbench.runner import TARGETS, Setting, run_utility
    from feddpsyn.params.schema import Schema

    if (csv_path is None) != (schema is None):
        fail("--csv and --schema go together")
    if csv_path is not None and dataset is not None:
        fail("give either --dataset or --csv/--schema, not both")
    if csv_path is None and (target is not None or owner_column is not None):
        fail("--target and --owner-column go with your own table (--csv, --schema)")
    try:
        if csv_path is None:
            ds = bundled(dataset or "adult")
            table, natural = ds.csv, ds.natural_column
            s = Schema.load(ds.schema)
            target = TARGETS[ds.name]
        else:
            table, natural = csv_path, owner_column
            s = Schema.load(schema)
            target = target or s.target
            if target is None:
                fail("give --target (the column the ML metrics predict), or declare "
                      "\"target\" in the schema")
            if target not in s.names:
                fail(f"--target {target!r} is not a column of {schema} "
                      f"(columns: {', '.join(s.names)})")
            if natural is not None and natural not in s.names:
                fail(f"--owner-column {natural!r} is not a column of {schema}")
        settings = []
        for name in partition.split(","):
            betas = [float(b) for b in beta.split(",")] if name == "dirichlet" else [None]
            settings += [Setting(int(k), name, b) for k in clients.split(",") for b in betas]
        chosen = sorted(METHODS) if methods == "all" else methods.split(",")
        run_utility(table, s, target, chosen, [float(e) for e in epsilon.split(",")], settings,
                    repeats, out, delta, seed, natural_column=natural, jobs=jobs,
                    resume=resume)
    except (ValueError, KeyError) as exc:  # SchemaError, InvalidValueError name the place
        fail(str(exc))
    typer.echo(f"wrote {out / 'results.csv'}, {out / 'summary.md'} and plots")


def bench_summary(results: Path = typer.Option(..., help="a run's results.csv"),
                  out: Optional[Path] = typer.Option(
                      None, help="where summary.md and the plots go (default: beside it)")) -> None:
    """Re-write summary.md (means, spreads, the winners per setting) and the plots from a
    run's results.csv, e.g. after merging runs or for a run made by an older version."""
    from feddpsyn.fedbench.runner import read_results, write_results

    if not results.is_file():
        fail(f"{results} is not a file")
    try:
        rows = read_results(results)
    except (ValueError, KeyError) as exc:
        fail(f"{results}: {exc}")
    target = out or results.parent
    target.mkdir(parents=True, exist_ok=True)
    write_results(rows, target)
    typer.echo(f"wrote {target / 'summary.md'} and plots from {len(rows)} rows")
