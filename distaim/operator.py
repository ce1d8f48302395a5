"""The operator's side of a DistAIM session: create it at the three servers (one plan, one
digest), read its status, start its MPC run, delete it.

Design concern: **the three servers hold the same session or none of it.**
``create_session`` first reads each server's public configuration (``GET /server``: party
number in the given order, MPC address, field, TLS on its MPC channels: the same at all
three), builds one ``SessionRequest``, derives the plan and its digest locally
(``distaim.plan``, the same function the servers run), then creates the session at server 1,
2, 3 in turn, checking each returned digest against its own. If a server refuses (or answers
with another digest, or cannot be reached), the servers where this call created the session
are rolled back (``DELETE``) and the error names the server and its reason. Creation is
idempotent at each server by session id + plan digest, so repeating a request that succeeded
everywhere is harmless (no tokens are shown a second time). Per-client bearer tokens are
returned by each server once; ``CreatedSession.tokens`` holds, for each client, its three
tokens in server order (what a client's token file lists, one a line). ``run_session``
starts the run only if the three servers report the same plan digest and an open intake;
their MPC parties compare digests again before touching any share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from feddpsyn.common import wire
from feddpsyn.distaim.plan import SessionRequest, build_plan

__all__ = ["OperatorError", "CreatedSession", "server_infos", "create_session",
           "session_status", "run_session", "delete_session", "session_results"]


class OperatorError(RuntimeError):
    """A session operation refused or failed; the message says where and why."""


@dataclass
class CreatedSession:
    session_id: str
    plan_digest: str
    plan: dict                        # the plan's mapping, as the servers returned it
    tokens: dict[str, list[str]]      # client -> its bearer token at servers 1, 2, 3
    created: bool                     # false: it existed at all three with this plan


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _detail(r: httpx.Response) -> str:
    return f"{r.status_code} {wire.error_detail(r, 2000)}"[:2000]


def _check_three(servers: Sequence[str], tokens: Sequence[str]) -> None:
    if len(servers) != 3:
        raise OperatorError(f"DistAIM has exactly three servers, {len(servers)} given")
    if len(tokens) != 3:
        raise OperatorError("one operator token per server (or one for all three)")


def server_infos(http: httpx.Client, servers: Sequence[str]) -> list[dict]:
    """Each server's public configuration, checked: party numbers in the given order and one
    field for all three."""
    infos = []
    for x, url in enumerate(servers, start=1):
        try:
            r = http.get(f"{url}/server")
        except httpx.TransportError as exc:
            raise OperatorError(f"server {x} ({url}) unreachable: {exc}") from None
        if r.status_code != 200:
            raise OperatorError(f"server {x} ({url}): {_detail(r)}")
        info = r.json()
        if info["party"] != x:
            raise OperatorError(f"{url} is server {info['party']}, listed as server {x}")
        infos.append(info)
    if len({i["modulus"] for i in infos}) != 1:
        raise OperatorError("the three servers compute in different fields")
    if len({i["mpc_channel_tls"] for i in infos}) != 1:
        raise OperatorError("TLS between the MPC parties is on at server(s) " + str(
            [x for x, i in enumerate(infos, start=1) if i["mpc_channel_tls"]])
            + " only: configure all three alike")
    return infos


def create_session(servers: Sequence[str], operator_tokens: Sequence[str],
                   request: dict, *, timeout: float = 60) -> CreatedSession:
    """Create one session at the three servers (see the module docstring).

    ``request``: the ``SessionRequest`` fields; ``mpc_parties`` defaults to the addresses
    the servers report."""
    _check_three(servers, operator_tokens)
    with httpx.Client(timeout=timeout) as http:
        infos = server_infos(http, servers)
        body = dict(request)
        body.setdefault("mpc_parties", [i["mpc_address"] for i in infos])
        body.setdefault("mpc_channel_tls", infos[0]["mpc_channel_tls"])
        try:
            parsed = SessionRequest.model_validate(body)
            expected = build_plan(parsed, int(infos[0]["modulus"])).digest()
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise OperatorError(f"invalid session request: {exc}") from None
        payload = parsed.model_dump(by_alias=True)
        created_at: list[int] = []
        answers = []
        try:
            for x, (url, token) in enumerate(zip(servers, operator_tokens), start=1):
                try:
                    r = http.post(f"{url}/sessions", json=payload, headers=_auth(token))
                except httpx.TransportError as exc:
                    raise OperatorError(f"server {x} ({url}) unreachable: {exc}") from None
                if r.status_code not in (200, 201):
                    raise OperatorError(f"server {x} ({url}) refused the session: "
                                        f"{_detail(r)}")
                answer = r.json()
                if r.status_code == 201:
                    created_at.append(x)
                if answer["plan_digest"] != expected:
                    raise OperatorError(f"server {x} derived another plan (digest "
                                        f"{answer['plan_digest'][:16]}..., expected "
                                        f"{expected[:16]}...): check its version and field")
                answers.append(answer)
            fresh = [a["created"] for a in answers]
            if any(fresh) and not all(fresh):
                old = [x for x, f in enumerate(fresh, start=1) if not f]
                raise OperatorError(
                    f"session {parsed.session_id!r} already existed at server(s) {old} (its "
                    "client tokens there were shown when it was created); delete it at all "
                    "three ('distaim session delete') or choose another session id")
        except OperatorError as exc:
            rollback = _rollback(http, servers, operator_tokens, parsed.session_id,
                                 created_at)
            raise OperatorError(f"{exc}. {rollback}") from None
    tokens = {c: [a["client_tokens"][c] for a in answers] for c in answers[0]["client_tokens"]}
    return CreatedSession(parsed.session_id, expected, answers[0]["plan"], tokens,
                          created=all(a["created"] for a in answers))


def _rollback(http, servers, operator_tokens, session_id, created_at) -> str:
    if not created_at:
        return "Nothing was created by this call."
    failed = []
    for x in created_at:
        try:
            r = http.delete(f"{servers[x - 1]}/sessions/{session_id}",
                            headers=_auth(operator_tokens[x - 1]))
            if r.status_code != 204:
                failed.append(f"server {x}: {_detail(r)}")
        except httpx.TransportError as exc:
            failed.append(f"server {x}: {exc}")
    if failed:
        return ("Rolling back failed at " + "; ".join(failed)
                + f": delete session {session_id!r} there by hand")
    return f"Rolled back at server(s) {created_at}: no server holds the session."


def session_status(servers: Sequence[str], operator_tokens: Sequence[str], session_id: str,
                   *, timeout: float = 30) -> list[dict]:
    """Each server's status of the session (``state`` "absent" where it has none,
    "unreachable" where it does not answer)."""
    _check_three(servers, operator_tokens)
    out = []
    with httpx.Client(timeout=timeout) as http:
        for x, (url, token) in enumerate(zip(servers, operator_tokens), start=1):
            try:
                r = http.get(f"{url}/sessions/{session_id}/status", headers=_auth(token))
            except httpx.TransportError as exc:
                out.append({"party": x, "state": "unreachable", "detail": str(exc)})
                continue
            if r.status_code == 404:
                out.append({"party": x, "state": "absent", "detail": _detail(r)})
            elif r.status_code != 200:
                raise OperatorError(f"server {x} ({url}): {_detail(r)}")
            else:
                out.append(r.json())
    return out


def run_session(servers: Sequence[str], operator_tokens: Sequence[str], session_id: str,
                *, timeout: float = 30) -> list[dict]:
    """Start the MPC run at the three servers (after checking one plan, open intakes)."""
    statuses = session_status(servers, operator_tokens, session_id, timeout=timeout)
    problems = [f"server {s['party']}: {s['state']}" for s in statuses
                if s["state"] not in ("intake", "running", "done")]
    if problems:
        raise OperatorError("cannot run: " + "; ".join(problems))
    if len({s["plan_digest"] for s in statuses}) != 1:
        raise OperatorError("cannot run: the three servers hold different plans: "
                            + ", ".join(f"server {s['party']} {s['plan_digest'][:16]}"
                                        for s in statuses))
    out = []
    with httpx.Client(timeout=timeout) as http:
        for x, (url, token) in enumerate(zip(servers, operator_tokens), start=1):
            r = http.post(f"{url}/sessions/{session_id}/run", headers=_auth(token))
            if r.status_code != 200:
                raise OperatorError(f"server {x} ({url}) did not start the run: {_detail(r)}")
            out.append(r.json())
    return out


def delete_session(servers: Sequence[str], operator_tokens: Sequence[str], session_id: str,
                   *, timeout: float = 30) -> list[str]:
    """Delete the session wherever it exists; returns one line per server."""
    _check_three(servers, operator_tokens)
    lines = []
    with httpx.Client(timeout=timeout) as http:
        for x, (url, token) in enumerate(zip(servers, operator_tokens), start=1):
            r = http.delete(f"{url}/sessions/{session_id}", headers=_auth(token))
            if r.status_code == 204:
                lines.append(f"server {x}: deleted")
            elif r.status_code == 404:
                lines.append(f"server {x}: absent")
            else:
                raise OperatorError(f"server {x} ({url}) refused: {_detail(r)}")
    return lines


def session_results(servers: Sequence[str], operator_tokens: Sequence[str], session_id: str,
                    *, timeout: float = 60) -> list[dict]:
    """The three servers' results (raises unless all are done)."""
    _check_three(servers, operator_tokens)
    with httpx.Client(timeout=timeout) as http:
        out = []
        for x, (url, token) in enumerate(zip(servers, operator_tokens), start=1):
            r = http.get(f"{url}/sessions/{session_id}/result", headers=_auth(token))
            if r.status_code != 200:
                raise OperatorError(f"server {x} ({url}): {_detail(r)}")
            out.append(r.json())
    return out
