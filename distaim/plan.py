"""A DistAIM session's public plan: what the operator asks for, what every server derives from
it, and the digest the three servers compare before any MPC starts.

Design concern: **the three servers run one plan or none.** The operator sends the same
``SessionRequest`` to each server; each server derives the plan itself (``build_plan``:
schema -> domain, workload -> layout, (epsilon, delta) -> rho with the samplers' delta
reserve, its own field modulus) and stores it with its SHA-256 digest (``plan_digest``, over
canonical JSON). The operator's CLI checks that the three returned digests equal the one it
derived; the servers' MPC parties exchange their digests right after connecting and refuse
to run if they differ (``distaim.party``), so a server configured differently (another
budget, workload, field or peer list) stops the session before any share is touched.

The plan is typed, one model per mode (:class:`FixedRoundsPlan`: FLAIM's T rounds;
:class:`AnnealingPlan`: AIM's own plan), and its mapping (``DistPlanFields.mapping``) is the
JSON the digest, ``session.json`` and the MPC party read: the same keys and values as the
plan dict of earlier versions, so a plan's digest did not change with the types.

Fields added later are left out of the mapping exactly where the plan behaves as a plan
without them did, so **the digest changes when, and only when, the behaviour does**. The
schedule (``distaim.protocol.Schedule``): plans without the key ran FLAIM's interleaved
rounds at participation p < 1, so an absent key reads as interleaved there
(``schedule_of``); the deferred schedule at p < 1 is written out (a new digest for the same
request as before the schedule existed, which now runs differently); at p = 1 the schedule
has no effect and is left out (p = 1 digests unchanged, ``tests/distaim/test_distaim_plan.py``).

Budget: rho = CKS20(epsilon, delta - delta / 1000) (``dp.accounting``, rounded the
conservative way); the reserve delta / 1000 covers the in-MPC samplers' computed
finite-precision deviation (about 1e-12 per session at eps 1): ``build_plan`` refuses a plan
whose least deviation already exceeds it (``distaim.reserve``), and every server checks its
run's against it before reporting.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    StrictBool,
    Tag,
    TypeAdapter,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)

from feddpsyn.common import wire
from feddpsyn.distaim.budget import delta_reserve, session_rho  # re-exported

__all__ = ["PLAN_VERSION", "MAX_CELLS", "MAX_CANDIDATES", "LOCAL_KEYS", "LEGACY_SCHEDULE",
           "schedule_of", "SessionRequest",
           "DistPlanFields", "FixedRoundsPlan", "AnnealingPlan", "DistPlan", "build_plan",
           "parse_plan", "derive_plan", "plan_digest", "session_rho", "delta_reserve",
           "parse_workload"]

PLAN_VERSION = "feddpsyn/distaim/plan/v1"
# A share vector must fit the intake's 64 MiB body limit as base64 (16 bytes per cell).
MAX_CELLS = 4_000_000
MAX_CANDIDATES = 511       # distaim.secure_selection.SelectionPlan's table
# a client's rows: the validation's masks need k + 67 bits of the 96-bit field, and 1000
# clients' counts times 2^8 stay inside the scores' 63-bit comparisons
MAX_ROWS_BOUND = 1 << 24
# Keys of a server's session.json that are its own, not part of the shared plan.
LOCAL_KEYS = frozenset({"pid", "mpc_tls", "plan_digest"})
# host:port, the port in 1..65535
MPC_ADDRESS_PATTERN = (r"^[A-Za-z0-9_.:-]{1,253}:(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}"
                       r"|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])$")
_Iterations = Annotated[int, Field(ge=1, le=100_000), BeforeValidator(wire.json_number)]
# A rate in (0, 1]: 1, a decimal below 1, or p/q (above 1, or 0: refused with the plan, 409).
PARTICIPATION_PATTERN = (r"^(?:1|0?\.[0-9]{0,5}[1-9][0-9]{0,5}"
                         r"|[0-9]{1,6}/0{0,5}[1-9][0-9]{0,5})$")


class SessionRequest(wire.StrictModel):
    """The operator's request to create a DistAIM session (the same at all three servers)."""

    session_id: str = Field(pattern=wire.ID_PATTERN)
    schema_: wire.TableSchema = Field(alias="schema")
    clients: wire.ClientList
    epsilon: wire.Number = Field(gt=0, le=100)
    delta: wire.Number = Field(gt=0, lt=1)
    workload: list[Annotated[list[wire.Index],
                             Field(min_length=1, max_length=3)]] | None = Field(
        default=None, max_length=10_000,
        description="marginals (1 to 3 distinct attribute indices of the schema, each "
                    "marginal once) AIM is asked to answer; default all 2-way")
    rounds: Annotated[int, Field(ge=1, le=1000), BeforeValidator(wire.json_number)] | None = Field(
        default=10, description=(
        "planned AIM rounds (FLAIM's T); null: AIM's own plan (16d) with annealing"))
    max_rounds: wire.Count = Field(default=1000, ge=1, le=10_000)
    participation: str = Field(default="1", pattern=PARTICIPATION_PATTERN,
                               description="client sampling rate p per round, in (0, 1]")
    rows_bound: wire.Count = Field(default=1 << 20, ge=1, le=MAX_ROWS_BOUND,
                                   description=("public upper bound on any one client's rows "
                                                "(checked inside MPC, distaim.validation)"))
    schedule: Literal["deferred", "interleaved"] = Field(default="deferred", description=(
        "with participation < 1, which clients AIM's rounds read (distaim.protocol.Schedule): "
        "deferred, those joined by the last participation round; interleaved, FLAIM's "
        "Algorithm 3 as written, those joined by the current round"))
    enrolment_one_ways: bool = Field(default=False, description=(
        "the 1-way initialisation reads every admitted client (assumes every client "
        "reachable once, which FLAIM's setting does not)"))
    mpc_parties: Annotated[list[str], WithJsonSchema(
        {"type": "array", "minItems": 3, "maxItems": 3, "uniqueItems": True,
         "items": {"type": "string", "pattern": MPC_ADDRESS_PATTERN}})] = Field(
        description="host:port of the three MPC parties, in order (this server's its own: "
                    "409 otherwise)")
    score_grid_bits: wire.Count = Field(default=0, ge=0, le=8, description=(
        "fractional bits g of the model answers in AIM's secure scores; each bit costs one "
        "more bit in every secure |x|; g = 0 selects 1.35x faster at the same error "
        "(experiments/distaim_mpc/bench_distaim_speedup.py)"))
    mpc_channel_tls: StrictBool = Field(default=False, description=(
        "the servers' MPC channels use mutual TLS (each server must be configured so: 409 "
        "otherwise)"))
    round_iters: _Iterations | None = Field(default=None, description=(
        "cap on the estimator's iterations per round (default: the engine's, "
        "synthesis.aim: 100 in AIM's annealing mode, until converged with fixed rounds)"))
    final_iters: _Iterations | None = Field(default=None, description=(
        "cap on the estimator's iterations after the last round (default: until converged)"))
    mpc_timeout: wire.Number = Field(default=120, gt=0, le=3600)
    mpc_deadline: wire.Number = Field(default=3600, gt=0, le=7 * 86400)

    model_config = wire.StrictModel.model_config | {"populate_by_name": True}

    @field_validator("clients")
    @classmethod
    def _clients_unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("client ids must be unique")
        return v

    @field_validator("schema_")
    @classmethod
    def _schema_shape(cls, v: dict[str, Any]) -> dict[str, Any]:
        return wire.table_schema_shape(v)

    @field_validator("mpc_parties")
    @classmethod
    def _addresses_valid(cls, v: list[str]) -> list[str]:
        for a in v:
            if not re.match(MPC_ADDRESS_PATTERN, a):
                raise ValueError(f"MPC party address must be host:port, not {a!r}")
        if len(v) != 3 or len(set(v)) != 3:
            raise ValueError("three MPC party addresses, all different")
        return v

    @field_validator("participation")
    @classmethod
    def _rate_exact(cls, v: str) -> str:
        # the plan (and its digest) holds the rate as an exact rational; its range is the
        # plan's to check (build_plan)
        return str(Fraction(v))


