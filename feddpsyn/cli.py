"""The ``feddpsyn`` command line: servers, the client agent, synthesis and the demo."""

from __future__ import annotations

import csv
import json
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Optional

import typer

from feddpsyn.distaim_cli import app as distaim_app
from feddpsyn.terminal import fail, read_token

warnings.filterwarnings("ignore", message="pkg_resources is deprecated")

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Federated DP synthetic tables with two non-colluding servers.")
client_app = typer.Typer(no_args_is_help=True, help="The data owner's agent.")
app.add_typer(client_app, name="client")
session_app = typer.Typer(no_args_is_help=True, help="The operator's view of the key server.")
app.add_typer(session_app, name="session")
schema_app = typer.Typer(no_args_is_help=True, help="Write and check a table's schema.")
app.add_typer(schema_app, name="schema")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks for researchers.")
app.add_typer(bench_app, name="bench")
app.add_typer(distaim_app, name="distaim")  # the three-server path: serve, party, upload, share


def _fail(message: str) -> None:
    fail(message, 2)


def _read_token(path: Path) -> str:
    return read_token(path, 2)


@app.command()
def keyserver(host: str = "127.0.0.1", port: int = 8700,
              state_dir: Path = typer.Option(..., help="where keys, ledger and state live"),
              peer_token_file: Optional[Path] = typer.Option(
                  None, help="token shared with the compute server (default: "
                             "STATE_DIR/peer.token, created if missing)"),
              ssl_certfile: Optional[Path] = typer.Option(None, help="serve HTTPS with this "
                                                                     "certificate (PEM)"),
              ssl_keyfile: Optional[Path] = typer.Option(None, help="its private key (PEM)"),
              log_level: str = "info") -> None:
    """Run the key-management server."""
    from common.credentials import read_or_create_token
    from common.serving import configure_logging
    from keyserver.app import create_app

    configure_logging(log_level.upper())
    state_dir.mkdir(parents=True, exist_ok=True)
    peer = read_or_create_token(peer_token_file or state_dir / "peer.token")
    _serve(create_app(state_dir, peer), host, port, log_level, ssl_certfile, ssl_keyfile)


def _serve(app, host: str, port: int, log_level: str, certfile: Optional[Path],
           keyfile: Optional[Path]) -> None:
    import uvicorn

    from common.serving import BodyLimit

    if (certfile is None) != (keyfile is None):
        _fail("--ssl-certfile and --ssl-keyfile go together")
    uvicorn.run(BodyLimit(app, app.state.max_body_bytes), host=host, port=port,
                log_level=log_level, ssl_certfile=certfile, ssl_keyfile=keyfile)


@app.command()
def computeserver(host: str = "127.0.0.1", port: int = 8701,
                  state_dir: Path = typer.Option(...),
                  keyserver: str = typer.Option(..., help="the key server's base URL"),
                  peer_token_file: Optional[Path] = typer.Option(
                      None, help="token shared with the key server (default: "
                                 "STATE_DIR/peer.token, a copy of the key server's)"),
                  keyserver_ca: Optional[Path] = typer.Option(
                      None, help="CA certificate to verify an HTTPS key server"),
                  ssl_certfile: Optional[Path] = None, ssl_keyfile: Optional[Path] = None,
                  log_level: str = "info") -> None:
    """Run the compute server (evaluation keys only)."""
    from computeserver.app import create_app
    from common.serving import configure_logging

    configure_logging(log_level.upper())
    peer_token_file = peer_token_file or state_dir / "peer.token"
    if not peer_token_file.exists():
        _fail(f"{peer_token_file} not found: copy the key server's peer.token there "
              "(or pass --peer-token-file)")
    app = create_app(state_dir, keyserver, _read_token(peer_token_file),
                     verify=str(keyserver_ca) if keyserver_ca else True)
    _serve(app, host, port, log_level, ssl_certfile, ssl_keyfile)


