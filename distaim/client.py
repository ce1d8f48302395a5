"""A data owner's side of DistAIM: fetch the session from the three servers, count the
workload marginals of its CSV, Shamir-share them (seed-compressed) and upload one share to
each server over HTTP.

Design concern: **the three servers must describe the same session** (layout and field);
the client checks that before sharing anything, so a misconfigured server cannot make it
send shares of the wrong vector. Nothing is uploaded until all three answered.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path

import httpx
import numpy as np

from feddpsyn.distaim import sharing
from feddpsyn.params.layout import MarginalLayout

__all__ = ["session_info", "upload_vector", "upload_csv", "read_token_file"]

Tokens = str | Sequence[str]


def _per_server(token: Tokens) -> list[str]:
    """One token for all three servers, or the three tokens the servers issued (in order)."""
    tokens = [token] * 3 if isinstance(token, str) else list(token)
    if len(tokens) != 3 or not all(tokens):
        raise ValueError("a client needs one token per server (three)")
    return tokens


def read_token_file(path: Path) -> list[str]:
    """A client's token file: its tokens at servers 1, 2, 3, one a line (one line: the same
    token at all three)."""
    lines = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if len(lines) not in (1, 3):
        raise ValueError(f"{path}: one token, or three (one per server, in order)")
    return _per_server(lines[0] if len(lines) == 1 else lines)


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def session_info(http: httpx.Client, servers: list[str], session_id: str,
                 token: Tokens) -> dict:
    """The session as all three servers describe it (refused if they differ, plan digest
    included)."""
    if len(servers) != 3:
        raise ValueError("DistAIM has exactly three servers")
    tokens = _per_server(token)
    infos = []
    for x, (url, tok) in enumerate(zip(servers, tokens), start=1):
        r = http.get(f"{url}/sessions/{session_id}", headers=_headers(tok))
        if r.status_code != 200:
            raise RuntimeError(f"server {url}: {r.status_code} {r.text}")
        info = r.json()
        if info["party"] != x:
            raise RuntimeError(f"server {url} is party {info['party']}, expected {x}")
        infos.append({k: v for k, v in info.items() if k != "party"})
    if any(info != infos[0] for info in infos[1:]):
        raise RuntimeError("the three servers describe different sessions")
    return infos[0]


def upload_vector(http: httpx.Client, servers: list[str], session_id: str, client_id: str,
                  token: Tokens, vector: np.ndarray, modulus: int) -> int:
    """Share ``vector`` and upload the three shares; returns the request bytes sent."""
    seed, (s2, s3) = sharing.share_vector_seeded([int(v) for v in vector], modulus,
                                                 session_id, client_id)
    bodies = [{"seed_hex": seed.hex()},
              {"vector_b64": base64.b64encode(sharing.encode_vector(s2, modulus)).decode()},
              {"vector_b64": base64.b64encode(sharing.encode_vector(s3, modulus)).decode()}]
    sent = 0
    for url, body, tok in zip(servers, bodies, _per_server(token)):
        content = json.dumps(body).encode()
        sent += len(content)
        r = http.put(f"{url}/sessions/{session_id}/clients/{client_id}/share",
                     content=content, headers=_headers(tok))
        if r.status_code != 200:
            raise RuntimeError(f"upload to {url} refused: {r.status_code} {r.text}")
    return sent


def upload_csv(servers: list[str], session_id: str, client_id: str, token: Tokens,
               csv_path: Path, schema_path: Path, timeout: float = 120,
               allow_empty: bool = False) -> tuple[int, int]:
    """(rows, bytes sent) for one data owner's CSV, read in chunks (memory does not grow
    with the file: ``clients.counting.count_csv``, whose count vector in the workload's
    layout is :func:`distaim.protocol.client_vector`'s). A table with no row to count is
    refused before anything is sent unless ``allow_empty``: an all-zero upload is almost
    always a mistaken file, and a session takes one upload per client."""
    from feddpsyn.clients.counting import count_csv
    from feddpsyn.params.schema import Schema
    with httpx.Client(timeout=timeout) as http:
        info = session_info(http, servers, session_id, token)
        layout = MarginalLayout.for_workload(info["domain_sizes"],
                                             [tuple(c) for c in info["workload"]])
        schema = Schema.load(schema_path)
        if tuple(schema.domain_sizes) != layout.domain_sizes or (
                info.get("schema_fingerprint")
                and info["schema_fingerprint"] != schema.fingerprint()):
            raise RuntimeError("the schema differs from the session's")
        vector, tally = count_csv(csv_path, schema, layout)
        if tally.rows_kept == 0 and not allow_empty:
            raise ValueError(f"{csv_path}: no row to count ({tally.summary()}): nothing was "
                             "uploaded; pass --allow-empty to upload an empty table")
        sent = upload_vector(http, servers, session_id, client_id, token, vector,
                             int(info["modulus"]))
    return tally.rows_kept, sent
