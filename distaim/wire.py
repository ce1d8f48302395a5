"""The REST bodies of a DistAIM server's intake (``distaim.app``), shared by the server, the
client (``distaim.client``) and the operator (``distaim.operator``): each server's OpenAPI
document is the contract."""

from __future__ import annotations

from pydantic import Field

from feddpsyn.common import wire
from feddpsyn.distaim.plan import DistPlan

__all__ = ["MAX_BODY_BYTES", "ShareUpload", "SeedShare", "VectorShare", "ServerInfo",
           "DistSessionCreated", "DistSessionInfo", "DistStatus"]

MAX_BODY_BYTES = 64 * 1024 * 1024
# Standard base64, padded.
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


class ShareUpload(wire.StrictModel):
    """A client's share for this server: the 32-byte seed (server 1) or the share vector
    (servers 2 and 3, fixed-width little-endian field elements, base64). Each server's
    document declares the one it takes (:class:`SeedShare`, :class:`VectorShare`)."""

    seed_hex: str | None = Field(default=None, pattern=wire.SHA256_HEX_PATTERN)
    vector_b64: str | None = Field(default=None, max_length=MAX_BODY_BYTES,
                                   pattern=BASE64_PATTERN)


class SeedShare(wire.StrictModel):
    """What server 1 takes: the client's 32-byte seed, from which it derives its share."""

    seed_hex: str = Field(pattern=wire.SHA256_HEX_PATTERN)
    vector_b64: None = None


class VectorShare(wire.StrictModel):
    """What servers 2 and 3 take: the share vector, base64 of fixed-width little-endian
    elements of the session's field, one per cell of its plan (``cells`` and ``modulus`` of
    ``GET /sessions/{session_id}``; another length or an element outside the field: 409)."""

    seed_hex: None = None
    vector_b64: str = Field(max_length=MAX_BODY_BYTES, pattern=BASE64_PATTERN)


class ServerInfo(wire.StrictModel):
    """A server's public configuration (what the operator's CLI checks before creating)."""

    role: str
    party: int = Field(description="this server's x-coordinate (1, 2 or 3)")
    mpc_address: str = Field(description="host:port this server's MPC party listens on")
    modulus: str = Field(description="the prime of the servers' field, decimal")
    mpc_channel_tls: bool = Field(description="its MPC channels use mutual TLS")
    plan_version: str


class DistSessionCreated(wire.StrictModel):
    session_id: str
    party: int
    created: bool = Field(description="false: this session already existed with this plan")
    plan_digest: str
    plan: DistPlan
    client_tokens: dict[str, str] = Field(
        description="one bearer token per client for this server, shown once (empty when "
                    "created is false); the server keeps only hashes")


class DistSessionInfo(wire.StrictModel):
    """What a client needs to share its counts: the layout and the field."""

    session_id: str
    party: int = Field(description="this server's x-coordinate (1, 2 or 3)")
    domain_sizes: list[int]
    workload: list[list[int]]
    modulus: str = Field(description="the prime of the servers' field, decimal")
    cells: int
    plan_digest: str
    schema_fingerprint: str = ""


class DistStatus(wire.StrictModel):
    session_id: str
    party: int
    state: str = Field(description="intake, running, done or failed")
    plan_digest: str
    clients_uploaded: list[str]
    clients_missing: list[str]
    detail: str = ""
