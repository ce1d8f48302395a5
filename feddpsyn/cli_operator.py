"""``feddpsyn session``: the operator creates a session at the key server and reads its
status and privacy ledger, over the key server's HTTP API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from feddpsyn.terminal import CA_HELP, check_id, check_ids, check_url, fail, read_token


def _operator_call(keyserver: str, token_file: Path, method: str, path: str,
                   content: str | None = None, content_type: str | None = None,
                   ca_file: Path | None = None):
    import httpx

    from feddpsyn.common import wire
    from feddpsyn.common.version import VERSION, VERSION_HEADER

    headers = {"Authorization": f"Bearer {read_token(token_file)}", VERSION_HEADER: VERSION}
    if content_type:
        headers["Content-Type"] = content_type
    try:
        response = httpx.request(method, f"{keyserver.rstrip('/')}{path}", timeout=600,
                                 headers=headers, content=content, verify=_verify(ca_file))
    except httpx.TransportError as exc:
        fail(transport_problem(keyserver, exc))
    if response.status_code >= 400:
        fail(f"{response.status_code}: {wire.error_detail(response, 300)}")
    return response


def _verify(ca_file: Path | None) -> bool | str:
    if ca_file is not None and not ca_file.is_file():
        fail(f"--ca-file {ca_file}: no such file")
    return str(ca_file) if ca_file is not None else True


def transport_problem(url: str, exc: Exception) -> str:
    """One line for a connection that failed: a certificate the CA does not vouch for, or a
    server that does not answer."""
    from feddpsyn.common.tls import UNTRUSTED, certificate_refused

    if certificate_refused(exc):
        return f"{url}: {UNTRUSTED}"
    return f"key server {url} unreachable ({type(exc).__name__})"


def _split(selection: str, one_way: float | None, selection_share: float) -> dict | None:
    if one_way is None:
        return None  # the mode's default split
    from feddpsyn.params.modes import SelectionMode

    if selection == SelectionMode.NONE:
        return {"one_way": one_way, "two_way": 1 - one_way}
    return {"one_way": one_way, "selection": selection_share,
            "two_way": 1 - one_way - selection_share}


def _deadline(text: str) -> float:
    """A Unix time from an ISO-8601 time with its zone, or a duration from now (90m, 48h,
    7d); a clear error otherwise."""
    import re
    import time
    from datetime import datetime

    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text)
    if match:
        return time.time() + float(match[1]) * {"s": 1, "m": 60, "h": 3600,
                                                "d": 86400}[match[2]]
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        fail(f"--upload-deadline {text!r} is neither an ISO-8601 time nor a duration "
             "(90m, 48h, 7d)")
    if when.tzinfo is None:
        fail(f"--upload-deadline {text!r} has no time zone: add one (+00:00 for UTC)")
    if when.timestamp() <= time.time():
        fail(f"--upload-deadline {text!r} is in the past")
    return when.timestamp()


def session_create(keyserver: str = typer.Option(..., callback=check_url,
                                                 help="the key server's base URL"),
                   operator_token_file: Path = typer.Option(
                       ..., help="the key server's STATE_DIR/operator.token"),
                   schema: Path = typer.Option(...),
                   clients: str = typer.Option(..., callback=check_ids,
                                               help="comma-separated client ids"),
                   epsilon: float = typer.Option(...), delta: float = typer.Option(...),
                   parameter_set: str = "default",
                   max_rows: int = typer.Option(
                       ..., min=1, help="a public upper bound on the rows of the owners' "
                                        "tables together (required: only the operator can "
                                        "state it; the plan's widths and the selection's "
                                        "row-bound check rest on it)"),
                   selection: str = typer.Option(
                       "noisy-greedy", help="noisy-greedy (the default: PrivSyn's rule, InDif "
                                            "noised under encryption, greedy at the key "
                                            "server) | em (private selection under "
                                            "encryption) | none (every pair)"),
                   rounds: Optional[int] = typer.Option(
                       None, help="pairs the em selection chooses (default: half the pairs)"),
                   noise: str = typer.Option(
                       "auto", help="auto: one joint noise neither server knows on every "
                                    "release that fits, two-server elsewhere | joint: every "
                                    "release or refuse | two-server: each server its own "
                                    "discrete Gaussian (docs/threat-model.md says when to "
                                    "choose which)"),
                   one_way_share: Optional[float] = typer.Option(
                       None, help="share of the budget for the 1-ways (default, by "
                                  "selection: noisy-greedy 0.1 to 0.3 by the budget and "
                                  "--max-rows; em 0.1; none: by cell counts)"),
                   selection_share: float = typer.Option(
                       0.1, help="share of rho for the selection (em, noisy-greedy)"),
                   selection_parameters: Optional[str] = typer.Option(
                       None, help="selection parameter set: precise | lean (default: "
                                  "precise; see `feddpsyn params`)"),
                   one_way_topup: Optional[bool] = typer.Option(
                       None, "--one-way-topup/--no-one-way-topup",
                       help="noisy-greedy: the 2-way release also tops up the 1-ways to "
                            "their c^(2/3) share of the publication (docs/privacy-plan.md, "
                            "\"The 1-way top-up\"); default: on for noisy-greedy"),
                   upload_deadline: Optional[str] = typer.Option(
                       None, help="when the uploads close with the owners present: an "
                                  "ISO-8601 time with its zone (2027-01-31T18:00:00+00:00) or "
                                  "a duration from now (90m, 48h, 7d); default: the session "
                                  "waits for every owner, or `session close`"),
                   quorum: Optional[int] = typer.Option(
                       None, min=1, help="the fewest owners the session may run with, by "
                                         "the deadline or `session close` (default: every "
                                         "owner)"),
                   tokens_dir: Path = typer.Option(
                       ..., help="where each client's token is written (mode 0600)"),
                   timeout: float = typer.Option(
                       1800, help="seconds to wait for the session to be ready (compiling "
                                  "its circuits and generating its keys); it goes on "
                                  "preparing after the wait"),
                   no_wait: bool = typer.Option(
                       False, "--no-wait", help="return once the session is accepted; "
                                                "follow it with `session status`"),
                   ca_file: Path | None = typer.Option(None, help=CA_HELP),
                   quiet: bool = typer.Option(
                       False, "--quiet", "-q", help="print the session id alone (for a "
                                                    "script: SESSION=$(feddpsyn session create "
                                                    "... -q))")) -> None:
    """Create a synthesis session; write one credential file per client.

    The key server checks the request and its plan at once, then prepares the session in
    the background (compiling its circuits, generating its keys): this command shows that
    progress until the session is ready, or up to --timeout seconds."""
    from feddpsyn.common import wire
    from feddpsyn.common.serving import write_private
    from feddpsyn.operator_api import SessionError, post_session, wait_ready
    from feddpsyn.params.modes import NoiseMode
    from feddpsyn.params.schema import Schema, SchemaError
    from feddpsyn.progress import ProgressDisplay, session_steps

    if noise not in tuple(NoiseMode):
        fail(f"--noise is auto, joint or two-server, not {noise!r}")
    try:
        s = Schema.load(schema)
    except SchemaError as exc:
        fail(str(exc))
    try:
        request = wire.SessionCreate(
            schema=s.to_dict(), clients=[c.strip() for c in clients.split(",") if c.strip()],
            budget=wire.BudgetSpec(epsilon=epsilon, delta=delta,
                                   split=_split(selection, one_way_share, selection_share)),
            parameter_set=parameter_set, max_rows=max_rows,
            selection=wire.SelectionRequest(mode=selection, rounds=rounds,
                                            parameter_set=selection_parameters,
                                            one_way_topup=one_way_topup),
            noise=noise, quorum=quorum,
            upload_deadline=None if upload_deadline is None else _deadline(upload_deadline))
    except ValueError as exc:
        fail(f"invalid session request: {exc}")
    token = read_token(operator_token_file)
    verify = _verify(ca_file)
    try:
        accepted = post_session(keyserver, token, request, verify=verify)
    except SessionError as exc:
        fail(str(exc))
    sid = accepted.session_id
    # The tokens are shown once: written before any wait, so a wait cut short loses none.
    for client_id, client_token in accepted.client_tokens.items():
        write_private(tokens_dir / f"{client_id}.token", client_token.encode())
    if no_wait:
        if quiet:
            typer.echo(sid)
            return
        typer.echo(f"session {sid}: accepted, preparing; {len(accepted.client_tokens)} "
                   f"clients; tokens in {tokens_dir}/; follow it with `feddpsyn session "
                   f"status --session {sid}`")
        return
    # On stderr (stdout keeps the result line): a bar per preparation phase on a terminal,
    # else a line when a phase begins and at most every 10 s while it lasts.
    display = ProgressDisplay(prefix=f"session {sid}: preparing: ", stderr=True)
    try:
        public = wait_ready(keyserver, token, sid, timeout=timeout, verify=verify,
                            progress=None if quiet
                            else lambda status: display.show(session_steps(status)))
    except SessionError as exc:
        display.close()
        fail(f"{exc} (tokens in {tokens_dir}/)", code=1)
    display.finish()
    display.close()
    if quiet:
        typer.echo(sid)
        return
    typer.echo(f"session {sid}: {len(accepted.client_tokens)} clients, "
               f"{public.total_cells} cells; tokens in {tokens_dir}/")


def session_status(keyserver: str = typer.Option(..., callback=check_url,
                                                 help="the key server's base URL"),
                   session: str = typer.Option(..., callback=check_id, help="the session id"),
                   operator_token_file: Path = typer.Option(...),
                   as_json: bool = typer.Option(False, "--json",
                                                help="the status and ledger as JSON"),
                   ca_file: Path | None = typer.Option(None, help=CA_HELP)) -> None:
    """Show a session's state and where its privacy budget went: one line per ledger entry
    (what was released or decided, rho, running total, remaining, eps at the session's
    delta), then the plan's entries still to come. A session being prepared shows its
    phase and how long it has taken; while the compute server works, how far it is."""
    from feddpsyn.common import wire
    from feddpsyn.ledger_table import format_ledger

    status = _operator_call(keyserver, operator_token_file, "GET", f"/sessions/{session}/status",
                            ca_file=ca_file)
    parsed = wire.SessionStatus.model_validate_json(status.content)
    if parsed.state in ("preparing", "failed"):
        # No ledger nor public record yet: the session is being set up (or failed to be).
        if as_json:
            typer.echo(json.dumps({"status": status.json(), "ledger": None}, indent=1))
        else:
            typer.echo(f"session {parsed.session_id}: {parsed.state}; {parsed.detail}")
        return
    ledger = _operator_call(keyserver, operator_token_file, "GET", f"/sessions/{session}/ledger",
                            ca_file=ca_file)
    if as_json:
        typer.echo(json.dumps({"status": status.json(), "ledger": ledger.json()}, indent=1))
        return
    public = _operator_call(keyserver, operator_token_file, "GET", f"/sessions/{session}",
                            ca_file=ca_file)
    typer.echo(format_ledger(wire.LedgerView.model_validate_json(ledger.content),
                             wire.SessionPublic.model_validate_json(public.content),
                             parsed))


def session_close(keyserver: str = typer.Option(..., callback=check_url,
                                                help="the key server's base URL"),
                  session: str = typer.Option(..., callback=check_id, help="the session id"),
                  operator_token_file: Path = typer.Option(...),
                  without: str = typer.Option(
                      ..., callback=check_ids,
                      help="comma-separated owners to leave out: none of them may have "
                           "uploaded, and at least the session's quorum must remain"),
                  ca_file: Path | None = typer.Option(None, help=CA_HELP)) -> None:
    """Close a session's uploads with the owners present: the owners named are left out,
    their later uploads refused; the session runs on the others' tables."""
    from feddpsyn.common import wire

    body = wire.UploadsCloseWithout(without=[c.strip() for c in without.split(",")
                                             if c.strip()])
    response = _operator_call(keyserver, operator_token_file, "POST",
                              f"/sessions/{session}/uploads/close",
                              content=body.model_dump_json(),
                              content_type="application/json", ca_file=ca_file)
    status = wire.SessionStatus.model_validate_json(response.content)
    typer.echo(f"session {session}: uploads closed without {', '.join(status.clients_absent)}; "
               f"{len(status.clients_uploaded)} owners uploaded, "
               f"{len(status.clients_missing)} still to upload; state {status.state}")