def _encode_local(csv_path: Path, schema: Path, on_invalid: str):
    """(schema, encoded table, all-pairs layout) of a local CSV, or a clear error and exit 2."""
    from params.table_codec import InvalidValueError, encode_csv
    from params.layout import MarginalLayout
    from params.schema import Schema, SchemaError

    try:
        s = Schema.load(schema)
        table = encode_csv(csv_path, s, on_invalid=on_invalid)  # type: ignore[arg-type]
    except (SchemaError, InvalidValueError, ValueError) as exc:
        _fail(str(exc))
    return s, table, MarginalLayout.build(s.domain_sizes)


@client_app.command("check")
def client_check(csv_path: Path = typer.Option(..., "--csv"), schema: Path = typer.Option(...),
                 on_invalid: str = typer.Option("error", help="error | clamp | drop")) -> None:
    """Check a CSV against a schema and print what would be uploaded, one fact a line."""
    _, table, layout = _encode_local(csv_path, schema, on_invalid)
    typer.echo(f"ok: {csv_path}")
    for part in table.summary().split("; "):
        typer.echo(f"  {part}")
    typer.echo(f"  upload: {len(layout.marginals)} marginals, {layout.total_cells} cells")
    if table.rows_read == 0:
        # On stdout with the rest: one stream keeps the lines in order when both are captured.
        typer.echo("  warning: a header and no data rows: every count is zero")


@client_app.command("counts")
def client_counts(csv_path: Path = typer.Option(..., "--csv"), schema: Path = typer.Option(...),
                  out: Path = typer.Option(...), on_invalid: str = "error") -> None:
    """Compute all 1-way and 2-way counts of a CSV (kept local; for inspection)."""
    s, table, layout = _encode_local(csv_path, schema, on_invalid)
    counts = layout.counts(table.records)
    doc = {m.key: {"attrs": [s.names[a] for a in m.attrs], "shape": list(m.shape),
                   "counts": counts[m.offset:m.offset + m.size].tolist()}
           for m in layout.marginals}
    out.write_text(json.dumps(doc))
    typer.echo(f"wrote {len(doc)} marginals to {out}")


@client_app.command("upload")
def client_upload(keyserver: str = typer.Option(...), computeserver: str = typer.Option(...),
                  session: str = typer.Option(...), client_id: str = typer.Option(...),
                  token_file: Path = typer.Option(...), csv_path: Path = typer.Option(..., "--csv"),
                  on_invalid: str = "error",
                  state_dir: Path = typer.Option(Path(".feddpsyn-client")),
                  ca_file: Optional[Path] = typer.Option(
                      None, help="CA certificate to verify HTTPS servers")) -> None:
    """Mask and upload this owner's counts (idempotent: safe to re-run)."""
    from clients.agent import AgentError, ClientAgent
    from params.table_codec import InvalidValueError

    token = _read_token(token_file)
    try:
        with ClientAgent(keyserver, computeserver, session, client_id, token, state_dir,
                         verify=str(ca_file) if ca_file else True) as agent:
            result = agent.upload(csv_path, on_invalid,  # type: ignore[arg-type]
                                  progress=lambda m: typer.echo(f"... {m}"))
    except (AgentError, InvalidValueError) as exc:
        _fail(str(exc))
    fresh = result.seed_receipt.stored or result.masked_receipt.stored
    typer.echo(f"{'uploaded' if fresh else 'already uploaded'}: {result.rows} rows, "
               f"{result.cells} masked counts, {result.bytes_sent} bytes, "
               f"{result.seconds:.2f} s")


