"""``feddpsyn schema``: draft a table's schema from a CSV and check schemas and tables
against it."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from feddpsyn.terminal import fail


def schema_draft(csv_path: Path = typer.Option(..., "--csv", help="the table to draft from"),
                 out: Path = typer.Option(..., help="where the draft schema goes"),
                 bounds: list[str] = typer.Option(
                     [], "--bounds", help="COL=MIN:MAX, public bounds of a continuous column "
                                          "(repeat the option for each)"),
                 categorical: str = typer.Option("", help="comma-separated columns to treat "
                                                          "as categorical"),
                 continuous: str = typer.Option("", help="comma-separated columns to treat as "
                                                         "continuous"),
                 max_categories: int = typer.Option(
                     20, help="a numeric column with more distinct values is guessed "
                              "continuous"),
                 bins: int = typer.Option(10, help="bins of each continuous column"),
                 force: bool = typer.Option(False, help="overwrite --out")) -> None:
    """Draft a schema from a CSV: column names, a type guess, category lists; continuous
    bounds are left for you to declare (or given with --bounds). Read the note it prints."""
    from feddpsyn.clients.schema_draft import PRIVACY_NOTE, draft_schema, parse_bounds
    from feddpsyn.params.schema import SchemaError
    from feddpsyn.params.table_codec import InvalidValueError

    if out.exists() and not force:
        fail(f"{out} exists; choose another --out or add --force")
    split = lambda text: {c.strip() for c in text.split(",") if c.strip()}  # noqa: E731
    try:
        draft, columns = draft_schema(csv_path, parse_bounds(bounds),
                                      categorical=split(categorical),
                                      continuous=split(continuous),
                                      max_categories=max_categories, bins=bins)
    except (SchemaError, InvalidValueError) as exc:
        fail(str(exc))
    out.write_text(json.dumps(draft, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for column in columns:
        entry = column.entry
        if entry["type"] == "continuous":
            kind = "continuous" + (", integer" if entry["integer"] else "")
            kind += (f", bounds [{entry['min']}, {entry['max']}] from --bounds"
                     if entry["min"] is not None else ", bounds NOT SET")
        else:
            kind = f"categorical, {len(entry['i2s'])} categories"
        typer.echo(f"{column.name}: {kind}")
        for note in column.notes:
            typer.echo(f"  - {note}")
    typer.echo(f"wrote {out}")
    typer.secho(f"\nNOTE: {PRIVACY_NOTE}", fg="yellow", bold=True)
    typer.echo(f"Then run: feddpsyn schema check --schema {out} --csv {csv_path}")


def schema_check(schema: Path = typer.Option(...),
                 csv_paths: list[Path] = typer.Option(
                     [], "--csv", help="also check these tables against it (repeatable)"),
                 limit: int = typer.Option(20, help="problems shown per table")) -> None:
    """Check a schema (and tables against it): each problem on one line; exit 1 if any."""
    from feddpsyn.clients.schema_draft import draft_warnings
    from feddpsyn.params.schema import Schema, SchemaError, schema_warnings
    from feddpsyn.params.table_codec import InvalidValueError, find_problems

    try:
        s = Schema.load(schema)
    except SchemaError as exc:
        for problem in exc.problems:
            typer.echo(f"problem: {problem}")
        raise typer.Exit(1) from None
    typer.echo(f"ok: {schema}: {len(s.columns)} columns, domain sizes "
               f"{', '.join(f'{n}={k}' for n, k in zip(s.names, s.domain_sizes))}")
    for warning in schema_warnings(s) + draft_warnings(json.loads(schema.read_text())):
        typer.echo(f"warning: {warning}")
    failed = False
    for path in csv_paths:
        try:
            problems, total = find_problems(path, s, limit)
        except InvalidValueError as exc:
            problems, total = [str(exc)], 1
        for problem in problems:
            typer.echo(f"problem: {problem}")
        if total > len(problems):
            typer.echo(f"problem: {path}: ... and {total - len(problems)} more")
        if total == 0:
            typer.echo(f"ok: {path} fits the schema")
        failed = failed or total > 0
    if failed:
        raise typer.Exit(1)
