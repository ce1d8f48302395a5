"""``feddpsyn distaim`` commands: serve one server, create and drive a session at the three
servers (operator), upload a client's shares, run a server's MPC part by hand.

    feddpsyn distaim serve --state-dir S1 --party 1 --port 8801 --mpc-address 127.0.0.1:9101
    feddpsyn distaim session create --servers URL1,URL2,URL3 \
        --operator-token-file S1/operator.token,S2/operator.token,S3/operator.token \
        --schema SCHEMA --clients h0,h1,h2 --epsilon 1 --delta 1e-5 --workload all-2way \
        --rounds 10 --participation 1 --schedule deferred --tokens-dir tokens/
    feddpsyn distaim upload --servers URL1,URL2,URL3 --session ID --client-id h0 \
        --token-file tokens/h0.token --csv h0.csv --schema SCHEMA
    feddpsyn distaim session run|status|result|delete --servers ... --operator-token-file ... \
        --session ID

    feddpsyn distaim party --pid 0 --parties 127.0.0.1:9101,127.0.0.1:9102,127.0.0.1:9103 \
        --session-dir S --out party0.json
    feddpsyn distaim share --session-dir S --client-id h0 --csv h0.csv --schema SCHEMA
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import typer

from feddpsyn.terminal import check_id, fail, read_token

app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                  help="DistAIM: AIM on Shamir-shared marginals with three MPyC servers")
session_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                          help="Operator: create, inspect, run and delete a session at the "
                               "three servers")
app.add_typer(session_app, name="session")

_SERVERS = typer.Option(..., help="the three servers' URLs, comma-separated, in party order")
_OPERATOR = typer.Option(..., help="the operator token file of each server, comma-separated "
                                   "in party order (or one file for all three)")
SCHEDULES = ("deferred", "interleaved")
_SCHEDULE_HELP = (
    "which clients AIM's rounds read when --participation is below 1. deferred (default, "
    "this project): participation rounds 0..T run as in FLAIM, then every AIM round reads "
    "the clients joined by round T. interleaved: FLAIM (Maddock et al., KDD 2024), "
    "Algorithm 3 as written: round t reads the clients joined by round t. At participation "
    "1 both are central AIM (McKenna et al., VLDB 2022)")


def _fail(message: str) -> None:
    fail(message, 1)


def _servers(text: str) -> list[str]:
    urls = [u.strip().rstrip("/") for u in text.split(",") if u.strip()]
    if len(urls) != 3:
        _fail(f"--servers lists three URLs, not {len(urls)}")
    return urls


def _operator_tokens(text: str) -> list[str]:
    paths = [Path(p.strip()) for p in text.split(",") if p.strip()]
    if len(paths) not in (1, 3):
        _fail("--operator-token-file: one file, or three (one per server)")
    tokens = [read_token(p, 1) for p in paths]
    return tokens * 3 if len(tokens) == 1 else tokens


@app.command()
def serve(state_dir: Path = typer.Option(..., help="this server's state (created if absent)"),
          party: int = typer.Option(..., min=1, max=3, help="this server's number: 1, 2 or 3"),
          host: str = "127.0.0.1", port: int = 8800,
          mpc_address: str = typer.Option(
              None, help="host:port this server's MPC party listens on (default "
                         "127.0.0.1:910<party>)"),
          operator_token_file: Path | None = typer.Option(
              None, help="default: <state-dir>/operator.token (created, mode 0600)"),
          mpc_tls_ca: Path | None = None, mpc_tls_cert: Path | None = None,
          mpc_tls_key: Path | None = None, log_level: str = "warning",
          ssl_certfile: Path | None = None, ssl_keyfile: Path | None = None):
    """Serve one DistAIM server: operator sessions, client share intake, MPC run, release."""
    import uvicorn

    from feddpsyn.common.serving import BodyLimit
    from feddpsyn.distaim.app import create_app
    if (ssl_certfile is None) != (ssl_keyfile is None):
        raise typer.BadParameter("--ssl-certfile and --ssl-keyfile go together")
    tls_files = (mpc_tls_ca, mpc_tls_cert, mpc_tls_key)
    if any(tls_files) and not all(tls_files):
        raise typer.BadParameter("--mpc-tls-ca, --mpc-tls-cert and --mpc-tls-key go together")
    mpc_tls = ({"ca": str(mpc_tls_ca), "cert": str(mpc_tls_cert), "key": str(mpc_tls_key)}
               if all(tls_files) else None)
    application = create_app(state_dir, party, mpc_address or f"127.0.0.1:{9100 + party}",
                             operator_token_file=operator_token_file, mpc_tls=mpc_tls)
    uvicorn.run(BodyLimit(application, application.state.max_body_bytes), host=host,
                port=port, log_level=log_level, ssl_certfile=ssl_certfile,
                ssl_keyfile=ssl_keyfile, timeout_graceful_shutdown=5)


@session_app.command("create")
def session_create(
        servers: str = _SERVERS, operator_token_file: str = _OPERATOR,
        schema: Path = typer.Option(..., help="the schema JSON all clients bin with"),
        clients: str = typer.Option(..., help="client ids, comma-separated"),
        epsilon: float = typer.Option(...), delta: float = typer.Option(...),
        workload: str = typer.Option("all-2way", help="all-2way | all-3way | 'a,b,c;d,e,f' "
                                                      "(attribute names or indices)"),
        rounds: int = typer.Option(10, help="planned AIM rounds T (0: AIM's own plan with "
                                            "annealing)"),
        participation: str = typer.Option("1", help="client sampling rate p per round"),
        schedule: str = typer.Option("deferred", help=_SCHEDULE_HELP),
        max_client_rows: int = typer.Option(
            1 << 20, help="a public bound on any one owner's rows (checked inside MPC; the "
                          "two-server path's --max-rows bounds the owners' rows together)"),
        session: str = typer.Option(None, callback=check_id,
                                    help="session id (default: a fresh one)"),
        tokens_dir: Path = typer.Option(Path("distaim-tokens"),
                                        help="where each client's token file is written"),
        mpc_deadline: float = typer.Option(3600, help="bound on the whole MPC run (s)"),
        score_grid_bits: int = typer.Option(0, min=0, max=8, help=(
            "fractional bits of the model answers in the secure scores (0: fastest, same "
            "error)"))):
    """Create one session at the three servers (same id, same plan, checked digests)."""
    from feddpsyn.distaim.operator import OperatorError, create_session
    from feddpsyn.distaim.plan import parse_workload
    urls, tokens = _servers(servers), _operator_tokens(operator_token_file)
    from feddpsyn.params.schema import Schema
    if schedule not in SCHEDULES:
        _fail(f"--schedule must be deferred or interleaved, not {schedule!r}")
    try:
        raw_schema = json.loads(schema.read_text())
        names = list(Schema.from_dict(raw_schema).names)
        cliques = parse_workload(workload, names)
    except OSError as exc:
        _fail(f"{schema}: {exc.strerror}")
    except ValueError as exc:  # JSON, schema and workload errors
        _fail(f"{schema if isinstance(exc, json.JSONDecodeError) else 'input'}: {exc}")
    request = {"session_id": session or "d-" + secrets.token_hex(6), "schema": raw_schema,
               "clients": [c.strip() for c in clients.split(",") if c.strip()],
               "epsilon": epsilon, "delta": delta, "workload": cliques,
               "rounds": rounds or None, "participation": participation, "schedule": schedule,
               "rows_bound": max_client_rows, "mpc_deadline": mpc_deadline,
               "score_grid_bits": score_grid_bits}
    try:
        made = create_session(urls, tokens, request)
    except OperatorError as exc:
        _fail(str(exc))
    if made.tokens:
        from feddpsyn.common.serving import write_private
        for cid, per_server in made.tokens.items():
            write_private(tokens_dir / f"{cid}.token", ("\n".join(per_server) + "\n").encode())
    typer.echo(f"session {made.session_id}: plan digest {made.plan_digest} at all three "
               f"servers; {made.plan['cells']} counts per client, rho {made.plan['rho']}")
    if made.plan["participation"] != "1":
        from feddpsyn.distaim.plan import schedule_of
        typer.echo(f"participation {made.plan['participation']} per round, schedule "
                   f"{schedule_of(made.plan)}")
    if made.created:
        typer.echo(f"client tokens (one per server, shown once): {tokens_dir}/<client>.token")
    else:
        typer.echo("it already existed at all three servers with this plan; no new tokens")


@session_app.command("status")
def session_status_cmd(servers: str = _SERVERS, operator_token_file: str = _OPERATOR,
                       session: str = typer.Option(..., callback=check_id, help="the session id")):
    """The session's state at each server; exit 1 unless the three hold the same plan."""
    from feddpsyn.distaim.operator import OperatorError, session_status
    try:
        statuses = session_status(_servers(servers), _operator_tokens(operator_token_file),
                                  session)
    except OperatorError as exc:
        _fail(str(exc))
    for s in statuses:
        if "plan_digest" in s:
            typer.echo(f"server {s['party']}: {s['state']}, plan {s['plan_digest'][:16]}, "
                       f"uploaded {len(s['clients_uploaded'])}, missing "
                       f"{','.join(s['clients_missing']) or 'none'}"
                       + (f" ({s['detail']})" if s.get("detail") else ""))
        else:
            typer.echo(f"server {s['party']}: {s['state']} ({s['detail']})")
    if len({s.get("plan_digest") for s in statuses}) != 1:
        _fail("the three servers do not hold the same plan")


