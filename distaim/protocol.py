"""The servers' side of a DistAIM session before AIM starts: the upload vector, agreement on
the set of clients, the share-consistency check and the aggregation of shares.

FLAIM paper, Algorithm 3, lines 4-5: clients secret-share their workload answers, the compute
servers add the shares. Design concern: **no client is summed unless all three servers hold
a consistent share of it**: the servers first agree on the clients every one of them
received (a client missing at any server is excluded as "partial"), then run the
random-linear-combination degree check of ``distaim.sharing`` on each (a failing client is
excluded as "inconsistent"); only the remaining clients' shares are added (locally: Shamir
sharing is linear). Every exclusion is returned with its reason for the session record.
"""

from __future__ import annotations

import hashlib
import itertools
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

import numpy as np

from feddpsyn.distaim import sharing
from feddpsyn.params.layout import MarginalLayout

__all__ = ["Layout", "client_vector", "Admission", "Participation", "Schedule",
           "admit_clients", "aggregate"]

Clique = tuple[int, ...]


# DistAIM's name for the one marginal layout (its callers and tests import it from here).
Layout = MarginalLayout


def client_vector(records: np.ndarray, layout: MarginalLayout) -> np.ndarray:
    """A client's workload answers, concatenated in the layout's order (exact counts)."""
    from feddpsyn.synthesis.graphical_model import marginal_counts
    return np.concatenate([marginal_counts(records, c, layout.domain_sizes)
                           for c in layout.cliques])



@dataclass
class Admission:
    admitted: list[str]
    excluded: dict[str, str] = field(default_factory=dict)
    joint_seed: bytes = b""  # randomness no single server chose (participation sampling)


@dataclass(frozen=True)
class Participation:
    """DistAIM's client participation (FLAIM paper, Algorithm 3, lines 3-5): in each round
    every client joins with probability p; a client's shares count from the first round it
    is sampled on, and stay (the servers aggregate across rounds). Round 0 is the 1-way
    initialisation. The coins come from the servers' joint seed (public to the servers,
    independent of the data), so all three agree; p = 1 is every client from round 0. No
    privacy amplification by subsampling is claimed."""

    joint_seed: bytes
    rate: Fraction
    max_round: int = 100_000

    def arrival(self, client_id: str) -> int | None:
        if self.rate >= 1:
            return 0
        for t in range(self.max_round):
            draw = int.from_bytes(hashlib.shake_256(
                b"feddpsyn/distaim/participation/v1" + self.joint_seed + client_id.encode()
                + t.to_bytes(8, "big")).digest(16), "big")
            if draw * self.rate.denominator < self.rate.numerator << 128:
                return t
        return None

    def joined_by(self, clients: Sequence[str], round_index: int) -> list[str]:
        return [c for c in clients if (a := self.arrival(c)) is not None and a <= round_index]


@dataclass(frozen=True)
class Schedule:
    """Which admitted clients each AIM round reads, given the participation coins.

    ``interleaved``: FLAIM paper, Algorithm 3 as written: AIM round t runs during
    participation round t and reads the clients joined by then (round 0: the 1-way
    initialisation), from ~pK clients in round 0 to ~(1 - (1 - p)^(T+1)) K in round T.
    ``deferred`` (the default): the same participation rounds 0..``window`` happen first --
    the same clients upload in the same rounds -- and AIM runs once they are over, every
    round on the clients joined by round ``window``. A DistAIM client only uploads shares
    and nothing is released before AIM's last round, so waiting changes no client's
    availability and no release's time; it changes only which data each round reads.
    Measured on FLAIM's UMAP split of Adult (``bench/distaim/bench_distaim_flaim.py``): interleaved
    rounds measure subsets that differ from one another and from the union (under
    heterogeneity a client is a region of the domain), and the estimator reconciles the
    subsets' disagreements into the model; deferred, every measurement is of one set, and
    the only gap left is that set's distance from the union.

    ``enrolment_one_ways``: the 1-way initialisation reads every admitted client (1-way
    marginals uploaded at enrolment, a few hundred cells per client), later rounds as the
    schedule says. It assumes every client is reachable once, which FLAIM's setting does not
    (a client never sampled never uploads), so it is off unless asked for.

    Privacy: the client sets depend only on the participation coins (independent of the
    data), and a record takes part in each measurement at most once as in central AIM, so
    the ledger is central AIM's on the data each round reads: no extra measurement is made.
    With rate 1 every round reads every client and no noisy size is taken: central AIM.
    """

    window: int
    mode: Literal["deferred", "interleaved"] = "deferred"
    enrolment_one_ways: bool = False

    def __post_init__(self) -> None:
        if self.mode not in ("deferred", "interleaved"):
            raise ValueError(f"schedule must be 'deferred' or 'interleaved', not {self.mode!r}")
        if self.window < 0:
            raise ValueError("the participation window must be >= 0 rounds")

    def clients_at(self, participation: Participation, clients: Sequence[str],
                   round_index: int | None) -> list[str]:
        """The clients AIM's round ``round_index`` reads (None: every admitted client)."""
        if round_index is None or participation.rate >= 1:
            return list(clients)
        if round_index == 0 and self.enrolment_one_ways:
            return list(clients)
        last = self.window if self.mode == "deferred" else round_index
        return participation.joined_by(clients, last)

    def grows(self, rate: Fraction) -> bool:
        """Whether rounds read different client sets (the engine then rescales by noisy
        sizes, ``synthesis.aim``)."""
        return rate < 1 and (self.mode == "interleaved" or self.enrolment_one_ways)


async def admit_clients(rt, modulus: int, shares: Mapping[str, Sequence[int]]) -> Admission:
    """Agree on the clients whose shares are complete and consistent at all servers.

    ``shares``: this server's share vector of every client it received (x = pid + 1).
    """
    mine = sorted(shares)
    everyone = await rt.transfer(mine)
    common = sorted(set.intersection(*(set(ids) for ids in everyone)))
    union = set(itertools.chain.from_iterable(everyone))
    excluded = {cid: "partial: not received by every server" for cid in sorted(union)
                if cid not in common}
    # a joint seed no server chose alone, fixed only after every upload is in
    contributions = await rt.transfer(secrets.token_bytes(32))
    joint = hashlib.sha256(b"".join(contributions)).digest()
    if len(rt.parties) == 1 or not common:
        return Admission(common, excluded, joint)
    field_type = _field(modulus)
    mask_shares = rt._randoms(field_type, len(common))
    mine_values = []
    for cid, z in zip(common, mask_shares):
        rho = sharing.challenge_vector(joint, cid, modulus, len(shares[cid]))
        mine_values.append(sharing.check_value(shares[cid], rho, z.value % modulus, modulus))
    values = await rt.transfer(mine_values)
    admitted = []
    for i, cid in enumerate(common):
        v1, v2, v3 = (values[pid][i] for pid in range(3))
        if sharing.collinear(v1, v2, v3, modulus):
            admitted.append(cid)
        else:
            excluded[cid] = "inconsistent: shares fail the degree check"
    return Admission(admitted, excluded, joint)


def _field(modulus: int):
    from mpyc import finfields
    return finfields.GF(modulus)


def aggregate(shares: Mapping[str, Sequence[int]], admitted: Sequence[str], modulus: int,
              length: int) -> list[int]:
    """This server's share of the sum over admitted clients (local: sharing is linear)."""
    total = [0] * length
    for cid in admitted:
        vec = shares[cid]
        if len(vec) != length:
            raise ValueError(f"client {cid!r}: share length {len(vec)} != {length}")
        total = [(a + b) for a, b in zip(total, vec)]
    return [t % modulus for t in total]