def parse_workload(text: str, names: list[str]) -> list[list[int]] | None:
    """``all-2way`` (None: the server's default), ``all-3way``, or ``a,b,c;d,e`` (attribute
    names or indices, one marginal per ``;``)."""
    text = text.strip()
    d = len(names)
    if text == "all-2way":
        return None
    if text == "all-3way":
        return [list(c) for c in itertools.combinations(range(d), 3)]
    out = []
    for item in text.split(";"):
        clique = []
        for token in item.split(","):
            token = token.strip()
            if token.isdigit():
                clique.append(int(token))
            elif token in names:
                clique.append(names.index(token))
            else:
                raise ValueError(f"workload: no attribute {token!r} in the schema")
        out.append(clique)
    return out


def _normalise_workload(workload: list[list[int]] | None, d: int) -> list[list[int]]:
    if workload is None:
        return [[i, j] for i, j in itertools.combinations(range(d), 2)]
    cliques = []
    for c in workload:
        if not 1 <= len(c) <= 3:
            raise ValueError(f"workload marginal {c}: 1 to 3 attributes")
        if len(set(c)) != len(c) or not all(0 <= a < d for a in c):
            raise ValueError(f"workload marginal {c}: distinct attribute indices in [0, {d})")
        cliques.append(sorted(c))
    unique = sorted({tuple(c) for c in cliques})
    if len(unique) != len(cliques):
        raise ValueError("workload lists a marginal twice")
    return [list(c) for c in unique]