@client_app.command("release")
def client_release(keyserver: str = typer.Option(...), session: str = typer.Option(...),
                   client_id: str = typer.Option(...), token_file: Path = typer.Option(...),
                   out: Path = typer.Option(...),
                   ca_file: Optional[Path] = typer.Option(
                       None, help="CA certificate to verify an HTTPS key server")) -> None:
    """Download the session's released noisy marginals (with their accounting)."""
    from clients.agent import AgentError, ClientAgent

    try:
        with ClientAgent(keyserver, keyserver, session, client_id, _read_token(token_file),
                         Path(".feddpsyn-client"),
                         verify=str(ca_file) if ca_file else True) as agent:
            document = agent.release()
    except AgentError as exc:
        _fail(str(exc))
    out.write_text(document.model_dump_json(by_alias=True, indent=1))
    typer.echo(f"wrote {out}")


def _operator_call(keyserver: str, token_file: Path, method: str, path: str,
                   content: str | None = None, content_type: str | None = None):
    import httpx

    from common import wire

    headers = {"Authorization": f"Bearer {_read_token(token_file)}"}
    if content_type:
        headers["Content-Type"] = content_type
    try:
        response = httpx.request(method, f"{keyserver.rstrip('/')}{path}", timeout=600,
                                 headers=headers, content=content)
    except httpx.TransportError as exc:
        _fail(f"key server {keyserver} unreachable ({type(exc).__name__})")
    if response.status_code >= 400:
        _fail(f"{response.status_code}: {wire.error_detail(response, 300)}")
    return response


def _split(selection: str, one_way: float | None, selection_share: float) -> dict | None:
    if one_way is None:
        return None  # the mode's default split
    if selection == "none":
        return {"one_way": one_way, "two_way": 1 - one_way}
    return {"one_way": one_way, "selection": selection_share,
            "two_way": 1 - one_way - selection_share}


@session_app.command("create")
def session_create(keyserver: str = typer.Option(...),
                   operator_token_file: Path = typer.Option(
                       ..., help="the key server's STATE_DIR/operator.token"),
                   schema: Path = typer.Option(...),
                   clients: str = typer.Option(..., help="comma-separated client ids"),
                   epsilon: float = typer.Option(...), delta: float = typer.Option(...),
                   parameter_set: str = "default",
                   max_rows: int = typer.Option(100_000, help="public bound on union rows"),
                   selection: str = typer.Option(
                       "em", help="em (private selection under encryption) | noisy-greedy "
                                  "(PrivSyn's rule: InDif noised by both servers, greedy at "
                                  "the key server) | none (every pair)"),
                   rounds: Optional[int] = typer.Option(
                       None, help="pairs the em selection chooses (default: half the pairs)"),
                   one_way_share: Optional[float] = typer.Option(
                       None, help="share of rho for 1-ways (default 0.1 with selection, 0.2 "
                                  "without)"),
                   selection_share: float = typer.Option(
                       0.1, help="share of rho for the selection (em, noisy-greedy)"),
                   selection_parameters: Optional[str] = typer.Option(
                       None, help="selection parameter set: precise | lean (default: "
                                  "params.parameter_sets.DEFAULT_SELECTION_SET; see "
                                  "`feddpsyn params`)"),
                   tokens_dir: Path = typer.Option(
                       ..., help="where each client's token is written (mode 0600)")) -> None:
    """Create a synthesis session; write one credential file per client."""
    from common import wire
    from common.serving import write_private
    from params.schema import Schema, SchemaError

    try:
        s = Schema.load(schema)
    except SchemaError as exc:
        _fail(str(exc))
    try:
        request = wire.SessionCreate(
            schema=s.to_dict(), clients=[c.strip() for c in clients.split(",") if c.strip()],
            budget=wire.BudgetSpec(epsilon=epsilon, delta=delta,
                                   split=_split(selection, one_way_share, selection_share)),
            parameter_set=parameter_set, max_rows=max_rows,
            selection=wire.SelectionRequest(mode=selection, rounds=rounds,
                                            parameter_set=selection_parameters))
    except ValueError as exc:
        _fail(f"invalid session request: {exc}")
    response = _operator_call(keyserver, operator_token_file, "POST", "/sessions",
                              content=request.model_dump_json(by_alias=True),
                              content_type="application/json")
    created = wire.SessionCreated.model_validate_json(response.content)
    for client_id, token in created.client_tokens.items():
        write_private(tokens_dir / f"{client_id}.token", token.encode())
    typer.echo(f"session {created.session.session_id}: {len(created.client_tokens)} clients, "
               f"{created.session.total_cells} cells; tokens in {tokens_dir}/")


