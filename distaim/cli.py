"""``distaim`` commands (a typer app the lead wires into ``feddpsyn``): serve one server's
HTTP intake, run a server's MPC part by hand, share a client's CSV into a session directory.

    python -m distaim.cli serve --state-dir S0 --host 127.0.0.1 --port 8800
    python -m distaim.cli upload --servers URL1,URL2,URL3 --session ID --client-id h0 \
        --token-file h0.token --csv h0.csv --schema SCHEMA

    python -m distaim.cli party --pid 0 --parties 127.0.0.1:9101,127.0.0.1:9102,127.0.0.1:9103 \
        --session-dir S --out party0.json
    python -m distaim.cli share --session-dir S --client-id h0 --csv h0.csv --schema SCHEMA
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

app = typer.Typer(help="DistAIM: AIM on Shamir-shared marginals with three MPyC servers",
                  no_args_is_help=True)


@app.command()
def serve(state_dir: Path = typer.Option(..., help="holds session.json (operator setup)"),
          host: str = "127.0.0.1", port: int = 8800, log_level: str = "warning",
          ssl_certfile: Path | None = None, ssl_keyfile: Path | None = None):
    """Serve one DistAIM server: client share intake, MPC run, release."""
    import uvicorn

    from distaim.app import create_app
    from feddpsyn.serving import BodyLimit
    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise typer.BadParameter("--ssl-certfile and --ssl-keyfile go together")
    application = create_app(state_dir)
    uvicorn.run(BodyLimit(application, application.state.max_body_bytes), host=host,
                port=port, log_level=log_level, ssl_certfile=ssl_certfile,
                ssl_keyfile=ssl_keyfile)


@app.command()
def party(pid: int = typer.Option(...), parties: str = typer.Option(
              ..., help="host:port of the three servers, comma-separated, in pid order"),
          session_dir: Path = typer.Option(...), out: Path = typer.Option(...),
          timeout: float = typer.Option(120.0, help="bound on every connect and wait (s)")):
    """Run one server's part of a DistAIM session."""
    from distaim.party import main
    raise typer.Exit(main(["--pid", str(pid), "--parties", parties, "--session-dir",
                           str(session_dir), "--out", str(out), "--timeout", str(timeout)]))


@app.command()
def upload(servers: str = typer.Option(..., help="the three servers' URLs, comma-separated, "
                                                   "in party order"),
           session: str = typer.Option(...), client_id: str = typer.Option(...),
           token_file: Path = typer.Option(...), csv: Path = typer.Option(...),
           schema: Path = typer.Option(...)):
    """Count the session's workload on a CSV, share it and upload one share to each server."""
    from distaim.client import upload_csv
    rows, sent = upload_csv(servers.split(","), session, client_id,
                            token_file.read_text().strip(), csv, schema)
    typer.echo(f"{client_id}: {rows} rows shared, {sent} bytes uploaded")


@app.command()
def share(session_dir: Path = typer.Option(...), client_id: str = typer.Option(...),
          csv: Path = typer.Option(...), schema: Path = typer.Option(...)):
    """Encode a CSV with the schema, count the session's workload marginals and write the
    seed-compressed shares for the three servers."""
    from clients.preprocess import encode_csv
    from distaim.party import write_client_upload
    from distaim.protocol import Layout, client_vector
    from params.schema import Schema
    session = json.loads((session_dir / "session.json").read_text())
    layout = Layout.for_workload(session["domain_sizes"], [tuple(c) for c in session["workload"]])
    records = encode_csv(csv, Schema.load(schema)).records
    written = write_client_upload(session_dir, session["session_id"], client_id,
                                  client_vector(records, layout), session["modulus"])
    typer.echo(f"{client_id}: {len(records)} rows, {layout.length} counts shared, "
               f"{written} bytes")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
