"""Typed REST bodies shared by the client agent, the key server and the compute server.

Every request and response body crossing a process boundary is one of these pydantic models,
so each server's OpenAPI document is the contract, and both ends import the same definition.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    field_validator,
)

from feddpsyn.common.ids import ID_PATTERN as ID_PATTERN  # the servers' path parameters

SHA256_HEX_PATTERN = r"^[0-9a-f]{64}$"

# A client id in a body: the path's pattern (ClientId).
ClientIdText = Annotated[str, Field(pattern=ID_PATTERN)]


def json_number(value: Any) -> Any:
    """``value`` unless it is text or a boolean (which pydantic would read as a number)."""
    # pydantic would read "3" or true as a number; JSON Schema's number is neither
    if isinstance(value, (str, bool)):
        raise ValueError("a JSON number is required")
    return value


# Numbers of a request body: a JSON number, never text or a boolean that pydantic would
# coerce (each a schema violation, as documented); a count may be written 3 or 3.0.
Count = Annotated[int, BeforeValidator(json_number)]
Number = Annotated[float, BeforeValidator(json_number)]
# Where a bound sits inside a union or a list, it goes before the validator: pydantic
# documents a bound after it as an unknown keyword ("ge") rather than "minimum".
Index = Annotated[int, Field(ge=0), BeforeValidator(json_number)]


def json_numbers(values: Any) -> Any:
    # one pass over a long list (a masked vector), rather than a call per element
    if isinstance(values, list) and any(isinstance(v, (str, bool)) for v in values):
        raise ValueError("JSON numbers are required")
    return values
# The key server's parameter sets (params.parameter_sets.PARAMETER_SETS; the fuzz test checks
# that the two lists agree) and its selection parameter sets (SELECTION_SETS).
ParameterSetName = Literal["default", "test-small"]
SelectionSetName = Literal["precise", "lean"]
# The largest count_bits of a parameter set: a masked value is below 2^count_bits of the
# session's set, which the session's public record states (409 above it).
MAX_COUNT_BITS = 20

# Path parameters: ids are checked before any lookup, so no odd byte reaches a URL or a file.
# Only the servers' routes use them, and they need the web framework: they are built on
# first use (module __getattr__ below), so the client agent, which imports this module for
# its bodies, runs without fastapi installed.
if TYPE_CHECKING:
    from fastapi import Path as PathParam

    SessionId = Annotated[str, PathParam(pattern=ID_PATTERN)]
    ClientId = Annotated[str, PathParam(pattern=ID_PATTERN)]
    ReleaseName = Annotated[str, PathParam(pattern=ID_PATTERN)]
    RoundIndex = Annotated[int, PathParam(ge=0, le=100_000)]

_PATH_PARAMETERS = ("SessionId", "ClientId", "ReleaseName", "RoundIndex")


def __getattr__(name: str) -> Any:
    if name not in _PATH_PARAMETERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from fastapi import Path as PathParam

    built = {"SessionId": Annotated[str, PathParam(pattern=ID_PATTERN)],
             "ClientId": Annotated[str, PathParam(pattern=ID_PATTERN)],
             "ReleaseName": Annotated[str, PathParam(pattern=ID_PATTERN)],
             "RoundIndex": Annotated[int, PathParam(ge=0, le=100_000)]}
    globals().update(built)  # later lookups skip this hook
    return built[name]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DocumentModel(StrictModel):
    """A part of a published document that also reads as its JSON reads (``part["field"]``,
    ``part.get("field")``), so code written against the JSON runs on the typed model."""

    def __getitem__(self, key: str) -> Any:
        if key not in type(self).model_fields:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in type(self).model_fields else default


def _split_schema(names: tuple[str, ...]) -> dict[str, Any]:
    fraction = {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
    return {"type": "object", "properties": {n: fraction for n in names},
            "required": list(names), "additionalProperties": False}


_SPLIT_NAMES = (("one_way", "two_way"), ("one_way", "selection", "two_way"))
# The split's JSON schema: the two sets of names, each fraction in (0, 1]. That the fractions
# sum to at most 1, and which set the session's selection takes, the key server checks on
# the whole request (409, ``split_refusal`` and the plan).
BudgetSplit = Annotated[dict[str, Number], WithJsonSchema(
    {"oneOf": [_split_schema(names) for names in _SPLIT_NAMES]})]


def split_refusal(split: dict[str, float] | None) -> str | None:
    """Why a split that reads as its schema says cannot be a budget split (the fractions sum
    above 1), or None."""
    if split is not None and sum(split.values()) > 1 + 1e-12:
        return "split fractions must sum to at most 1"
    return None


class BudgetSpec(StrictModel):
    """The session's total budget as (epsilon, delta)-DP, and how rho is split over releases."""

    epsilon: Number = Field(gt=0, le=100)
    delta: Number = Field(gt=0, lt=1)
    split: BudgetSplit | None = Field(
        default=None,
        description="fraction of the session's rho for 'one_way', 'selection' (with a private "
                    "selection) and 'two_way' (must sum to <= 1); default: 0.3 / 0.1 / "
                    "0.6 with noisy-greedy, 0.1 / 0.1 / 0.8 with em, and without selection "
                    "PrivSyn's c^(2/3) rule over the two releases")

    @field_validator("split")
    @classmethod
    def _split_valid(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        if v is None:
            return v
        if tuple(sorted(v)) not in _SPLIT_NAMES:
            raise ValueError("split names 'one_way' and 'two_way', and 'selection' when the "
                             "session selects its pairs privately")
        if any(not 0 < x <= 1 for x in v.values()):
            raise ValueError("split fractions must be in (0, 1]")
        return v


class SelectionRequest(StrictModel):
    """How the session chooses its 2-way marginals (params/selection_plan.py)."""

    mode: Literal["em", "noisy-greedy", "none"] = Field(
        default="noisy-greedy",
        description="noisy-greedy (the default, the most accurate plan measured): PrivSyn's "
                    "rule, InDif noised under encryption, greedy in clear at the key server; "
                    "em: private selection under encryption (FedDPSyn Primitives 2-3); none: "
                    "every pair (or 'pairs')")
    rounds: Annotated[int, Field(ge=1, le=10_000), BeforeValidator(json_number)] | None = Field(
        default=None, description="pairs to select (em); default: half the pairs; "
                                  "noisy-greedy chooses how many itself")
    parameter_set: SelectionSetName | None = Field(
        default=None, description="selection parameter set (params/parameter_sets.py); "
                                  "default: the project's default set")
    one_way_topup: bool | None = Field(
        default=None, description="noisy-greedy: the 2-way release also tops up the 1-ways "
                                  "to their c^(2/3) share of the publication (PrivSyn's "
                                  "allocation after the selection; a second measurement of "
                                  "each topped-up 1-way, combined by inverse variance); "
                                  "default: on for noisy-greedy, off for em and none")


# A schema number: JSON's, or decimal text or a rational "p/q" (params.exact_numbers).
_EXACT_TEXT = (r"^\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*$"
               r"|^\s*[+-]?\d+/\d+\s*$")
ExactNumber = Number | Annotated[str, Field(pattern=_EXACT_TEXT)]
# A name compared after surrounding spaces are removed: something must remain.
_NAME = Annotated[str, Field(min_length=1, max_length=1000, pattern=r"\S")]


class _OpenDocument(BaseModel):
    # Keys a schema file may carry besides these are kept and ignored (params.schema).
    model_config = ConfigDict(extra="allow")


class CategoricalColumnDocument(_OpenDocument):
    name: _NAME
    type: Literal["categorical"]
    i2s: list[str | Count | Number | StrictBool] = Field(
        min_length=1, description="the categories, each distinct once written as text")
    size: Count | None = Field(default=None, description="if given, the number of categories")
    labels: list[Any] | None = Field(default=None, description="one per category")


class ContinuousColumnDocument(_OpenDocument):
    name: _NAME
    type: Literal["continuous"]
    min: ExactNumber = Field(description="public lower bound (min < max)")
    max: ExactNumber = Field(description="public upper bound")
    bins: Count = Field(default=32, ge=1, le=4096)
    integer: StrictBool | None = None


class TableSchemaDocument(_OpenDocument):
    """A table schema as a request carries it (``params.schema.Schema.from_dict``): the key
    server and the DistAIM servers check this shape (422), then what JSON Schema cannot say
    (409: column names distinct, min < max, categories distinct, 'size' and 'labels'
    matching 'i2s', 'target' one of the columns)."""

    name: str | None = None
    target: str | None = None
    columns: list[Annotated[CategoricalColumnDocument | ContinuousColumnDocument,
                            Field(discriminator="type")]] = Field(min_length=2,
                                                                  max_length=10_000)


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema with its ``$defs`` references written in place (the document it is
    embedded in has its own components)."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            # a discriminator's mapping names the definitions; the oneOf's consts suffice
            return {k: walk(v) for k, v in node.items() if k != "discriminator"}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


_TABLE_SCHEMA = TypeAdapter(TableSchemaDocument)
# The request's schema stays the JSON object it was (the plan reads it as such); its shape is
# checked and documented as TableSchemaDocument's.
TableSchema = Annotated[dict[str, Any],
                        WithJsonSchema(_inline(TableSchemaDocument.model_json_schema()))]


def table_schema_shape(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` if it has TableSchemaDocument's shape, else ValueError saying where not."""
    try:
        _TABLE_SCHEMA.validate_python(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "".join(f".{part}" for part in first.get("loc", ()))
        more = exc.error_count() - 1
        raise ValueError(f"schema{where}: {first.get('msg')}"
                         + (f" (and {more} more)" if more else "")) from None
    return value


ClientList = Annotated[list[ClientIdText], Field(min_length=1, max_length=1000),
                       WithJsonSchema({"type": "array", "minItems": 1, "maxItems": 1000,
                                       "uniqueItems": True,
                                       "items": {"type": "string", "pattern": ID_PATTERN}})]


def _unique_clients(v: list[str]) -> list[str]:
    if len(set(v)) != len(v):
        raise ValueError("client ids must be unique")
    return v


class SessionCreate(StrictModel):
    """A session the operator asks the key server for (``POST /sessions``)."""

    schema_: TableSchema = Field(alias="schema")
    clients: ClientList
    budget: BudgetSpec
    parameter_set: ParameterSetName = "default"
    pairs: list[tuple[Index, Index]] | None = Field(
        default=None, max_length=100_000,
        description="2-way marginals to release (column indices, two distinct columns of "
                    "the schema, each pair once); default every pair")
    max_rows: Count = Field(default=100_000, gt=0,
                            description="public upper bound on the rows of the union")
    selection: SelectionRequest = Field(default_factory=SelectionRequest)
    noise: Literal["auto", "joint", "two-server"] = Field(
        default="auto", description="auto: one joint noise neither server knows on every "
                                    "release that fits (the rule of params.noise_rules), "
                                    "two-server elsewhere; joint: every release or refuse; "
                                    "two-server: each server its own discrete Gaussian")
    upload_deadline: float | None = Field(
        default=None, gt=0, description="when the uploads close with the owners present (Unix "
                                        "time, UTC): owners without an upload then are left "
                                        "out, if at least the quorum uploaded; default: the "
                                        "session waits for every owner (or the operator's "
                                        "close)")
    quorum: int | None = Field(
        default=None, ge=1, description="the fewest owners the session may run with, by the "
                                        "deadline or the operator's close (default: every "
                                        "owner)")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("clients")
    @classmethod
    def _ids_unique(cls, v: list[str]) -> list[str]:
        return _unique_clients(v)

    def min_owners(self) -> int:
        """The fewest owners the session runs with (``quorum``, default every owner)."""
        return len(self.clients) if self.quorum is None else self.quorum

    @field_validator("schema_")
    @classmethod
    def _schema_shape(cls, v: dict[str, Any]) -> dict[str, Any]:
        return table_schema_shape(v)


class UploadsCloseWithout(StrictModel):
    """The operator closes a session's uploads with the owners present
    (``POST /sessions/{id}/uploads/close``): the owners named are left out, none of whom
    may have uploaded; the session then runs on the others' uploads."""

    without: list[ClientIdText] = Field(min_length=1, max_length=1000)


def left_out_message(session_id: str, client_id: str) -> str:
    """What both servers answer an upload of an owner left out of a session."""
    return (f"client {client_id!r} was left out of session {session_id} when its uploads "
            "were closed without it (its deadline, or the operator's close): its upload is "
            "refused; it contributes nothing to the session and spends none of its budget")


class JointNoisePublic(StrictModel):
    """The shape of a release's one joint noise (``dp.joint_noise_accounting``): the sum of
    ``uniforms`` independent uniforms on {0..2^bits - 1} and ``wider`` on
    {0..2^(bits+1) - 1}, centred (bits 1 and no wider ones: coins)."""

    uniforms: int = Field(ge=1)
    bits: int = Field(ge=1, le=16)
    wider: int = Field(0, ge=0, description="uniforms of bits + 1 bits beside the others")


class ReleasePlan(StrictModel):
    name: str
    marginals: list[str]
    rho: str = Field(description="zCDP cost of this release against each server, exact rational")
    sigma2: str = Field(description="the two-server noise's variance per server; the zCDP "
                                    "reference the joint shape is matched to")
    noise: Literal["joint", "two-server"] = Field(
        default="two-server", description="joint: one noise neither server knows protects "
                                          "both views; two-server: each adds N_Z(0, sigma2)")
    per_count_variance: str | None = Field(
        default=None, description="Var(published - true) per count, exact rational (a "
                                  "privsyn release: its envelope's, an upper bound)")
    joint: JointNoisePublic | None = Field(
        default=None, description="the joint shape (a privsyn release: the widest any of "
                                  "its groups may take, which the circuit is sized for)")
    allocation: Literal["even", "privsyn"] = Field(
        default="even", description="how a selected release's rho is shared over its "
                                    "pairs: evenly, or PrivSyn's c^(2/3) with one group "
                                    "(one noise) per pair size")


class SelectionPublic(StrictModel):
    """The private selection's public parameters: widths, the per-round budget, and the
    numerical loss it includes (em); the noise and its budget (noisy-greedy)."""

    mode: str
    rounds: int
    parameter_set: dict[str, Any] | None = Field(
        default=None, description="the named, versioned selection parameter set the widths "
                                  "below were derived from")
    rho_round: str | None = Field(default=None,
                                  description="em: zCDP charged per round, (eps + 4 eta)^2 / 2")
    epsilon_round: str | None = Field(default=None,
                                      description="em: permute-and-flip epsilon of one round")
    eta: float | None = Field(
        default=None, description="em: exact worst-case log-deviation of the fixed-point "
                                  "weights")
    indif_bits: int
    score_bits: int
    max_rows: int
    chunk_sizes: list[int] = Field(description="the P2 chunk sizes this session's pairs are "
                                               "cut into (one module function each)")
    indif_widths: list[int] | None = Field(
        default=None, description="P2's narrower widths the module compiles (one function "
                                  "per chunk size each), each chunk run at the narrowest that "
                                  "holds its cells' public bound; none in a record that "
                                  "predates them")
    indif_typical: int | None = Field(
        default=None, description="z of the typical bound that narrows each cell's public "
                                  "bound before its chunk's width is chosen; none: the "
                                  "worst-case bound alone (a record that predates it)")
    nb: int | None = None
    kappa_prime: list[int] | None = None
    thresholds: list[int] | None = None
    p_error: float
    bootstraps: int | None = Field(
        default=None, description="the selection's programmable bootstraps, counted from the "
                                  "compiled module's statistics")
    fhe_delta: float = Field(description="union bound on any bootstrap failing in P2/P3")
    row_bound_delta: float | None = Field(
        default=None, description="probability bound on a union above max_rows passing the "
                                  "row-bound check on the noisy 1-ways")
    delta_terms: dict[str, float] | None = Field(
        default=None, description="the selection's terms reserved out of the requested delta, "
                                  "each (1 + e^eps) times its failure probability")
    rho: str | None = Field(default=None,
                            description="noisy-greedy: zCDP charged for the whole selection")
    noise_sigma2: str | None = Field(
        default=None, description="noisy-greedy: variance of each server's N_Z noise per score")
    noise_bits: int | None = Field(
        default=None, description="noisy-greedy: the compute server's noise is below 2^bits "
                                  "in magnitude (else it fails closed)")
    noise_tail_probability: float | None = Field(
        default=None, description="noisy-greedy: bound on failing closed; the session adds "
                                  "e^eps times it to delta")
    score_noise: str | None = Field(
        default=None, description="noisy-greedy: 'joint' (one noise per score neither server "
                                  "knows, of the shape in 'joint') or 'two-server' (each "
                                  "server's N_Z(0, noise_sigma2))")
    joint: JointNoisePublic | None = Field(
        default=None, description="noisy-greedy with joint scores: the noise's shape")
    joint_failure: float | None = Field(
        default=None, description="noisy-greedy with joint scores: the conditioning mass the "
                                  "exact accounting excludes over every score (a delta term)")
    batch_size: int | None = Field(
        default=None, ge=0,
        description="em: P3 runs each round by candidate batches of at most this many "
                    "candidates; 0: one call a round. Absent (a record written before this "
                    "field): the batches follow from the candidate count by the rule of the "
                    "version that wrote it")


class SelectionRound(StrictModel):
    round: int
    pair: tuple[int, int]
    rho: str


class NoisyGreedyDecision(StrictModel):
    """The key server's answer to the noisy scores: the chosen pairs, nothing else."""

    pairs: list[tuple[int, int]]
    rho: str = Field(description="zCDP charged for the selection")


class UniformSumMechanism(StrictModel):
    """A centred sum of ``uniforms`` iid uniforms on {0..2^bits - 1} added to each of
    ``counts_per_record`` counts that one record moves by 1."""

    name: str = Field(max_length=200)
    noise: Literal["uniform_sum"] = "uniform_sum"
    uniforms: int = Field(ge=1, le=4096)
    bits: int = Field(ge=1, le=16)
    counts_per_record: int = Field(ge=1)


class DiscreteGaussianMechanism(StrictModel):
    """N_Z(0, sigma2) added to each of ``counts_per_record`` counts that one record moves by
    1 (a two-server release: the other server's noise, which protects each view alone)."""

    name: str = Field(max_length=200)
    noise: Literal["discrete_gaussian"] = "discrete_gaussian"
    sigma2: str = Field(pattern=r"^[0-9]+(/[0-9]+)?$",
                        description="the variance parameter, an exact rational p/q")
    counts_per_record: int = Field(ge=1)


class PureMechanism(StrictModel):
    """``count`` steps, each pure ``epsilon``-DP (em's permute-and-flip rounds)."""

    name: str = Field(max_length=200)
    noise: Literal["pure"] = "pure"
    epsilon: float = Field(gt=0)
    count: int = Field(ge=1)


class GaussianBoundMechanism(StrictModel):
    """A release whose noise is decided at run time (noisy-greedy's 2-way release, split over
    the pairs its selection keeps), bounded whatever the selection: its trade-off function is
    at least that of the Gaussian mechanism of sensitivity 1 and variance 1 / (2 rho) composed
    with a mechanism that reveals the record with probability ``eta``
    (``docs/privacy-plan.md``, "The split 2-way release")."""

    name: str = Field(max_length=200)
    noise: Literal["gaussian_bound"] = "gaussian_bound"
    rho: str = Field(pattern=r"^[0-9]+(/[0-9]+)?$",
                     description="mu^2 / 2 of the bounding Gaussian, an exact rational p/q")
    eta: float = Field(ge=0, lt=1)


PrivacyMechanism = Annotated[UniformSumMechanism | DiscreteGaussianMechanism | PureMechanism
                             | GaussianBoundMechanism, Field(discriminator="noise")]


class PrivacyRecord(StrictModel):
    """What a session publishes, for anyone to re-account it with a PLD accountant
    (``docs/privacy.md``, "The privacy record"): neighbours differ by adding or removing one
    record; each mechanism's counts have sensitivity 1. The session is (epsilon, delta)-DP:
    the mechanisms' composed delta at epsilon is at most delta - delta_reserved, the rest
    being the reserved failure terms (bootstraps, the row bound, conditioning)."""

    epsilon: float = Field(gt=0, description="the session's epsilon, as requested")
    delta: float = Field(gt=0, lt=1, description="the session's delta, as requested")
    delta_reserved: float = Field(ge=0, description="delta held for failure terms outside "
                                                    "the mechanisms")
    accounting: Literal["pld", "rdp"] = Field(
        description="pld: the mechanisms are every noise the session adds (a release decided "
                    "at run time by its gaussian_bound), and the budget was calibrated on their "
                    "composed PLD; rdp: the plan's Renyi bound (a session planned without "
                    "calibration)")
    epsilon_accounted: float | None = Field(
        default=None, description="pld: the mechanisms' eps at delta - delta_reserved by the "
                                  "pessimistic PLD (at most epsilon)")
    mechanisms: list[PrivacyMechanism]
    run_time: list[str] = Field(default_factory=list,
                                description="releases whose noise is decided at run time")
    version: str | None = Field(default=None, description="the feddpsyn release that planned "
                                                          "the session (absent before 0.2.0)")


class SessionPublic(StrictModel):
    session_id: str
    schema_: dict[str, Any] = Field(alias="schema")
    schema_fingerprint: str
    clients: list[str]
    pairs: list[tuple[int, int]]
    parameter_set: dict[str, Any]
    total_cells: int
    releases: list[ReleasePlan]
    epsilon: float
    delta: float
    delta_conversion: float | None = Field(
        default=None, description="the delta of the zCDP -> (eps, delta) conversion: the "
                                  "requested delta minus the selection's reserved terms")
    rho_total: str
    joint_delta: float = Field(
        default=0.0, description="the joint releases' conditioning mass, a delta term")
    selection: SelectionPublic | None = None
    privacy: PrivacyRecord | None = Field(
        default=None, description="the session's privacy record (absent in records written "
                                  "before it existed)")
    one_way_topup: bool = Field(
        default=False, description="noisy-greedy's split 2-way release also tops up the "
                                   "1-ways to their c^(2/3) share of the publication: the "
                                   "release then holds a second measurement of those 1-ways")
    version: str | None = Field(default=None, description="the feddpsyn release that planned "
                                                          "the session (absent before 0.2.0)")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def conversion_delta(self) -> float:
        """The delta of the session's zCDP -> (eps, delta) conversion."""
        return self.delta if self.delta_conversion is None else self.delta_conversion

    def delivered_delta(self) -> float:
        """What the session delivers: the conversion's delta plus the selection's reserved
        terms (at most the requested delta)."""
        terms = (self.selection.delta_terms or {}) if self.selection else {}
        return self.conversion_delta() + sum(terms.values()) + self.joint_delta


class SessionCreated(StrictModel):
    """A session ready for uploads, with its clients' tokens: what an operator's client
    holds once ``POST /sessions`` was accepted (:class:`SessionAccepted`) and the session's
    status says ``ready`` (``feddpsyn.operator_api.create_session``)."""

    session: SessionPublic
    client_tokens: dict[str, str] = Field(
        description="one bearer token per client, shown once; the servers keep only hashes")


class SessionAccepted(StrictModel):
    """The key server's answer to ``POST /sessions`` (202): the request was valid and the
    session is being prepared (compiling its circuits, generating its keys, drawing its
    noise) in the background. Follow ``status_url`` until its state is ``ready``; uploads
    before that are refused with 409."""

    session_id: str
    state: Literal["preparing"] = "preparing"
    status_url: str = Field(description="the session's status, relative to the key server's "
                                        "URL: GET it with the operator's or a client's token")
    client_tokens: dict[str, str] = Field(
        description="one bearer token per client, shown once; the servers keep only hashes")


class Preparation(StrictModel):
    """A session's preparation at the key server (compile, keygen, noise pool): a job
    that runs after ``POST /sessions`` has answered."""

    state: Literal["preparing", "ready", "failed"]
    phase: str = Field(description="what the job is doing now (preparing), or 'ready', or "
                                   "the phase it failed in")
    started: float = Field(description="when the session was accepted (Unix seconds)")
    elapsed: float = Field(ge=0, description="seconds since it was accepted, or until it "
                                             "became ready or failed")
    reason: str | None = Field(default=None, description="why it failed (state 'failed')")


class WorkProgress(StrictModel):
    """How far a long step of the compute server has come (the encrypted dependency
    scores of a selection, its noising, a release's chunks), as it reports it to the key
    server."""

    phase: str = Field(min_length=1, max_length=200)
    done: Count = Field(ge=0)
    total: Count = Field(ge=0)
    unit: str = Field(default="tasks", max_length=40)
    age: Annotated[float, Field(ge=0), BeforeValidator(json_number)] | None = Field(
        default=None, description="in a status: seconds since the compute server reported "
                                  "it")

    def text(self) -> str:
        return f"{self.phase}: {self.done} of {self.total} {self.unit}"


# The compiled modules and evaluation keys the compute server fetches from the key server,
# each as a file of its own (``GET /peer/sessions/{id}/artefacts/{name}``): hundreds of MB at
# Adult's widths, streamed rather than inlined in a JSON body.
ArtefactName = Literal["server.zip", "evaluation_keys.bin", "selection_server.zip",
                       "selection_evaluation_keys.bin"]


class PeerSession(StrictModel):
    """What the key server tells the compute server about a new session: its public record,
    its clients' token hashes, and the SHA-256 of each artefact to fetch (the aggregation's
    module and keys; the selection's where the session selects)."""

    session: SessionPublic
    client_token_hashes: dict[str, str]
    artefacts: dict[ArtefactName, Annotated[str, Field(pattern=SHA256_HEX_PATTERN)]]


class MaskedUpload(StrictModel):
    """A client's masked count vector. How many values, and below which power of 2, are
    the session's (``total_cells`` and ``parameter_set.count_bits`` of its public record):
    another length or a value at or above 2^count_bits is refused with 409."""

    commitment: str = Field(pattern=SHA256_HEX_PATTERN)
    values: Annotated[list[Annotated[int, Field(ge=0, lt=1 << MAX_COUNT_BITS)]],
                      BeforeValidator(json_numbers)] = Field(max_length=16_000_000)


class SeedUpload(StrictModel):
    seed_hex: str = Field(pattern=SHA256_HEX_PATTERN)


class UploadReceipt(StrictModel):
    session_id: str
    client_id: str
    stored: bool = Field(description="false if this exact upload was already stored")
    digest: str


SessionState = Literal["preparing", "failed", "collecting", "computing", "released",
                       "blocked"]


class StepCost(StrictModel):
    """One kind of encrypted step's cost at the compute server in a session so far
    (``computeserver.metering``)."""

    step: str = Field(description="release (P1 chunks), p2_indif, p2_sums, score_noise or "
                                  "p3_select")
    tasks: int
    cpu_seconds: float = Field(description="CPU seconds of the processes that ran the tasks")
    run_seconds: float = Field(description="the tasks' seconds inside concrete, summed")
    wall_seconds: float = Field(description="the steps' wall seconds, summed")
    bootstraps: int | None = Field(
        default=None, description="programmable bootstraps the tasks ran (concrete's count "
                                  "per call); null where a circuit's count was not readable")


class SessionStatus(StrictModel):
    session_id: str
    state: SessionState = Field(
        description="preparing: being set up after creation (uploads wait); failed: its "
                    "preparation failed (see detail); collecting: waiting for uploads; "
                    "computing; released; blocked (compute server: a client's seed does not "
                    "match its commitment)")
    clients_uploaded: list[str]
    clients_missing: list[str]
    releases_done: list[str]
    detail: str = ""
    clients_absent: list[str] = Field(
        default_factory=list, description="owners left out of the session when its uploads "
                                          "were closed without them (a deadline, or the "
                                          "operator's close): they contribute nothing")
    upload_deadline: float | None = Field(
        default=None, description="the key server: when the uploads close with the owners "
                                  "present (Unix time, UTC), if the session has a deadline")
    quorum: int | None = Field(
        default=None, description="the key server: the fewest owners the session runs with")
    preparation: Preparation | None = Field(
        default=None, description="the key server's preparation job (absent for a session "
                                  "created before preparation was a job, and at the compute "
                                  "server)")
    progress: WorkProgress | None = Field(
        default=None, description="the compute server's long step under way, if any")
    costs: list[StepCost] | None = Field(
        default=None, description="the compute server: its encrypted steps' cost in this "
                                  "session so far, by kind (since the server's last start)")
    offline: WorkProgress | None = Field(
        default=None, description="the key server's offline job for this session: the "
                                  "joint noise's chunks (and joint score noise's pairs) "
                                  "encrypted, of those its plan needs; a release waits for "
                                  "the chunks it reaches (absent without a joint noise, and "
                                  "at the compute server)")


class LedgerEntry(DocumentModel):
    release: str
    rho: str
    at: float


class UploadReplacement(DocumentModel):
    """A client's masked vector replaced before the session's uploads closed: the old one
    and its ciphertexts were deleted and never summed."""

    client_id: str
    old_digest: str
    new_digest: str
    at: float


class LedgerView(StrictModel):
    session_id: str
    rho_total: str
    rho_spent: str
    epsilon_spent: float
    delta: float
    entries: list[LedgerEntry]
    uploads_replaced: list[UploadReplacement] = Field(
        default_factory=list, description="every replaced upload, in order (no budget is "
                                          "spent: nothing of a replaced upload is released)")
    clients_absent: list[str] = Field(
        default_factory=list, description="owners left out of the session: their tables are "
                                          "in no release, and no budget of theirs is spent")


class UploadDigest(StrictModel):
    commitment: str = Field(pattern=SHA256_HEX_PATTERN)
    digest: str = Field(pattern=SHA256_HEX_PATTERN,
                        description="SHA-256 of the upload's ciphertexts")


class UploadsClose(StrictModel):
    """The compute server's word that it holds exactly these uploads, one per client, and
    will sum nothing else: the key server closes the session's uploads on it. It must name
    every client of the session and no other (409 otherwise)."""

    uploads: dict[ClientIdText, UploadDigest] = Field(
        max_length=10_000, json_schema_extra={"additionalProperties": False})


class UploadsClosed(StrictModel):
    session_id: str
    closed: float = Field(description="when the uploads closed (seconds since the epoch)")


class ReleaseManifest(StrictModel):
    """The compute server's list of the ciphertext chunks of one release, by SHA-256."""

    chunks: list[Index] = Field(
        max_length=1_000_000, description="the release's chunks, as the key server cuts it "
                                          "(409 otherwise)")
    digests: list[Annotated[str, Field(pattern=SHA256_HEX_PATTERN)]] = Field(
        max_length=1_000_000, description="one SHA-256 per chunk, in order (409 otherwise)")
    noise: str | None = Field(
        default=None, max_length=1_000_000,
        description="the noise the compute server put in (SessionPlan.noise_statement): "
                    "required where the release's noise is decided at run time (a privsyn "
                    "release), and compared with the key server's own decision")

    def digest(self) -> str:
        # Without the optional statement when absent: a fixed release's digest is unchanged.
        return hashlib.sha256(self.model_dump_json(exclude_none=True).encode()).hexdigest()


class ReleaseProgress(StrictModel):
    release: str
    missing_chunks: list[int]
    published: bool


class ReleasedMarginal(StrictModel):
    attrs: list[str]
    shape: list[int]
    counts: list[int]
    per_count_variance: str | None = Field(
        default=None, description="Var(published - true) of this marginal's counts where it "
                                  "differs from its release's (a privsyn split release)")
    joint: JointNoisePublic | None = Field(
        default=None, description="this marginal's joint shape where it differs from its "
                                  "release's (a privsyn split release's group)")


class ReleaseResult(StrictModel):
    session_id: str
    release: str
    rho: str
    sigma2_per_server: str = Field(description="each server's own Gaussian's variance; 0 where "
                                               "the release carries the joint noise")
    noise: Literal["joint", "two-server"] = "two-server"
    per_count_variance: str | None = Field(
        default=None, description="Var(published - true) per count, exact rational (a "
                                  "privsyn split release: the mean over its counts; each "
                                  "marginal states its own)")
    joint: JointNoisePublic | None = Field(
        default=None, description="the joint shape every count carries (None on a privsyn "
                                  "split release: each marginal states its group's)")
    allocation: Literal["even", "privsyn"] = Field(
        default="even", description="privsyn: the release's rho was split over its pairs by "
                                    "PrivSyn's c^(2/3), one group (one noise) per pair size")
    marginals: dict[str, ReleasedMarginal]


class NoSelectionAccounting(DocumentModel):
    """A session that releases every pair (or the pairs it was given): no selection."""

    mode: Literal["none"]


class SelectionOutcome(DocumentModel):
    """What a selection chose and what it was charged, next to its public record."""

    selected_pairs: list[tuple[int, int]] | None = Field(
        description="the pairs chosen (em: round by round; noisy-greedy: the ones PrivSyn's "
                    "greedy rule kept)")
    rho_charged: str = Field(description="zCDP charged for the selection, exact rational")
    note: str


class EmSelectionAccounting(SelectionPublic, SelectionOutcome):
    """The private selection's public record (:class:`SelectionPublic`) with its outcome."""

    mode: Literal["em"]
    numerical_extra_epsilon_per_round: float = Field(
        description="4 eta: what the fixed-point weights add to a round's epsilon")


class NoisyGreedySelectionAccounting(SelectionPublic, SelectionOutcome):
    """The noisy-greedy selection's public record (:class:`SelectionPublic`) with its
    outcome."""

    mode: Literal["noisy-greedy"]
    noise_tail_delta: float = Field(
        description="the compute server's bounded noise failing closed, as a delta term")


SelectionAccounting = Annotated[
    NoSelectionAccounting | EmSelectionAccounting | NoisyGreedySelectionAccounting,
    Field(discriminator="mode")]


class ReleaseAccounting(DocumentModel):
    """The published privacy claim of a session, as the key server's ledger recorded it."""

    neighbouring: str
    rho_total: str
    rho_spent: str
    epsilon_spent: float
    delta: float
    delta_conversion: float
    epsilon_budget: float
    conversion: str
    entries: list[LedgerEntry]
    selection: SelectionAccounting
    delta_total: float | None = Field(
        default=None, description="with a selection: delta_conversion plus the selection's "
                                  "reserved terms (at most delta)")


class ReleaseDocument(StrictModel):
    """Everything published for a session: the noisy marginals and the accounting."""

    session_id: str
    schema_: dict[str, Any] = Field(alias="schema")
    parameter_set: dict[str, Any]
    noise: dict[str, Any]
    accounting: ReleaseAccounting
    releases: list[ReleaseResult]
    version: str | None = Field(default=None, description="the feddpsyn release of the key "
                                                          "server that published it")
    contributors: list[str] | None = Field(
        default=None, description="the owners whose tables the release is of (absent in "
                                  "documents written before owners could be left out)")
    absent: list[str] = Field(default_factory=list,
                              description="owners left out when the uploads were closed")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ErrorBody(StrictModel):
    detail: str


def error_detail(response, limit: int = 500) -> str:
    """What an error answer says: its ``detail`` (:class:`ErrorBody`), or its text when the
    body has another shape (a proxy's page, a truncated answer). ``response`` is an HTTP
    response with ``.json()`` and ``.text`` (httpx's)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    detail = body.get("detail", response.text) if isinstance(body, dict) else response.text
    return str(detail)[:limit]


# Every error either server returns has this one shape; routers declare them all.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (401, 403, 404, 409, 413, 422, 503)}