@session_app.command("status")
def session_status(keyserver: str = typer.Option(...), session: str = typer.Option(...),
                   operator_token_file: Path = typer.Option(...),
                   as_json: bool = typer.Option(False, "--json",
                                                help="the status and ledger as JSON")) -> None:
    """Show a session's state and where its privacy budget went: one line per ledger entry
    (what was released or decided, rho, running total, remaining, eps at the session's
    delta), then the plan's entries still to come."""
    from common import wire
    from feddpsyn.ledger_table import format_ledger

    status = _operator_call(keyserver, operator_token_file, "GET", f"/sessions/{session}/status")
    ledger = _operator_call(keyserver, operator_token_file, "GET", f"/sessions/{session}/ledger")
    if as_json:
        typer.echo(json.dumps({"status": status.json(), "ledger": ledger.json()}, indent=1))
        return
    public = _operator_call(keyserver, operator_token_file, "GET", f"/sessions/{session}")
    typer.echo(format_ledger(wire.LedgerView.model_validate_json(ledger.content),
                             wire.SessionPublic.model_validate_json(public.content),
                             wire.SessionStatus.model_validate_json(status.content)))


@schema_app.command("draft")
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
    from params.table_codec import InvalidValueError
    from clients.schema_draft import PRIVACY_NOTE, draft_schema, parse_bounds
    from params.schema import SchemaError

    if out.exists() and not force:
        _fail(f"{out} exists; choose another --out or add --force")
    split = lambda text: {c.strip() for c in text.split(",") if c.strip()}  # noqa: E731
    try:
        draft, columns = draft_schema(csv_path, parse_bounds(bounds),
                                      categorical=split(categorical),
                                      continuous=split(continuous),
                                      max_categories=max_categories, bins=bins)
    except (SchemaError, InvalidValueError) as exc:
        _fail(str(exc))
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


@schema_app.command("check")
def schema_check(schema: Path = typer.Option(...),
                 csv_paths: list[Path] = typer.Option(
                     [], "--csv", help="also check these tables against it (repeatable)"),
                 limit: int = typer.Option(20, help="problems shown per table")) -> None:
    """Check a schema (and tables against it): each problem on one line; exit 1 if any."""
    from params.table_codec import InvalidValueError, find_problems
    from params.schema import Schema, SchemaError, schema_warnings

    try:
        s = Schema.load(schema)
    except SchemaError as exc:
        for problem in exc.problems:
            typer.echo(f"problem: {problem}")
        raise typer.Exit(1) from None
    typer.echo(f"ok: {schema}: {len(s.columns)} columns, domain sizes "
               f"{', '.join(f'{n}={k}' for n, k in zip(s.names, s.domain_sizes))}")
    for warning in schema_warnings(s):
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


