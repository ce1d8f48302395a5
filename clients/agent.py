"""The client agent: a data owner's CSV -> counts -> masked upload to both servers.

Design concerns:

* **The client never holds a key that decrypts anything**: it only draws a random seed,
  expands it to masks, and sends the seed to the compute server and the masked counts to the
  key server.
* **Uploads are idempotent and resumable.** The seed is saved (mode 0600) under the agent's
  state directory before anything is sent, so a retry after any failure re-sends exactly the
  same seed and masked vector, which both servers recognise as already stored. Transient
  failures (connection errors, 5xx) are retried a bounded number of times with backoff;
  4xx errors are reported at once with the server's message.
* **The table is read in bounded memory** (``clients.counting``): a line at a time, counted
  in chunks of rows, with the codec's one-line errors; a 1 GB CSV needs a few hundred MB.
* **Nothing empty by mistake.** A table with no row to count (a header only, or every row
  dropped) is refused before anything is sent; an owner who truly holds no records for the
  session uploads its zero counts on purpose (``allow_empty``), since the session waits for
  every owner's upload.
* **One seed, one count vector.** The key server sees every masked vector sent to it, also
  one it refuses: two count vectors under the same masks would show it their difference (a
  header-only upload is the masks themselves). The digest of the masked upload sent with the
  saved seed is saved beside it before anything is sent, and a different table under that
  seed is refused here, before any request.
* **A mistaken upload can be replaced** (``replace``) until the compute server starts on
  the session's uploads: with a fresh seed (drawn and saved aside first, kept only once the
  compute server took it), sent to the compute server, then the new masked vector to the key
  server, both with ``replace=true`` (``keyserver.uploads``).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from feddpsyn.clients.counting import count_csv
from feddpsyn.clients.odometer import Odometer, OdometerRefusal
from feddpsyn.common import wire
from feddpsyn.common.files import write_private
from feddpsyn.common.tls import UNTRUSTED, certificate_refused
from feddpsyn.common.version import VERSION, VERSION_HEADER, VersionMismatch, check_answer
from feddpsyn.crypto.masking import SEED_BYTES, expand_masks, mask_counts, new_seed, seed_commitment
from feddpsyn.params.layout import MarginalLayout
from feddpsyn.params.schema import Schema
from feddpsyn.params.table_codec import EncodingTally, InvalidPolicy

__all__ = ["AgentError", "ClientAgent", "UploadResult"]


class AgentError(RuntimeError):
    """Something the data owner must act on; the message says what."""


@dataclass
class UploadResult:
    rows: int
    cells: int
    seconds: float
    seed_receipt: wire.UploadReceipt
    masked_receipt: wire.UploadReceipt
    bytes_sent: int
    replaced: bool = False  # a stored upload was replaced by this one


class ClientAgent:
    def __init__(self, keyserver_url: str, computeserver_url: str, session_id: str,
                 client_id: str, token: str, state_dir: Path, *, attempts: int = 8,
                 timeout: float = 120, verify: bool | str = True):
        self.session_id = session_id
        self.client_id = client_id
        self.state_dir = state_dir
        self.attempts = attempts
        # Each request names this agent's version; a server of a version that does not meet
        # it is refused on its first answer (``common.version``), before any count is sent.
        headers = {"Authorization": f"Bearer {token}", VERSION_HEADER: VERSION}
        self._ks = httpx.Client(base_url=keyserver_url, headers=headers, timeout=timeout,
                                verify=verify)
        self._cs = httpx.Client(base_url=computeserver_url, headers=headers, timeout=timeout,
                                verify=verify)
        self._peers = {id(self._ks): "key server", id(self._cs): "compute server"}

    def close(self) -> None:
        self._ks.close()
        self._cs.close()

    def __enter__(self) -> ClientAgent:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _request(self, client: httpx.Client, method: str, url: str, **kw) -> httpx.Response:
        delay = 0.25
        for attempt in range(1, self.attempts + 1):
            try:
                response = client.request(method, url, **kw)
            except httpx.TransportError as exc:
                if certificate_refused(exc):  # a retry cannot change a certificate
                    raise AgentError(f"{client.base_url}: {UNTRUSTED}") from None
                if attempt == self.attempts:
                    raise AgentError(f"{client.base_url}{url}: unreachable after {attempt} "
                                     f"attempts ({type(exc).__name__})") from None
            else:
                try:
                    check_answer(response.headers, self._peers.get(id(client), "server"),
                                 VERSION)
                except VersionMismatch as exc:
                    raise AgentError(str(exc)) from None
                if response.status_code < 500:
                    if response.status_code >= 400:
                        raise AgentError(f"{method} {url}: {response.status_code} "
                                         f"{wire.error_detail(response)}")
                    return response
                if attempt == self.attempts:
                    raise AgentError(f"{method} {url}: server error {response.status_code} "
                                     f"{wire.error_detail(response)}")
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    def session(self) -> wire.SessionPublic:
        response = self._request(self._ks, "GET", f"/sessions/{self.session_id}")
        return wire.SessionPublic.model_validate_json(response.content)

    def encode(self, csv_path: Path, on_invalid: InvalidPolicy = "error",
               public: wire.SessionPublic | None = None) -> tuple[EncodingTally, np.ndarray]:
        """All of the CSV's marginal counts in the session's layout, read in bounded memory,
        and what the encoding read, kept, dropped and clamped."""
        public = public or self.session()
        schema = Schema.from_dict(public.schema_)
        layout = MarginalLayout.build(schema.domain_sizes, [tuple(p) for p in public.pairs])
        if layout.total_cells != public.total_cells:
            raise AgentError("layout mismatch with the session (different schema version?)")
        counts, tally = count_csv(csv_path, schema, layout, on_invalid=on_invalid)
        return tally, counts

    def _seed_path(self) -> Path:
        return self.state_dir / self.session_id / f"{self.client_id}.seed"

    def _seed(self) -> bytes:
        path = self._seed_path()
        if path.exists():
            seed = path.read_bytes()
            if len(seed) != SEED_BYTES:
                raise AgentError(f"{path}: corrupt seed file; remove it only if nothing was "
                                 "uploaded yet")
            return seed
        seed = new_seed()
        write_private(path, seed)
        return seed

    def upload(self, csv_path: Path, on_invalid: InvalidPolicy = "error",
               progress: Callable[[str], None] = lambda _: None, *,
               allow_empty: bool = False, replace: bool = False,
               odometer: Odometer | None = None) -> UploadResult:
        """Encode, count, mask and send this owner's table (module docstring); ``replace``
        replaces an upload already stored, ``allow_empty`` sends zero counts on purpose.
        ``odometer``: the table's lifetime budget (``clients.odometer``), checked and written
        before anything is sent."""
        started = time.time()
        public = self.session()
        if self.client_id not in public.clients:
            raise AgentError(f"client {self.client_id!r} is not part of session "
                             f"{self.session_id}")
        if odometer is not None:
            try:
                spend = odometer.admit(public, str(self._ks.base_url))
            except OdometerRefusal as exc:
                raise AgentError(str(exc)) from None
            if spend is not None:
                progress(f"lifetime budget of table {odometer.table!r}: eps "
                         f"{spend.epsilon:.4f} of {spend.cap_epsilon:g} at delta "
                         f"{spend.delta:g} with this session ({spend.sessions} sessions)")
        progress(f"encoding {csv_path}")
        tally, counts = self.encode(csv_path, on_invalid, public)
        if tally.rows_kept == 0 and not allow_empty:
            raise AgentError(_empty_message(csv_path, tally))
        k = public.parameter_set["count_bits"]
        if counts.max(initial=0) >= 1 << k:
            raise AgentError(f"a count exceeds 2^{k}: the session's parameter set is too small")
        query = {"replace": "true"} if replace else {}
        seed_url = f"/sessions/{self.session_id}/clients/{self.client_id}/seed"
        if replace and self._seed_path().exists():
            seed, seed_receipt = self._replace_seed(seed_url, progress)
            masked_body = self._masked_body(seed, counts, k)
            write_private(self._sent_path(), _digest(masked_body))
        else:
            seed = self._seed()
            masked_body = self._masked_body(seed, counts, k)
            self._check_same_upload(masked_body, csv_path)
            write_private(self._sent_path(), _digest(masked_body))
            progress("uploading seed to the compute server")
            seed_receipt = self._put(self._cs, seed_url, _seed_body(seed), query)
        progress(f"uploading {counts.size} masked counts to the key server")
        masked_receipt = self._put(
            self._ks, f"/sessions/{self.session_id}/clients/{self.client_id}/masked",
            masked_body, query)
        return UploadResult(rows=tally.rows_kept, cells=int(counts.size),
                            seconds=time.time() - started, seed_receipt=seed_receipt,
                            masked_receipt=masked_receipt,
                            bytes_sent=len(_seed_body(seed)) + len(masked_body),
                            replaced=replace and masked_receipt.stored)

    def _masked_body(self, seed: bytes, counts: np.ndarray, k: int) -> str:
        masks = expand_masks(seed, self.session_id, self.client_id, counts.size, k)
        return wire.MaskedUpload(
            commitment=seed_commitment(seed, self.session_id, self.client_id),
            values=mask_counts(counts, masks, k).tolist()).model_dump_json()

    def _sent_path(self) -> Path:
        """The digest of the masked upload last sent with the saved seed."""
        return self._seed_path().with_name(f"{self.client_id}.sent")

    def _check_same_upload(self, masked_body: str, csv_path: Path) -> None:
        """Refuse, before anything is sent, another count vector under a seed already used:
        the key server, refusing it, would still have seen both, and their difference is the
        difference of the two tables."""
        path = self._sent_path()
        if path.exists() and path.read_bytes() != _digest(masked_body):
            raise AgentError(
                f"{csv_path}: this owner already sent a different table to session "
                f"{self.session_id} under the seed saved in {self._seed_path()}; sending "
                "another under the same seed would show the key server the difference of "
                "the two. Nothing was sent. To replace the upload, run again with --replace "
                "(a fresh seed)")

    def _put(self, client: httpx.Client, url: str, body: str, params: dict[str, str]
             ) -> wire.UploadReceipt:
        response = self._request(client, "PUT", url, content=body, params=params,
                                 headers={"Content-Type": "application/json"})
        return wire.UploadReceipt.model_validate_json(response.content)

    def _replace_seed(self, url: str, progress: Callable[[str], None]
                      ) -> tuple[bytes, wire.UploadReceipt]:
        """A fresh seed in the place of the saved one: saved aside, sent with replace=true,
        and kept as this client's seed only once the compute server took it (a refusal
        leaves the saved seed, which the servers still hold, as it was)."""
        path = self._seed_path()
        pending = path.with_name(path.name + ".new")
        seed = new_seed()
        write_private(pending, seed)
        progress("replacing the seed at the compute server")
        try:
            receipt = self._put(self._cs, url, _seed_body(seed), {"replace": "true"})
        except AgentError:
            pending.unlink(missing_ok=True)
            raise
        os.replace(pending, path)
        return seed, receipt

    def status(self) -> wire.SessionStatus:
        response = self._request(self._ks, "GET", f"/sessions/{self.session_id}/status")
        return wire.SessionStatus.model_validate_json(response.content)

    def compute_status(self) -> wire.SessionStatus:
        """The compute server's view (its detail says how far a long encrypted step is)."""
        response = self._request(self._cs, "GET", f"/sessions/{self.session_id}/status")
        return wire.SessionStatus.model_validate_json(response.content)

    def release(self, wait: float = 0) -> wire.ReleaseDocument:
        """The session's release document; with ``wait`` > 0, polled until the session is
        released or ``wait`` seconds have passed."""
        deadline = time.monotonic() + wait
        while True:  # bounded by the deadline
            if wait <= 0 or self.status().state == "released":
                response = self._request(self._ks, "GET",
                                         f"/sessions/{self.session_id}/release")
                return wire.ReleaseDocument.model_validate_json(response.content)
            if time.monotonic() >= deadline:
                raise AgentError(f"session {self.session_id} is not released after {wait:g} s "
                                 f"(state: {self.status().state})")
            time.sleep(min(2.0, max(0.1, deadline - time.monotonic())))


def _digest(body: str) -> bytes:
    return hashlib.sha256(body.encode()).hexdigest().encode()


def _seed_body(seed: bytes) -> str:
    return wire.SeedUpload(seed_hex=seed.hex()).model_dump_json()


def _empty_message(csv_path: Path, tally: EncodingTally) -> str:
    what = ("has a header and no data rows" if tally.rows_read == 0
            else f"has no row left to count ({tally.summary()})")
    return (f"{csv_path}: {what}: nothing to upload, and zero counts sent by mistake would "
            "hold the session's place for this owner's table. Check the file; if this owner "
            "really holds no records for the session, upload on purpose with --allow-empty "
            "(its counts are all zero; the session waits for every owner's upload)")
