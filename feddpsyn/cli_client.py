"""``feddpsyn client``: the data owner checks a table, inspects its counts, uploads them
masked and downloads the release."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from feddpsyn.terminal import check_id, check_url, fail, read_token


def _count_local(csv_path: Path, schema: Path, on_invalid: str):
    """(schema, all-pairs layout, counts, what the encoding did) of a local CSV, read in
    bounded memory (``clients.counting``), or a clear error and exit 2."""
    from feddpsyn.clients.counting import count_csv
    from feddpsyn.params.layout import MarginalLayout
    from feddpsyn.params.schema import Schema, SchemaError
    from feddpsyn.params.table_codec import InvalidValueError

    try:
        s = Schema.load(schema)
        layout = MarginalLayout.build(s.domain_sizes)
        counts, tally = count_csv(csv_path, s, layout,
                                  on_invalid=on_invalid)  # type: ignore[arg-type]
    except (SchemaError, InvalidValueError, ValueError) as exc:
        fail(str(exc))
    return s, layout, counts, tally


def client_check(csv_path: Path = typer.Option(..., "--csv"), schema: Path = typer.Option(...),
                 on_invalid: str = typer.Option("error", help="error | clamp | drop")) -> None:
    """Check a CSV against a schema and print what would be uploaded, one fact a line."""
    _, layout, _, tally = _count_local(csv_path, schema, on_invalid)
    typer.echo(f"ok: {csv_path}")
    for part in tally.summary().split("; "):
        typer.echo(f"  {part}")
    typer.echo(f"  upload: {len(layout.marginals)} marginals, {layout.total_cells} cells")
    if tally.rows_read == 0:
        # On stdout with the rest: one stream keeps the lines in order when both are captured.
        typer.echo("  warning: a header and no data rows: every count is zero; "
                   "client upload refuses it unless --allow-empty")
    elif tally.rows_kept == 0:
        typer.echo("  warning: no row left to count: every count is zero; "
                   "client upload refuses it unless --allow-empty")


def client_counts(csv_path: Path = typer.Option(..., "--csv"), schema: Path = typer.Option(...),
                  out: Path = typer.Option(...), on_invalid: str = "error") -> None:
    """Compute all 1-way and 2-way counts of a CSV (kept local; for inspection)."""
    s, layout, counts, _ = _count_local(csv_path, schema, on_invalid)
    doc = {m.key: {"attrs": [s.names[a] for a in m.attrs], "shape": list(m.shape),
                   "counts": counts[m.offset:m.offset + m.size].tolist()}
           for m in layout.marginals}
    out.write_text(json.dumps(doc))
    typer.echo(f"wrote {len(doc)} marginals to {out}")


def client_upload(keyserver: str = typer.Option(..., callback=check_url,
                                                help="the key server's base URL"),
                  computeserver: str = typer.Option(..., callback=check_url,
                                                    help="the compute server's base URL"),
                  session: str = typer.Option(..., callback=check_id, help="the session id"),
                  client_id: str = typer.Option(..., callback=check_id,
                                                help="this owner's id in the session"),
                  token_file: Path = typer.Option(...), csv_path: Path = typer.Option(..., "--csv"),
                  on_invalid: str = "error",
                  state_dir: Path = typer.Option(Path(".feddpsyn-client")),
                  ca_file: Path | None = typer.Option(
                      None, help="CA certificate to verify HTTPS servers"),
                  replace: bool = typer.Option(
                      False, "--replace",
                      help="replace this owner's upload already stored in the session (a "
                           "mistaken table), with a fresh seed; refused once the compute "
                           "server has started on the uploads"),
                  allow_empty: bool = typer.Option(
                      False, "--allow-empty",
                      help="upload a table with no rows (all counts zero) on purpose: for an "
                           "owner who truly holds no records for this session")) -> None:
    """Mask and upload this owner's counts (idempotent: safe to re-run)."""
    from feddpsyn.clients.agent import AgentError, ClientAgent
    from feddpsyn.params.table_codec import InvalidValueError

    token = read_token(token_file)
    try:
        with ClientAgent(keyserver, computeserver, session, client_id, token, state_dir,
                         verify=str(ca_file) if ca_file else True) as agent:
            result = agent.upload(csv_path, on_invalid,  # type: ignore[arg-type]
                                  progress=lambda m: typer.echo(f"... {m}"),
                                  allow_empty=allow_empty, replace=replace)
    except (AgentError, InvalidValueError) as exc:
        fail(str(exc))
    fresh = result.seed_receipt.stored or result.masked_receipt.stored
    verb = ("replaced" if result.replaced else "uploaded") if fresh else "already uploaded"
    typer.echo(f"{verb}: {result.rows} rows, {result.cells} masked counts, "
               f"{result.bytes_sent} bytes, {result.seconds:.2f} s")


def client_release(keyserver: str = typer.Option(..., callback=check_url,
                                                 help="the key server's base URL"),
                   session: str = typer.Option(..., callback=check_id, help="the session id"),
                   client_id: str = typer.Option(..., callback=check_id,
                                                 help="this owner's id in the session"),
                   token_file: Path = typer.Option(...),
                   out: Path = typer.Option(...),
                   ca_file: Path | None = typer.Option(
                       None, help="CA certificate to verify an HTTPS key server")) -> None:
    """Download the session's released noisy marginals (with their accounting)."""
    from feddpsyn.clients.agent import AgentError, ClientAgent

    try:
        with ClientAgent(keyserver, keyserver, session, client_id, read_token(token_file),
                         Path(".feddpsyn-client"),
                         verify=str(ca_file) if ca_file else True) as agent:
            document = agent.release()
    except AgentError as exc:
        fail(str(exc))
    out.write_text(document.model_dump_json(by_alias=True, indent=1))
    typer.echo(f"wrote {out}")