@app.command()
def synthesize(release: Path = typer.Option(...),
               schema: Optional[Path] = typer.Option(
                   None, help="must match the release's schema (checked)"),
               method: str = typer.Option("pgm", help="pgm | gum"),
               rows: Optional[int] = typer.Option(None, help="default: estimated union size"),
               out: Path = typer.Option(...), seed: Optional[int] = None) -> None:
    """Turn released noisy marginals into a synthetic CSV in the original values."""
    from pydantic import ValidationError

    from common import wire
    from params.schema import Schema, SchemaError
    from synthesis import marginals_from_release
    from synthesis import synthesize as run

    if method not in ("pgm", "gum"):
        _fail(f"unknown method {method!r}: pgm or gum")
    try:
        document = wire.ReleaseDocument.model_validate_json(release.read_bytes())
    except OSError as exc:
        _fail(f"cannot read {release}: {exc.strerror}")
    except ValidationError as exc:
        _fail(f"{release} is not a release document: {exc.errors()[0]['msg']}")
    release_schema, noisy = marginals_from_release(document)
    if schema is not None:
        try:
            given = Schema.load(schema)
        except SchemaError as exc:
            _fail(str(exc))
        if given.fingerprint() != release_schema.fingerprint():
            _fail(f"{schema} differs from the schema the release was made with")
    _, rows_out = run(release_schema, noisy, method, rows, seed)  # type: ignore[arg-type]
    with out.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(release_schema.names)
        writer.writerows(rows_out)
    typer.echo(f"wrote {len(rows_out)} synthetic rows to {out}")


@app.command("params")
def params_command(schema: Optional[Path] = typer.Option(
                       None, help="schema file (default: the bundled Fed-Heart-Disease)"),
                   max_rows: int = typer.Option(740, help="public bound on union rows"),
                   epsilon: float = 1.0, delta: float = 1e-5,
                   selection: str = typer.Option("em", help="em | noisy-greedy"),
                   rounds: Optional[int] = typer.Option(
                       None, help="em rounds (default: half the pairs)"),
                   as_json: bool = typer.Option(False, "--json")) -> None:
    """The named selection parameter sets and what each costs for one session: the widths
    derived from the budget, epsilon per round with its numerical part, rho, fhe_delta."""
    from params.parameter_sets import DEFAULT_SELECTION_SET, SELECTION_SETS
    from params.schema import Schema, SchemaError
    from params.session_plan import SessionPlan

    try:
        s = Schema.load(schema or Path(__file__).resolve().parents[1] / "params" / "schemas"
                        / "fed_heart_disease.schema.json")
    except SchemaError as exc:
        _fail(str(exc))
    rows = []
    for name in SELECTION_SETS:
        try:
            plan = SessionPlan.build(s, None, epsilon, delta, None, "default", max_rows,
                                     selection=selection, rounds=rounds, selection_set=name)
        except ValueError as exc:
            _fail(f"set {name}: {exc}")
        report = plan.selection.report(plan.pair_cells())
        report.update(default=name == DEFAULT_SELECTION_SET,
                      bootstraps=plan.selection.bootstraps(plan.pair_cells()),
                      chunk_sizes_used=list(plan.used_chunk_sizes()),
                      delta_conversion=plan.delta_conversion, delta_terms=plan.delta_terms(),
                      delta_total=plan.delta_total())
        rows.append(report)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        ps = r["parameter_set"]
        typer.echo(f"{ps['name']} v{ps['version']}{' (default)' if r['default'] else ''}: "
                   f"lambda {ps['lam']}, 4 eta <= {ps['relative_loss']} eps, clamp below "
                   f"e^-{ps['clamp_exponent']}, p_error 2^{math.log2(ps['p_error']):g}, "
                   f"P2 chunks of {ps['chunk_sizes']} cells "
                   f"(this schema uses {r['chunk_sizes_used']})")
        if r["mode"] == "em":
            typer.echo(f"  {r['rounds']} rounds: n_b {r['nb']}, kappa' {r['kappa_prime']}; "
                       f"eps/round {r['step_epsilon']:.6f} + numerical "
                       f"{r['step_epsilon_total'] - r['step_epsilon']:.2e} = "
                       f"{r['step_epsilon_total']:.6f}")
        typer.echo(f"  rho charged {r['rho_charged']:.6g} of {r['rho_budget']:.6g}; "
                   f"fhe_delta {r['fhe_delta']:.2e} ({r['bootstraps']:,} bootstraps x p_error, "
                   "an upper bound; the session counts the compiled module's)")
        terms = ", ".join(f"{k} {v:.2e}" for k, v in r["delta_terms"].items())
        typer.echo(f"  delta {delta:g} = conversion {r['delta_conversion']:.4e} + reserved "
                   f"(1 + e^eps) x failure terms: {terms}")