@session_app.command("run")
def session_run(servers: str = _SERVERS, operator_token_file: str = _OPERATOR,
                session: str = typer.Option(..., callback=check_id, help="the session id")):
    """Close the intake and start the MPC run at the three servers."""
    from feddpsyn.distaim.operator import OperatorError, run_session
    try:
        for s in run_session(_servers(servers), _operator_tokens(operator_token_file), session):
            typer.echo(f"server {s['party']}: {s['state']}")
    except OperatorError as exc:
        _fail(str(exc))


@session_app.command("result")
def session_result(servers: str = _SERVERS, operator_token_file: str = _OPERATOR,
                   session: str = typer.Option(..., callback=check_id, help="the session id"),
                   out: Path = typer.Option(...)):
    """Write the release once the three servers are done (they must have opened the same
    values)."""
    from feddpsyn.distaim.operator import OperatorError, session_results
    try:
        results = session_results(_servers(servers), _operator_tokens(operator_token_file),
                                  session)
    except OperatorError as exc:
        _fail(str(exc))
    keys = ("admitted", "excluded", "selected", "measurements", "rho_spent")
    if any({k: r[k] for k in keys} != {k: results[0][k] for k in keys} for r in results[1:]):
        _fail("the three servers opened different values")
    out.write_text(json.dumps(results[0], indent=1))
    typer.echo(f"release of {session} written to {out}")