# plan fields added after v1, left out of the mapping at these defaults (digests unchanged)
_OMITTED_AT_DEFAULT = {"enrolment_one_ways": False}
# What a plan whose mapping has no "schedule" key runs: plans written before the schedule was
# a plan field ran FLAIM's interleaved rounds whenever participation was below 1. At rate 1
# every schedule reads every client in every round (central AIM), and the plan records none.
LEGACY_SCHEDULE = "interleaved"


def _sampled(participation: Any) -> bool:
    try:
        return Fraction(str(participation)) < 1
    except (ValueError, ZeroDivisionError):
        return False  # the field's own validation reports it


def schedule_of(plan: Any) -> str:
    """The schedule a plan runs, from its mapping (``session.json``, an intake's answer) or
    the typed plan: the ``schedule`` key if present, else ``LEGACY_SCHEDULE`` when
    participation is below 1 (the plan predates the key) and ``deferred`` at rate 1 (moot)."""
    if not isinstance(plan, dict):
        return plan.schedule
    if "schedule" in plan:
        return plan["schedule"]
    return LEGACY_SCHEDULE if _sampled(plan.get("participation", "1")) else "deferred"


class DistPlanFields(wire.DocumentModel):
    """What every server derives from the operator's request, whatever the mode; reads as
    its JSON reads (``plan["cells"]``). The order of the fields is the order of
    ``session.json``'s keys."""

    version: Literal[PLAN_VERSION]
    session_id: str
    schema_: dict[str, Any] = Field(alias="schema")
    schema_fingerprint: str = ""
    domain_sizes: list[int]
    workload: list[list[int]] = Field(description="the workload's marginals, sorted")
    cells: int = Field(description="a client's upload: the workload's completion, in cells")
    clients: list[str] = Field(description="sorted")
    epsilon: float
    delta: float
    delta_reserve: str = Field(description="exact rational: delta kept for the samplers")
    rho: str = Field(description="zCDP budget, exact rational")
    rounds: int | None
    max_rounds: int
    score_grid_bits: int
    round_iters: int | None
    final_iters: int | None
    participation: str = Field(description="client sampling rate per round, exact rational")
    rows_bound: int
    schedule: Literal["deferred", "interleaved"] = "deferred"
    enrolment_one_ways: bool = False
    modulus: int = Field(description="the prime of the servers' field")
    mpc_parties: list[tuple[str, int]] = Field(description="(host, port) of the three parties")
    mpc_channel_tls: bool
    mpc_timeout: float = 120.0
    mpc_deadline: float = 3600.0

    model_config = wire.DocumentModel.model_config | {"populate_by_name": True}

    @model_validator(mode="before")
    @classmethod
    def _schedule_as_run(cls, data: Any) -> Any:
        """A mapping without ``schedule`` is read as the schedule it ran (``schedule_of``);
        at rate 1 the schedule is moot and recorded as deferred."""
        if isinstance(data, dict) and "participation" in data:
            if not _sampled(data["participation"]):
                data = {**data, "schedule": "deferred"}
            elif "schedule" not in data:
                data = {**data, "schedule": LEGACY_SCHEDULE}
        return data

    def mapping(self) -> dict[str, Any]:
        """The plan as JSON values: what ``session.json`` holds and ``plan_digest`` reads.
        Fields added after v1 are left out where the plan behaves as a plan without them did
        (``_omit_new_defaults``), so such a plan keeps the digest it had, and a plan whose
        behaviour changed gets a new one: the schedule is left out at rate 1 (no effect) and
        when it is the one plans without the key ran (``LEGACY_SCHEDULE`` at p < 1), so a
        deferred plan at p < 1 names its schedule."""
        return self.model_dump(mode="json", by_alias=True)

    @model_serializer(mode="wrap")
    def _omit_new_defaults(self, handler):
        out = handler(self)
        for key, default in _OMITTED_AT_DEFAULT.items():
            if key in out and out[key] == default:
                del out[key]
        if "schedule" in out and schedule_of({k: v for k, v in out.items()
                                              if k != "schedule"}) == out["schedule"]:
            del out["schedule"]
        return out

    def digest(self) -> str:
        return plan_digest(self.mapping())


class FixedRoundsPlan(DistPlanFields):
    """FLAIM's fixed-T plan: exactly ``rounds`` selections, no annealing."""

    rounds: int = Field(ge=1)
    max_rounds: int = Field(ge=1, description="equal to rounds")

    @model_validator(mode="after")
    def _cap_is_rounds(self) -> FixedRoundsPlan:
        if self.max_rounds != self.rounds:
            raise ValueError("a fixed-rounds plan runs exactly its rounds (max_rounds = rounds)")
        return self