@app.command()
def numerics(eps: str = typer.Option("0.1,0.3,1,3,10", help="comma-separated epsilons"),
             nb: int = typer.Option(17, help="bits of the fixed-point score (n_b)"),
             kappa: int = typer.Option(13, help="scale of the result, 2^kappa"),
             kappa_prime: Optional[str] = typer.Option(
                 None, help="kappa'_j: one value for every j, or n_b comma-separated values "
                            "(default: kappa)"),
             lam: int = typer.Option(17, "--lambda", help="fraction bits of the score"),
             e_prev: float = typer.Option(0.0, help="error of the input score, |2^-lambda U - u|"),
             as_json: bool = typer.Option(False, "--json", help="print rows as JSON")) -> None:
    """Extra privacy loss of TFHE-EXP: Theorem C.1's bound and the exact worst case."""
    from crypto.exp_privacy import numerics_row
    from crypto.tfhe_exp import ExpParams

    try:
        eps_values = [float(e) for e in eps.split(",") if e.strip()]
        if kappa_prime is None:
            kp = (kappa,) * nb
        else:
            parts = [int(k) for k in kappa_prime.split(",")]
            kp = tuple(parts * nb if len(parts) == 1 else parts)
        rows = [numerics_row(ExpParams(eps=e, nb=nb, kappa=kappa, kappa_prime=kp, lam=lam),
                             e_prev) for e in eps_values]
    except ValueError as exc:
        _fail(str(exc))
    if as_json:
        # Strict JSON has no infinity: an unbounded loss (a weight rounds to 0) is null.
        def finite(v):
            return None if isinstance(v, float) and math.isinf(v) else v

        typer.echo(json.dumps([{k: finite(r[k]) for k in ("eps", "nb", "kappa", "lambda",
                                                          "bound", "exact", "total",
                                                          "exact_bernoulli", "total_bernoulli")}
                               for r in rows]))
        return
    typer.echo("exact: SubRoutine 1's integer arithmetic; ours: the exact product of Bernoulli "
               "trials the encrypted selection samples (crypto/selection.py)")
    typer.echo(f"{'eps':>8} {'bound e_prime':>14} {'exact e_prime':>14} {'eps+4*exact':>12} "
               f"{'ours e_prime':>13} {'eps+4*ours':>11}")
    for r in rows:
        typer.echo(f"{r['eps']:>8g} {r['bound']:>14.6f} {r['exact']:>14.6f} {r['total']:>12.6f} "
                   f"{r['exact_bernoulli']:>13.6f} {r['total_bernoulli']:>11.6f}")


@bench_app.command("utility")
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
                  methods: str = typer.Option("central-privsyn,concat,feddpsyn",
                                              help="comma-separated, or 'all'"),
                  eps: str = typer.Option("0.5,1,2"),
                  clients: str = typer.Option("4", help="comma-separated client counts"),
                  partition: str = typer.Option(
                      "uniform", help="comma-separated: uniform | dirichlet | feature | "
                                      "natural"),
                  beta: str = typer.Option("0.1", help="Dirichlet beta(s), for dirichlet"),
                  repeats: int = 3, out: Path = typer.Option(...), delta: float = 1e-5,
                  seed: int = 0,
                  jobs: int = typer.Option(1, help="worker processes (one core each)")) -> None:
    """Utility of every method against the real union, on the same partitions and seeds, on
    a bundled data set or your own table."""
    from fedbench.methods import METHODS
    from fedbench.runner import TARGETS, Setting, run_utility
    from feddpsyn.demo import dataset as bundled
    from params.schema import Schema

    if (csv_path is None) != (schema is None):
        _fail("--csv and --schema go together")
    if csv_path is not None and dataset is not None:
        _fail("give either --dataset or --csv/--schema, not both")
    if csv_path is None and (target is not None or owner_column is not None):
        _fail("--target and --owner-column go with your own table (--csv, --schema)")
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
                _fail("give --target (the column the ML metrics predict), or declare "
                      "\"target\" in the schema")
            if target not in s.names:
                _fail(f"--target {target!r} is not a column of {schema} "
                      f"(columns: {', '.join(s.names)})")
            if natural is not None and natural not in s.names:
                _fail(f"--owner-column {natural!r} is not a column of {schema}")
        settings = []
        for name in partition.split(","):
            betas = [float(b) for b in beta.split(",")] if name == "dirichlet" else [None]
            settings += [Setting(int(k), name, b) for k in clients.split(",") for b in betas]
        chosen = sorted(METHODS) if methods == "all" else methods.split(",")
        run_utility(table, s, target, chosen, [float(e) for e in eps.split(",")], settings,
                    repeats, out, delta, seed, natural_column=natural, jobs=jobs)
    except (ValueError, KeyError) as exc:  # SchemaError, InvalidValueError name the place
        _fail(str(exc))
    typer.echo(f"wrote {out / 'results.csv'}, {out / 'summary.md'} and plots")


