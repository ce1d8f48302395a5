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
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from common import wire
from common.files import write_private
from crypto.masking import SEED_BYTES, expand_masks, mask_counts, new_seed, seed_commitment
from params.layout import MarginalLayout
from params.schema import Schema
from params.table_codec import EncodedTable, InvalidPolicy, encode_csv

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


class ClientAgent:
    def __init__(self, keyserver_url: str, computeserver_url: str, session_id: str,
                 client_id: str, token: str, state_dir: Path, *, attempts: int = 8,
                 timeout: float = 120, verify: bool | str = True):
        self.session_id = session_id
        self.client_id = client_id
        self.state_dir = state_dir
        self.attempts = attempts
        headers = {"Authorization": f"Bearer {token}"}
        self._ks = httpx.Client(base_url=keyserver_url, headers=headers, timeout=timeout,
                                verify=verify)
        self._cs = httpx.Client(base_url=computeserver_url, headers=headers, timeout=timeout,
                                verify=verify)

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
                if attempt == self.attempts:
                    raise AgentError(f"{client.base_url}{url}: unreachable after {attempt} "
                                     f"attempts ({type(exc).__name__})") from None
            else:
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
               public: wire.SessionPublic | None = None) -> tuple[EncodedTable, np.ndarray]:
        """Encode the CSV with the session's schema and compute all of its marginal counts."""
        public = public or self.session()
        schema = Schema.from_dict(public.schema_)
        table = encode_csv(csv_path, schema, on_invalid=on_invalid)
        layout = MarginalLayout.build(schema.domain_sizes, [tuple(p) for p in public.pairs])
        counts = layout.counts(table.records)
        if counts.size != public.total_cells:
            raise AgentError("layout mismatch with the session (different schema version?)")
        return table, counts

    def _seed(self) -> bytes:
        path = self.state_dir / self.session_id / f"{self.client_id}.seed"
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
               progress: Callable[[str], None] = lambda _: None) -> UploadResult:
        started = time.time()
        public = self.session()
        if self.client_id not in public.clients:
            raise AgentError(f"client {self.client_id!r} is not part of session "
                             f"{self.session_id}")
        progress(f"encoding {csv_path}")
        table, counts = self.encode(csv_path, on_invalid, public)
        k = public.parameter_set["count_bits"]
        if counts.max(initial=0) >= 1 << k:
            raise AgentError(f"a count exceeds 2^{k}: the session's parameter set is too small")
        seed = self._seed()
        masks = expand_masks(seed, self.session_id, self.client_id, counts.size, k)
        masked = mask_counts(counts, masks, k)
        progress("uploading seed to the compute server")
        seed_body = wire.SeedUpload(seed_hex=seed.hex()).model_dump_json()
        seed_receipt = wire.UploadReceipt.model_validate_json(self._request(
            self._cs, "PUT", f"/sessions/{self.session_id}/clients/{self.client_id}/seed",
            content=seed_body, headers={"Content-Type": "application/json"}).content)
        progress(f"uploading {counts.size} masked counts to the key server")
        masked_body = wire.MaskedUpload(
            commitment=seed_commitment(seed, self.session_id, self.client_id),
            values=masked.tolist()).model_dump_json()
        masked_receipt = wire.UploadReceipt.model_validate_json(self._request(
            self._ks, "PUT", f"/sessions/{self.session_id}/clients/{self.client_id}/masked",
            content=masked_body, headers={"Content-Type": "application/json"}).content)
        return UploadResult(rows=len(table.records), cells=int(counts.size),
                            seconds=time.time() - started, seed_receipt=seed_receipt,
                            masked_receipt=masked_receipt,
                            bytes_sent=len(seed_body) + len(masked_body))

    def status(self) -> wire.SessionStatus:
        response = self._request(self._ks, "GET", f"/sessions/{self.session_id}/status")
        return wire.SessionStatus.model_validate_json(response.content)

    def compute_status(self) -> wire.SessionStatus:
        """The compute server's view (its detail says how far a long encrypted step is)."""
        response = self._request(self._cs, "GET", f"/sessions/{self.session_id}/status")
        return wire.SessionStatus.model_validate_json(response.content)

    def release(self) -> wire.ReleaseDocument:
        response = self._request(self._ks, "GET", f"/sessions/{self.session_id}/release")
        return wire.ReleaseDocument.model_validate_json(response.content)