@session_app.command("delete")
def session_delete(servers: str = _SERVERS, operator_token_file: str = _OPERATOR,
                   session: str = typer.Option(..., callback=check_id, help="the session id")):
    """Delete the session (and its uploads) at every server holding it (not while running)."""
    from feddpsyn.distaim.operator import OperatorError, delete_session
    try:
        for line in delete_session(_servers(servers), _operator_tokens(operator_token_file),
                                   session):
            typer.echo(line)
    except OperatorError as exc:
        _fail(str(exc))


@app.command()
def party(party: int = typer.Option(..., min=1, max=3), parties: str = typer.Option(
              ..., help="host:port of the three servers, comma-separated, in party order"),
          session_dir: Path = typer.Option(...), out: Path = typer.Option(...),
          timeout: float = typer.Option(120.0, help="bound on every connect and wait (s)")):
    """Run one server's part of a DistAIM session."""
    from feddpsyn.distaim.party import main
    raise typer.Exit(main(["--pid", str(party - 1), "--parties", parties, "--session-dir",
                           str(session_dir), "--out", str(out), "--timeout", str(timeout)]))


@app.command()
def upload(servers: str = _SERVERS,
           session: str = typer.Option(..., callback=check_id, help="the session id"),
           client_id: str = typer.Option(..., callback=check_id, help="this owner's id"),
           token_file: Path = typer.Option(..., help="the client's tokens: one per server, "
                                                     "one a line"),
           csv: Path = typer.Option(...), schema: Path = typer.Option(...),
           allow_empty: bool = typer.Option(
               False, "--allow-empty", help="upload a table with no row to count")):
    """Count the session's workload on a CSV (read in chunks), share it and upload one share
    to each server."""
    from feddpsyn.distaim.client import read_token_file, upload_csv
    try:
        rows, sent = upload_csv(_servers(servers), session, client_id,
                                read_token_file(token_file), csv, schema,
                                allow_empty=allow_empty)
    except (RuntimeError, ValueError, OSError) as exc:
        _fail(str(exc))
    typer.echo(f"{client_id}: {rows} rows shared, {sent} bytes uploaded")


@app.command()
def share(session_dir: Path = typer.Option(...),
          client_id: str = typer.Option(..., callback=check_id, help="this owner's id"),
          csv: Path = typer.Option(...), schema: Path = typer.Option(...)):
    """Encode a CSV with the schema, count the session's workload marginals and write the
    seed-compressed shares for the three servers."""
    from feddpsyn.clients.counting import count_csv
    from feddpsyn.distaim.party import write_client_upload
    from feddpsyn.distaim.protocol import Layout
    from feddpsyn.params.schema import Schema
    session = json.loads((session_dir / "session.json").read_text())
    layout = Layout.for_workload(session["domain_sizes"], [tuple(c) for c in session["workload"]])
    vector, tally = count_csv(csv, Schema.load(schema), layout)
    written = write_client_upload(session_dir, session["session_id"], client_id, vector,
                                  session["modulus"])
    typer.echo(f"{client_id}: {tally.rows_kept} rows, {layout.length} counts shared, "
               f"{written} bytes")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