@bench_app.command("summary")
def bench_summary(results: Path = typer.Option(..., help="a run's results.csv"),
                  out: Optional[Path] = typer.Option(
                      None, help="where summary.md and the plots go (default: beside it)")) -> None:
    """Re-write summary.md (means, spreads, the winners per setting) and the plots from a
    run's results.csv, e.g. after merging runs or for a run made by an older version."""
    from fedbench.runner import read_results, write_results

    if not results.is_file():
        _fail(f"{results} is not a file")
    try:
        rows = read_results(results)
    except (ValueError, KeyError) as exc:
        _fail(f"{results}: {exc}")
    target = out or results.parent
    target.mkdir(parents=True, exist_ok=True)
    write_results(rows, target)
    typer.echo(f"wrote {target / 'summary.md'} and plots from {len(rows)} rows")


@app.command()
def demo(dataset: Optional[str] = typer.Option(
             None, help="fed_heart_disease (default) | adult; or give your own table with "
                        "--csv and --schema"),
         csv_path: Optional[Path] = typer.Option(
             None, "--csv", help="your own table (with --schema): split over --clients owners "
                                 "uniformly at random, or by --owner-column"),
         schema: Optional[Path] = typer.Option(None, help="the schema of --csv (see "
                                                          "`feddpsyn schema draft`)"),
         owner_column: Optional[str] = typer.Option(
             None, help="with --csv: the column naming each row's owner (a natural split; "
                        "left out of the uploads if the schema does not declare it)"),
         clients: Optional[int] = typer.Option(
             None, help="owners of a uniform split (default 4; fed_heart_disease uses its 4 "
                        "hospitals)"),
         out: Optional[Path] = typer.Option(
             None, help="output directory (default: a new demo-out/run-DATE-TIME)"),
         epsilon: float = 1.0,
         delta: float = 1e-5,
         method: str = typer.Option("gum", help="gum (uses every released pair) | pgm"),
         rows: Optional[int] = None,
         seed: int = 0,
         path: str = typer.Option("tfhe", help="tfhe (two servers) | distaim (three MPyC "
                                               "servers)"),
         selection: Optional[str] = typer.Option(
             None, help="tfhe path: em (private selection under encryption, FedDPSyn's P2 "
                        "and P3; the default on fed_heart_disease: about 11.5 min on 2 "
                        "cores) | noisy-greedy (PrivSyn's noisy scores + greedy; P2's cost "
                        "only) | none (every pair; about 15 s; the default on adult and on "
                        "your own table). An estimate is printed first."),
         rounds: Optional[int] = typer.Option(
             None, help="tfhe path, em: pairs to select (default: 4 on fed_heart_disease, "
                        "half the pairs otherwise)")) -> None:
    """Run the whole protocol on a bundled data set or your own table, all on loopback."""
    from feddpsyn.demo import user_table

    if (csv_path is None) != (schema is None):
        _fail("--csv and --schema go together")
    if csv_path is not None and dataset is not None:
        _fail("give either --dataset or --csv/--schema, not both")
    if owner_column is not None and csv_path is None:
        _fail("--owner-column splits your own table: give --csv and --schema too")
    if owner_column is not None and clients is not None:
        _fail("--owner-column decides the owners; leave out --clients")
    if clients is not None and clients < 1:
        _fail("--clients must be at least 1")
    table = None
    if csv_path is not None:
        if path != "tfhe":
            _fail("--csv runs on the two-server path (--path tfhe); the DistAIM demo takes "
                  "the bundled data sets")
        try:
            table = user_table(csv_path, schema, owner_column)
        except ValueError as exc:  # SchemaError and InvalidValueError name file and place
            _fail(str(exc))
    dataset = dataset or "fed_heart_disease"
    clients = clients or 4
    if out is None:
        out = Path("demo-out") / time.strftime("run-%Y%m%d-%H%M%S")
    if out.exists() and any(out.iterdir()):
        _fail(f"{out} exists and is not empty; choose another --out")
    if path == "distaim":
        from feddpsyn.distaim_demo import run_distaim_demo

        report = run_distaim_demo(out, dataset, clients, epsilon, delta, seed=seed, rows=rows)
    elif path == "tfhe":
        from feddpsyn.demo import DEMO_ROUNDS, DEMO_SELECTION, run_demo

        key = dataset if table is None else None
        if selection is None:
            selection = DEMO_SELECTION.get(key, "none")
        if rounds is None and selection == "em":
            rounds = DEMO_ROUNDS.get(key)
        try:
            report = run_demo(table or dataset, clients, out, epsilon, delta, method, rows,
                              seed, selection=selection, rounds=rounds)
        except ValueError as exc:
            _fail(str(exc))
    else:
        _fail(f"--path is tfhe or distaim, not {path!r}")
    _print_report(report, out)


