"""``feddpsyn synthesize``: whoever holds a release turns its noisy marginals into a
synthetic CSV."""

from __future__ import annotations

import csv
from pathlib import Path

import typer

from feddpsyn.terminal import fail


def synthesize(release: Path = typer.Option(...),
               schema: Path | None = typer.Option(
                   None, help="must match the release's schema (checked)"),
               method: str = typer.Option("auto", help="auto (gum when every pair is "
                                          "released, else pgm) | gum | pgm"),
               rows: int | None = typer.Option(None, help="default: estimated union size"),
               out: Path = typer.Option(...), seed: int | None = None) -> None:
    """Turn released noisy marginals into a synthetic CSV in the original values."""
    from pydantic import ValidationError

    from feddpsyn.common import wire
    from feddpsyn.params.schema import Schema, SchemaError
    from feddpsyn.synthesis import marginals_from_release
    from feddpsyn.synthesis import synthesize as run
    from feddpsyn.synthesis.synthesize import METHODS, resolve_method

    if method not in METHODS:
        fail(f"unknown method {method!r}: {', '.join(METHODS)}")
    try:
        document = wire.ReleaseDocument.model_validate_json(release.read_bytes())
    except OSError as exc:
        fail(f"cannot read {release}: {exc.strerror}")
    except ValidationError as exc:
        fail(f"{release} is not a release document: {exc.errors()[0]['msg']}")
    release_schema, noisy = marginals_from_release(document)
    if schema is not None:
        try:
            given = Schema.load(schema)
        except SchemaError as exc:
            fail(str(exc))
        if given.fingerprint() != release_schema.fingerprint():
            fail(f"{schema} differs from the schema the release was made with")
    used = resolve_method(method, noisy, release_schema.domain_sizes)
    _, rows_out = run(release_schema, noisy, used, rows, seed)  # type: ignore[arg-type]
    with out.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(release_schema.names)
        writer.writerows(rows_out)
    typer.echo(f"wrote {len(rows_out)} synthetic rows to {out} ({used})")