class AnnealingPlan(DistPlanFields):
    """AIM's own plan (T = 16 d, annealing): the budget decides the rounds, at most
    ``max_rounds``."""

    rounds: None = None
    max_rounds: int = Field(ge=1)


def _mode(plan: Any) -> str:
    rounds = plan.get("rounds") if isinstance(plan, dict) else getattr(plan, "rounds", None)
    return "annealing" if rounds is None else "fixed-rounds"


DistPlan = Annotated[Annotated[FixedRoundsPlan, Tag("fixed-rounds")]
                     | Annotated[AnnealingPlan, Tag("annealing")],
                     Discriminator(_mode)]
_PLAN = TypeAdapter(DistPlan)


def parse_plan(mapping: dict[str, Any]) -> FixedRoundsPlan | AnnealingPlan:
    """The typed plan of a plan mapping (a server's own keys, ``LOCAL_KEYS``, left out)."""
    return _PLAN.validate_python({k: v for k, v in mapping.items() if k not in LOCAL_KEYS})


def build_plan(request: SessionRequest, modulus: int) -> FixedRoundsPlan | AnnealingPlan:
    """The public plan a server derives from the operator's request (raises ValueError with
    a message for the operator on anything it cannot run, ``distaim.reserve.ReserveExceeded``
    with its remedy where no run of the plan meets its delta reserve)."""
    from feddpsyn.distaim.reserve import check_plan
    from feddpsyn.params.layout import MarginalLayout
    from feddpsyn.params.schema import Schema, SchemaError
    try:
        schema = Schema.from_dict(request.schema_)
    except (SchemaError, ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"schema: {exc}") from None
    if not 0 < Fraction(request.participation) <= 1:
        raise ValueError(f"participation must be in (0, 1], not {request.participation}")
    sizes = [int(s) for s in schema.domain_sizes]
    workload = _normalise_workload(request.workload, len(sizes))
    if not workload:
        raise ValueError("the workload is empty")
    layout = MarginalLayout.for_workload(sizes, [tuple(c) for c in workload])
    if len(layout.cliques) > MAX_CANDIDATES:
        raise ValueError(f"the workload's completion has {len(layout.cliques)} marginals; the "
                         f"in-MPC exponential mechanism takes at most {MAX_CANDIDATES}")
    if layout.length > MAX_CELLS:
        raise ValueError(f"the workload's completion has {layout.length} cells; at most "
                         f"{MAX_CELLS} fit one upload")
    rho = session_rho(request.epsilon, request.delta)
    parties = []
    for a in request.mpc_parties:
        host, _, port = a.rpartition(":")
        parties.append((host, int(port)))
    common = dict(
        version=PLAN_VERSION, session_id=request.session_id, schema=schema.to_dict(),
        schema_fingerprint=schema.fingerprint(), domain_sizes=sizes, workload=workload,
        cells=layout.length, clients=sorted(request.clients),
        epsilon=request.epsilon, delta=request.delta,
        delta_reserve=str(delta_reserve(request.delta)), rho=str(rho),
        score_grid_bits=request.score_grid_bits, round_iters=request.round_iters,
        final_iters=request.final_iters, participation=request.participation,
        rows_bound=request.rows_bound, schedule=request.schedule,
        enrolment_one_ways=request.enrolment_one_ways, modulus=modulus, mpc_parties=parties,
        mpc_channel_tls=request.mpc_channel_tls,
        # float fields: a default the validator never saw (int 120) digests as the value a
        # server parses from JSON (float 120.0)
        mpc_timeout=request.mpc_timeout, mpc_deadline=request.mpc_deadline)
    if request.rounds is None:
        plan = AnnealingPlan(rounds=None, max_rounds=request.max_rounds, **common)
    else:
        plan = FixedRoundsPlan(rounds=request.rounds, max_rounds=request.rounds, **common)
    check_plan(plan)  # a plan no run of which meets its reserve is refused here, not after
    return plan


def derive_plan(request: SessionRequest, modulus: int) -> dict[str, Any]:
    """The plan's mapping (``build_plan(...).mapping()``): what ``session.json`` holds."""
    return build_plan(request, modulus).mapping()


def plan_digest(session: dict[str, Any]) -> str:
    """SHA-256 over the canonical JSON of a session's shared keys (a server's own keys,
    ``LOCAL_KEYS``, left out)."""
    shared = {k: v for k, v in session.items() if k not in LOCAL_KEYS}
    canonical = json.dumps(shared, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(PLAN_VERSION.encode() + b"\0" + canonical.encode()).hexdigest()