def _pairs_text(pairs: list[list[str]]) -> str:
    """One pair a line, "a × b": column names stay whole however narrow the terminal."""
    return "\n".join(f"  {' × '.join(p)}" for p in pairs)


def _print_report(report: dict, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"feddpsyn demo: {report['dataset']}, {report['clients']} owners, "
                        f"eps={report['epsilon_budget']}")
    table.add_column("average L1 error")
    table.add_column("federated (2 servers)", justify="right")
    table.add_column("centralized, same budget", justify="right")
    for k in ("one_way", "two_way", "three_way"):
        table.add_row(k, f"{report['workload_error'][k]:.4f}",
                      f"{report['central_workload_error'][k]:.4f}")
    console.print(table)

    def say(text: str) -> None:
        # Plain text: a column or path name with "[...]" is not rich markup.
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    if report.get("selected_pairs") and report["selection"]["mode"] == "noisy-greedy":
        sel = report["selection"]
        say(f"selected pairs (noisy-greedy, rho {sel['rho_charged']:.5g}, noise sigma2 "
            f"{sel['noise_sigma2_per_server']:.4g} per server):\n"
            + _pairs_text(report["selected_pairs"]))
    elif report.get("selected_pairs"):
        sel = report["selection"]
        say(f"selected pairs ({sel['mode']}, {sel['rounds']} rounds, eps "
            f"{sel['epsilon_per_round_charged']:.5f} per round incl. "
            f"{sel['numerical_extra_epsilon_per_round']:.2g} numerical):\n"
            + _pairs_text(report["selected_pairs"]))
    say(f"epsilon spent {report['epsilon_spent']:.4f} (delta {report['delta']})")
    say("phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in report["phases"].items()))
    say(f"wrote {out / 'synthetic.csv'} and {out / 'report.json'}")


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
