"""``feddpsyn client``: the data owner checks a table, inspects its counts, uploads them
masked and downloads the release."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from feddpsyn.terminal import CA_HELP, check_id, check_url, fail, read_token


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
                      None, help=CA_HELP),
                  replace: bool = typer.Option(
                      False, "--replace",
                      help="replace this owner's upload already stored in the session (a "
                           "mistaken table), with a fresh seed; refused once the compute "
                           "server has started on the uploads"),
                  allow_empty: bool = typer.Option(
                      False, "--allow-empty",
                      help="upload a table with no rows (all counts zero) on purpose: for an "
                           "owner who truly holds no records for this session"),
                  table: str | None = typer.Option(
                      None, help="the table's name on this owner's odometer (its lifetime "
                                 "budget: STATE_DIR/odometer/TABLE.json); default: the CSV's "
                                 "file name without .csv"),
                  lifetime_epsilon: float | None = typer.Option(
                      None, min=0.0, help="this table's lifetime cap: refuse a session whose "
                                          "privacy record, composed with every earlier one "
                                          "the table joined, passes eps (kept on the "
                                          "odometer; needs the accounting extra)"),
                  lifetime_delta: float | None = typer.Option(
                      None, help="the cap's delta (with --lifetime-epsilon)")) -> None:
    """Mask and upload this owner's counts (idempotent: safe to re-run). Every session is
    recorded on the table's odometer first; with a lifetime cap, one past it is refused
    before anything is sent."""
    from feddpsyn.clients.agent import AgentError, ClientAgent
    from feddpsyn.params.table_codec import InvalidValueError

    token = read_token(token_file)
    odometer = _odometer(state_dir, table or csv_path.stem, lifetime_epsilon, lifetime_delta)
    try:
        with ClientAgent(keyserver, computeserver, session, client_id, token, state_dir,
                         verify=str(ca_file) if ca_file else True) as agent:
            result = agent.upload(csv_path, on_invalid,  # type: ignore[arg-type]
                                  progress=lambda m: typer.echo(f"... {m}"),
                                  allow_empty=allow_empty, replace=replace,
                                  odometer=odometer)
    except (AgentError, InvalidValueError) as exc:
        fail(str(exc))
    fresh = result.seed_receipt.stored or result.masked_receipt.stored
    verb = ("replaced" if result.replaced else "uploaded") if fresh else "already uploaded"
    typer.echo(f"{verb}: {result.rows} rows, {result.cells} masked counts, "
               f"{result.bytes_sent} bytes, {result.seconds:.2f} s")


def _odometer(state_dir: Path, table: str, epsilon: float | None, delta: float | None):
    """The table's odometer, its cap set or changed if both are given."""
    from feddpsyn.clients.odometer import Odometer, OdometerRefusal, odometer_path

    if (epsilon is None) != (delta is None):
        fail("--lifetime-epsilon and --lifetime-delta go together")
    try:
        odometer = Odometer(odometer_path(state_dir, table))
        if epsilon is not None and delta is not None:
            odometer.set_cap(epsilon, delta)
    except OdometerRefusal as exc:
        fail(str(exc))
    return odometer


def client_budget(table: str = typer.Option(..., help="the table's name on the odometer"),
                  state_dir: Path = typer.Option(Path(".feddpsyn-client")),
                  delta: float | None = typer.Option(
                      None, help="state the spend at this delta (default: the cap's)"),
                  as_json: bool = typer.Option(False, "--json", help="as JSON")) -> None:
    """Show a table's lifetime privacy spend: every session it joined, composed from their
    published privacy records (PLD composition, not a sum of eps), and what is left of its
    cap."""
    from feddpsyn.clients.odometer import Odometer, OdometerRefusal, odometer_path

    try:
        odometer = Odometer(odometer_path(state_dir, table))
        if not odometer.path.exists():
            fail(f"no odometer for table {table!r} in {state_dir / 'odometer'}")
        spend = odometer.spend(delta)
    except OdometerRefusal as exc:
        fail(str(exc))
    sessions = odometer.sessions()
    if as_json:
        typer.echo(json.dumps({"table": table, "sessions": len(sessions),
                               "epsilon": spend.epsilon, "delta": spend.delta,
                               "cap_epsilon": spend.cap_epsilon, "left": spend.left,
                               "joined": [{k: s[k] for k in ("session_id", "keyserver",
                                                              "epsilon", "delta")}
                                          for s in sessions]}, indent=1))
        return
    cap = "no cap" if spend.cap_epsilon is None else (
        f"cap eps {spend.cap_epsilon:g}, {spend.left:.4f} left")
    typer.echo(f"table {table}: {len(sessions)} sessions, eps {spend.epsilon:.4f} at delta "
               f"{spend.delta:g} composed ({cap})")
    for s in sessions:
        typer.echo(f"  {s['session_id']} at {s['keyserver']}: eps {s['epsilon']:g}, "
                   f"delta {s['delta']:g}")


def client_release(keyserver: str = typer.Option(..., callback=check_url,
                                                 help="the key server's base URL"),
                   session: str = typer.Option(..., callback=check_id, help="the session id"),
                   client_id: str = typer.Option(..., callback=check_id,
                                                 help="this owner's id in the session"),
                   token_file: Path = typer.Option(...),
                   out: Path = typer.Option(...),
                   ca_file: Path | None = typer.Option(
                       None, help=CA_HELP),
                   wait: float = typer.Option(
                       0, min=0, help="seconds to wait for the release if the session is "
                                      "not released yet (0: ask once)")) -> None:
    """Download the session's released noisy marginals (with their accounting)."""
    from feddpsyn.clients.agent import AgentError, ClientAgent

    try:
        with ClientAgent(keyserver, keyserver, session, client_id, read_token(token_file),
                         Path(".feddpsyn-client"),
                         verify=str(ca_file) if ca_file else True) as agent:
            document = agent.release(wait=wait)
    except AgentError as exc:
        fail(str(exc))
    out.write_text(document.model_dump_json(by_alias=True, indent=1))
    typer.echo(f"wrote {out}")
