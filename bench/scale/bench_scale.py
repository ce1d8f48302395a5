"""What a wider or longer table costs: the servers' default plan for C columns and N rows,
the work each step of the session does, a measured sample of those steps on this machine, and
a projection to many cores (a model, stated as one).

**The tables.** C columns (``COLUMNS``, 5 to 60) taken in a fixed order from the shipped
schemas (Adult's 15, then Doctor-Contacts, Mroz, Wages, Computers and Fed-Heart-Disease: 82
real columns with their real domain sizes; C = 15 is Adult's schema), N rows (``ROWS``, 1e3
to 1e7). N enters through ``max_rows`` (stated as the demo states it,
``params.operator_bound.stated_max_rows``) and the widths it fixes: P2's k and the score
digits grow with log N. The shipped parameter set ("default", k = 20) holds counts below
2^19: from about 470,000 rows the servers refuse the session. Those points are planned with
a what-if parameter set of the least count width that fits (``what-if-k<k>``, registered in
this process only, not shipped), and each such point says so (``parameter_set``).

**From the plan alone** (no encryption; :func:`plan_figures`): the plan is the one the servers
build (``SessionPlan.build`` with noise "auto", the selection's default split, as
``fedbench.methods.feddpsyn_served.served_plan``), for the default selection (noisy-greedy)
and for none. Per point: pairs, 1-way and 2-way cells, P1 chunks, count bits, each release's
noise and encrypted bits per count (its shape's K; the circuit carries the widest,
``plan.joint_columns``, on every cell), P2's chunks and bootstraps and the score calls'
(``SelectionPlan.bootstraps_by_phase``, the structural upper bound the key server reserves
delta for), the key server's encrypted bits (release coins for every chunk a release may
use, ``keyserver.coins.release_chunks``: a selected release's possible packed chunks; one
set per pair for joint scores), and the bytes
each client uploads (compact JSON of ``total_cells`` values below 2^k, their expected
length). How long the plan took to build is kept too.

**From concrete's compiler** (no keys; :func:`circuit_figures`, cached by widths): the P1
circuit's ciphertext bytes (inputs are compressed: about 25 bytes each) and the selection
module's bootstrap and key-switching key bytes, its bootstraps per function and its
optimiser complexity. Memory per server process is estimated from those and the sample's
measured resident set (:func:`memory_estimate`).

**Measured here** (:func:`measure_sample`, each in a fresh child process so its peak resident
memory is its own; CPU seconds of the process, since on a shared machine at low priority wall
seconds measure the queue): P1 plain and with the joint noise (``bench_joint_noise``'s variants:
every chunk decrypted and checked) at the default width and at a what-if width, on chunks of
a few cells; the key server's encryption of one client's chunk and of its coins; the noisy
score module at the smallest point's widths (its three chunk sizes, ``bench_joint_scores``'s
``ScoreVariant``; the score noise ``SAMPLE_SCORE_SHAPE``, keys under 1 GB): keygen, a P2
chunk of 8 cells, an ``add`` and a joint score call, each decrypted and checked.

**The model** (:func:`session_steps`, :func:`step_seconds`): a step is a list of independent
tasks, each with its cost on one core, plus serial seconds. A P2 chunk costs its bootstraps
times s, the seconds a bootstrap of the point's module: the sample's measured s scaled by
the ratio of the two modules' optimiser complexity per bootstrap (machine-independent). A
score call costs its bootstraps times s times the sample's measured ratio of a score call's
seconds per bootstrap to a P2 chunk's. P1 chunks cost the measured fixed part plus the
measured seconds per encrypted bit times cells x columns (interpolated in k between the two
measured widths). On n cores: tasks list-scheduled longest first, each paying the per-task
overhead o (``TASK_OVERHEAD_S``, the dearest bench_scaleout.py measured: a Dask task on
loopback), P2's adds in ``map_summed``'s levels, each level in ceil(adds / n) waves; serial
parts stay serial. Perfect parallelism of independent tasks up to the task count; no
contention, one core a worker, one OpenMP thread. Two cases: ``model`` puts every step's
tasks on the n cores; ``today`` keeps on one core the steps that are on an executor but
measured not to speed up: the key server's encryptions (its coins, the uploads, P2's
inputs). concrete seeds every compressed input ciphertext from the CPU's RDSEED, which the
cores share: on this project's 2-core machines two offline worker processes encrypted no
faster than one (``bench_scaleout.py``: x1.01;
``experiments/encryption_cost/bench_encryption_cost.py`` shows the seeding's share).
``calibrated`` is the model with every bootstrap at the rate Adult's served session measured
(``bench/results/adult_online.json``: wall seconds x 2 cores over its bootstraps, an upper
bound on a shared machine), :func:`calibration_factor`. The noisy-greedy 2-way release is
costed at its worst case, every pair kept.

**The largest table in the budget** (:func:`search_largest`): per row count, the most columns
whose default session fits ``BUDGET_MIN`` on ``BUDGET_CORES`` cores, searched past the grid
(doubling, then bisecting to ``SEARCH_RESOLUTION`` columns) for the model and the calibrated
case; columns past the shipped 82 are resampled from them.

Run (about 25 minutes on 2 shared cores; low priority; ``--sample FILE`` reuses an earlier
run's sample, ``--cache`` keeps the compile figures between runs):
    OMP_NUM_THREADS=1 nice -n 19 .venv/bin/python bench/scale/bench_scale.py \
        --out bench/results/scale.json --plot bench/results/scale.png --cache /tmp/scale.json
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import math
import os
import platform
import resource
import secrets
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from multiprocessing import get_context
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from concrete import fhe  # noqa: E402

from bench.scale.bench_scaleout import add_levels  # noqa: E402
from feddpsyn.crypto.aggregation import decode_release, publish_counts, release_offset  # noqa: E402
from feddpsyn.crypto.indif import chunk_bootstraps  # noqa: E402
from feddpsyn.crypto.joint_noise import (  # noqa: E402
    draw_bits,
    encrypt_key_server_bits,
    joint_noise_plaintext,
    joint_operands,
)
from feddpsyn.crypto.noisy_scores import (  # noqa: E402
    NoisyScoreShape,
    compile_noisy_scores,
    decode_joint_score,
    decode_noisy_score,
    joint_score_plaintext,
    noise_operand,
    noisy_score_plaintext,
)
from feddpsyn.dp.discrete_gaussian import discrete_gaussian_vector  # noqa: E402
from feddpsyn.params.modes import NoiseMode  # noqa: E402
from feddpsyn.params.parameter_sets import PARAMETER_SETS, ParameterSet  # noqa: E402
from feddpsyn.params.plan_request import PlanRequest  # noqa: E402
from feddpsyn.params.release_chunks import ReleaseChunk  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402
from feddpsyn.params.session_plan import SessionPlan  # noqa: E402

COLUMNS = (5, 10, 15, 20, 30, 45, 60)
ROWS = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)
SELECTIONS = ("noisy-greedy", "none")  # the servers' default first
CORES = (1, 2, 16, 64, 192)
EPSILON, DELTA = 1.0, 1e-5
CLIENTS = 4
BUDGET_MIN = 30.0
BUDGET_CORES = 64
# Per-task overhead on an executor: the dearest bench_scaleout.py measured (a chunk task on
# a one-worker Dask cluster on loopback), as bench_adult_online.py's model uses it.
TASK_OVERHEAD_S = 0.019
# Where the columns come from, in order: (table, schema path under the data folder or the
# project). Adult first, so that C = 15 is Adult's schema.
SOURCES = (("adult", "data", "adult/adult.schema.json"),
           ("doctor_contacts", "data", "doctor_contacts/doctor_contacts.schema.json"),
           ("mroz", "data", "mroz/mroz.schema.json"),
           ("wages", "data", "wages/wages.schema.json"),
           ("computers", "data", "computers/computers.schema.json"),
           ("fed_heart_disease", "project", "params/schemas/fed_heart_disease.schema.json"))
DEFAULT_SET = "default"
# The sample module's score noise: Adult's default joint shape at eps 1 (12 uniforms of 7
# bits, 5-bit lookups). The smallest point's own shape takes 6-bit lookups, whose module
# keys pass 2 GB; the model scales to each point's module by its complexity.
SAMPLE_SCORE_SHAPE = (12, 7)
CAPACITY = "holds counts below"  # SessionPlan.check_capacity's refusal


# ----------------------------------------------------------------------------- the tables

def data_dir() -> Path:
    return Path(os.environ.get("FEDDPSYN_DATA", ROOT.parent / "shared" / "data"))


def column_pool() -> list[tuple[str, int]]:
    """(table.column, domain size) of every shipped column, in ``SOURCES`` order."""
    pool = []
    for table, where, path in SOURCES:
        schema = Schema.load((data_dir() if where == "data" else ROOT) / path)
        pool += [(f"{table}.{c.name}", c.size) for c in schema.columns]
    return pool


def schema_of(columns: list[tuple[str, int]], name: str = "scale") -> Schema:
    """A categorical schema with these names and domain sizes (only the sizes matter to a
    plan)."""
    return Schema.from_dict({"name": name, "columns": [
        {"name": n, "type": "categorical", "i2s": [str(i) for i in range(size)]}
        for n, size in columns]})


def scale_columns(count: int, pool: list[tuple[str, int]] | None = None,
                  seed: int = 0) -> list[tuple[str, int]]:
    """The first ``count`` real columns; past the pool, columns resampled from it (a real
    column's domain size under a new name), seeded."""
    import numpy as np

    pool = column_pool() if pool is None else pool
    if count <= len(pool):
        return pool[:count]
    rng = np.random.default_rng(seed)
    extra = [pool[int(i)] for i in rng.integers(0, len(pool), count - len(pool))]
    return pool + [(f"resampled{i}.{n}", size) for i, (n, size) in enumerate(extra)]


# ----------------------------------------------------------------------------- the plan

def what_if_set(count_bits: int) -> str:
    """A parameter set like the default one but ``count_bits`` wide, registered in this
    process only (module docstring)."""
    base = PARAMETER_SETS[DEFAULT_SET]
    name = f"what-if-k{count_bits}"
    if name not in PARAMETER_SETS:
        PARAMETER_SETS[name] = ParameterSet(name=name, version=0, count_bits=count_bits,
                                            chunk_cells=base.chunk_cells,
                                            p_error=base.p_error,
                                            envelope_bits=base.envelope_bits)
    return name


def served_plan(schema: Schema, rows: int, selection: str,
                parameter_set: str = DEFAULT_SET) -> SessionPlan:
    """``feddpsyn_served.served_plan`` at a named parameter set."""
    from feddpsyn.params.operator_bound import stated_max_rows

    max_rows = stated_max_rows(schema, rows, EPSILON, DELTA, selection, None, NoiseMode.AUTO,
                               parameter_set)
    return SessionPlan.build(PlanRequest(schema, EPSILON, DELTA, max_rows,
                                         parameter_set=parameter_set, selection=selection,
                                         noise=NoiseMode.AUTO))


@dataclass
class Planned:
    plan: SessionPlan | None
    parameter_set: str
    seconds: float
    refusals: list[str] = field(default_factory=list)


def plan_for(schema: Schema, rows: int, selection: str) -> Planned:
    """The servers' plan; where the default set's count width refuses the rows, the least
    what-if width that holds them (module docstring). Other refusals are kept, no plan."""
    started = time.process_time()
    refusals: list[str] = []
    name = DEFAULT_SET
    width = PARAMETER_SETS[DEFAULT_SET].count_bits
    for _ in range(4):  # bounded: the width grows by one bit a try
        try:
            plan = served_plan(schema, rows, selection, name)
            return Planned(plan, name, time.process_time() - started, refusals)
        except ValueError as exc:
            refusals.append(f"{name}: {exc}")
            if CAPACITY not in str(exc):
                break
        width = max(width + 1, (int(rows * 1.1) + 10).bit_length() + 1)
        name = what_if_set(width)
    return Planned(None, name, time.process_time() - started, refusals)


def upload_bytes(cells: int, count_bits: int) -> int:
    """A client's two uploads: the masked counts as compact JSON (``wire.MaskedUpload``:
    ``cells`` values uniform below 2^k, their expected decimal length, a comma each) and the
    seed; the commitment and the field names as written."""
    top = 1 << count_bits
    digits, low = 0.0, 0
    for width in range(1, len(str(top - 1)) + 1):  # bounded: one pass per decimal digit
        high = min(top, 10 ** width)
        digits += width * (high - low) / top
        low = high
    masked = len('{"commitment":"","values":[]}') + 64 + round(cells * (digits + 1)) - 1
    seed = len('{"seed_hex":""}') + 64
    return masked + seed


def plan_figures(plan: SessionPlan, clients: int = CLIENTS) -> dict:
    """Everything the plan alone says about a session's size (module docstring)."""
    from feddpsyn.keyserver.coins import release_chunks

    layout, params = plan.layout, plan.parameters
    chunk = params.chunk_cells
    one_cells = sum(m.size for m in layout.one_way)
    two_cells = sum(m.size for m in layout.two_way)
    releases = []
    coin_chunks = 0
    for spec in plan.releases:
        chunks = release_chunks(plan, spec.name)
        cells = sum(m.size for m in (layout.one_way if spec.name == "one_way"
                                     else layout.two_way))
        bits = spec.joint.ciphertexts if spec.joint is not None else 0
        if spec.joint is not None:
            coin_chunks += len(chunks)
        releases.append({
            "name": spec.name,
            "noise": NoiseMode.JOINT if spec.joint is not None else NoiseMode.TWO_SERVER,
            "allocation": spec.allocation,
            "shape": None if spec.joint is None else [spec.joint.uniforms, spec.joint.bits],
            "bits_per_count": bits, "circuit_bits_per_count": plan.joint_columns,
            "cells": cells, "chunks": len(chunks),
            "variance_per_count": float(spec.per_count_variance)})
    if plan.joint_columns and any(r["noise"] == NoiseMode.TWO_SERVER for r in releases):
        coin_chunks += 1  # one inert set serves every two-server chunk (keyserver.coins)
    out = {
        "parameter_set": params.name, "count_bits": params.count_bits, "chunk_cells": chunk,
        "max_rows": plan.max_rows, "accounting": plan.accounting,
        "pairs": len(layout.two_way), "one_way_cells": one_cells, "two_way_cells": two_cells,
        "total_cells": layout.total_cells, "chunks": -(-layout.total_cells // chunk),
        "joint_columns": plan.joint_columns, "releases": releases,
        "ks_coin_chunks": coin_chunks,
        "ks_release_coin_bits": coin_chunks * chunk * plan.joint_columns,
        "upload_bytes_per_client": upload_bytes(layout.total_cells, params.count_bits),
        "clients": clients, "selection_figures": None}
    selection = plan.selection
    if selection is None:
        return out
    cells = plan.pair_cells()
    phases = selection.bootstraps_by_phase(cells)
    per_pair: dict[int, list[int]] = {}
    for index, _, size in plan.indif_chunks():
        per_pair.setdefault(index, []).append(size)
    sizes = [size for pair in per_pair.values() for size in pair]
    shape = selection.noisy_shape(plan.used_chunk_sizes())
    score = selection.score_joint
    out["selection_figures"] = {
        "mode": str(selection.mode), "indif_bits": selection.indif_bits,
        "score_bits": selection.score_bits, "chunk_sizes": list(plan.used_chunk_sizes()),
        "p2_chunks": len(sizes),
        "p2_chunks_by_size": {str(s): sizes.count(s) for s in sorted(set(sizes))},
        "p2_pairs_by_chunks": pairs_by_chunks([len(pair) for pair in per_pair.values()]),
        "p2_adds": sum(len(p) - 1 for p in per_pair.values()),
        "p2_digit_ciphertexts": sum(-(-selection.indif_bits // 2) * s for s in sizes),
        "bootstraps": {"p2": phases["p2"], "scores": phases["noise"], "p3": phases["p3"],
                       "total": sum(phases.values())},
        "score_function": shape.noise_function, "score_out_bits": shape.out_bits,
        "score_bootstraps_per_call": shape.noise_bootstraps,
        "score_lookup_bits": shape.lookup_bits,
        "score_noise": "two-server" if score is None else "joint",
        "score_shape": None if score is None else [score.uniforms, score.bits],
        "ks_score_coin_bits": 0 if score is None else len(cells) * score.ciphertexts,
        "p_error": selection.p_error}
    return out


# ----------------------------------------------------------------------------- compiler

def pairs_by_chunks(chunks_per_pair: list[int]) -> dict[str, int]:
    """How many pairs are cut into each number of P2 chunks (what P2's add levels depend
    on)."""
    return {str(n): chunks_per_pair.count(n) for n in sorted(set(chunks_per_pair))}


def p1_key(plan: SessionPlan) -> str:
    shapes = sorted((s.uniforms, s.bits) for s in plan.joint_shapes())
    return f"p1 k{plan.parameters.count_bits} c{plan.parameters.chunk_cells} {shapes}"


def module_key(plan: SessionPlan) -> str:
    """What fixes the module's keys and costs: P2's k, its chunk sizes, the score digits and
    the score function's widest lookup."""
    s = plan.selection.noisy_shape(plan.used_chunk_sizes())
    return (f"module k{s.count_bits} sizes{list(s.chunk_sizes)} n{s.score_bits} "
            f"{s.noise_function} lookup{s.lookup_bits}")


def compile_p1(plan: SessionPlan, clients: int = CLIENTS) -> dict:
    """Compile (no keys) the session's P1 circuit: ciphertext bytes per input and output."""
    from feddpsyn.crypto.aggregation import compile_aggregation
    from feddpsyn.crypto.joint_noise import compile_joint_release

    p = plan.parameters
    started = time.process_time()
    if plan.joint_columns:
        circuit = compile_joint_release(clients, p.chunk_cells, p.count_bits,
                                        plan.joint_shapes(), p.p_error)
    else:
        circuit = compile_aggregation(clients, p.chunk_cells, p.count_bits, p.p_error)
    seconds = time.process_time() - started
    stats = circuit.statistics
    inputs = p.chunk_cells * (clients + plan.joint_columns)
    return {"compile_s": seconds, "input_bytes": int(stats["size_of_inputs"]),
            "input_ciphertexts": inputs,
            "bytes_per_input_ciphertext": stats["size_of_inputs"] / inputs,
            "output_bytes_per_chunk": int(stats["size_of_outputs"])}


def compile_module(plan: SessionPlan) -> dict:
    """Compile (no keys) the session's noisy-score module: key bytes, bootstraps and bytes
    per function, the optimiser's complexity."""
    from feddpsyn.crypto.noisy_scores import compile_noisy_scores

    shape = plan.selection.noisy_shape(plan.used_chunk_sizes())
    started = time.process_time()
    module = compile_noisy_scores(shape, plan.selection.p_error)
    seconds = time.process_time() - started
    return module_statistics(module, seconds)


def module_statistics(module, compile_s: float) -> dict:
    stats = module.statistics
    functions = {name: {"bootstraps": int(f["programmable_bootstrap_count"]),
                        "input_bytes": int(f["size_of_inputs"]),
                        "output_bytes": int(f["size_of_outputs"])}
                 for name, f in stats["functions"].items()}
    bootstraps = sum(f["bootstraps"] for f in functions.values())
    return {"compile_s": compile_s,
            "bootstrap_key_bytes": int(stats["size_of_bootstrap_keys"]),
            "keyswitch_key_bytes": int(stats["size_of_keyswitch_keys"]),
            "complexity": float(stats["complexity"]),
            "complexity_per_bootstrap": float(stats["complexity"]) / bootstraps,
            "functions": functions}


def circuit_figures(plan: SessionPlan, cache: dict) -> dict:
    """P1's and the module's compile figures for a plan, compiled once per widths."""
    out = {}
    key = p1_key(plan)
    if key not in cache:
        cache[key] = compile_p1(plan)
    out["p1"] = cache[key]
    if plan.selection is not None:
        key = module_key(plan)
        if key not in cache:
            print(f"  compiling {key}", flush=True)
            cache[key] = compile_module(plan)
        out["module"] = cache[key]
    return out


# ----------------------------------------------------------------------------- checked calls
# One release chunk (the plain P1 with both servers' Gaussians, or the session's joint
# circuit) and one noisy-greedy score call, run as the servers run them and every output
# decrypted and checked against its plaintext model. The sample below measures them; the
# design studies experiments/joint_noise and experiments/joint_scores time them against
# each other.

# True counts of a measured chunk: any value the widths allow gives the same costs.
COUNT_BOUND = 1000


def keyed(circuit) -> fhe.Client:
    client = fhe.Client(circuit.client.specs)
    client.keys.generate(secret_seed=secrets.randbits(128),
                         encryption_seed=secrets.randbits(128))
    return client


@dataclass
class ChunkInputs:
    """One chunk as both servers hold it: the clients' masked vectors, encrypted by the KS's
    offline job under each variant's key (not timed: the same for both), the clear masks'
    sum, the selection and the true counts."""

    positions: list[int | None]  # each place's cell in the full vector (None: not released)
    select: np.ndarray
    true: np.ndarray
    mask_sum: np.ndarray
    masked: list[np.ndarray]


def chunk_inputs(part: ReleaseChunk, chunk_cells: int, k: int) -> ChunkInputs:
    select = np.zeros(chunk_cells, dtype=np.int64)
    select[part.places] = 1
    positions: list[int | None] = [None] * chunk_cells
    for place, cell in zip(part.places.tolist(), part.cells.tolist(), strict=True):
        positions[place] = cell
    true = np.array([secrets.randbelow(COUNT_BOUND) for _ in range(chunk_cells)],
                    dtype=np.int64)
    masks = [np.array([secrets.randbelow(1 << k) for _ in range(chunk_cells)], dtype=np.int64)
             for _ in range(CLIENTS)]
    shares = [true] + [np.zeros(chunk_cells, dtype=np.int64)] * (CLIENTS - 1)
    masked = [(x + s) % (1 << k) for x, s in zip(shares, masks, strict=True)]
    return ChunkInputs(positions, select, true, np.sum(masks, axis=0), masked)


def encrypt_clients(client: fhe.Client, inputs: ChunkInputs, arguments: int) -> list:
    args = list(inputs.masked) + [None] * (arguments - CLIENTS)
    return list(client.encrypt(*args)[:CLIENTS])


class TwoNoiseVariant:
    """A two-server session's release: plain P1, each server's Gaussian."""

    name = "two-noise"

    def __init__(self, circuit, client: fhe.Client, k: int, sigma2: Fraction, *,
                 clock=time.perf_counter):
        self.circuit, self.client, self.k, self.sigma2 = circuit, client, k, sigma2
        self.clock = clock  # wall seconds; bench_scale's sample reads CPU seconds

    def measure(self, inputs: ChunkInputs) -> tuple[dict[str, float], np.ndarray]:
        enc = encrypt_clients(self.client, inputs, CLIENTS + 2)
        cells = len(inputs.select)
        t = self.clock()
        cs_noise = discrete_gaussian_vector(self.sigma2, cells)
        ks_noise = discrete_gaussian_vector(self.sigma2, cells)
        draw = self.clock() - t
        t = self.clock()
        offset = release_offset(inputs.mask_sum, cs_noise, inputs.select, self.k)
        out = self.circuit.server.run(*enc, inputs.select, offset,
                                      evaluation_keys=self.client.evaluation_keys).serialize()
        cs = self.clock() - t
        t = self.clock()
        decrypted = np.asarray(self.client.decrypt(fhe.Value.deserialize(out)))
        published = publish_counts(decrypted, ks_noise, self.k)
        ks = self.clock() - t
        chosen = inputs.select == 1
        noise = (published - inputs.true)[chosen]
        if not np.array_equal(noise, (cs_noise + ks_noise)[chosen]):
            raise RuntimeError("two-noise release: published - true is not the two noises")
        return {"draw_s_per_value": draw / (2 * cells), "ks_bits_s": 0.0, "ks_cs_bytes": 0,
                "cs_s": cs, "ks_s": ks, "cs_ks_bytes": len(out)}, noise


class JointVariant:
    """The session's joint circuit: the KS's bits at the session's width, the CS's bits."""

    name = "joint"

    def __init__(self, circuit, client: fhe.Client, k: int, columns: int,
                 cell_shapes: dict[int, object], *, clock=time.perf_counter):
        self.circuit, self.client, self.k, self.columns = circuit, client, k, columns
        self.clock = clock
        self.cell_shapes = cell_shapes  # position -> the shape its group carries

    def measure(self, inputs: ChunkInputs) -> tuple[dict[str, float], np.ndarray]:
        enc = encrypt_clients(self.client, inputs, CLIENTS + 4)
        cells = len(inputs.select)
        shapes = [None if p is None else self.cell_shapes.get(p) for p in inputs.positions]
        t = self.clock()  # the KS's offline job (keyserver.coins)
        ks_bits = draw_bits(cells, self.columns)
        blob = encrypt_key_server_bits(self.client, CLIENTS, ks_bits).serialize()
        offline = self.clock() - t
        t = self.clock()  # the CS's release call (computeserver.service._aggregate)
        coins = fhe.Value.deserialize(blob)
        cs_bits = draw_bits(cells, self.columns)
        weights, clear = joint_operands(shapes, cs_bits, inputs.select, self.columns)
        offset = release_offset(inputs.mask_sum, clear, inputs.select, self.k)
        out = self.circuit.server.run(*enc, coins, weights, inputs.select, offset,
                                      evaluation_keys=self.client.evaluation_keys).serialize()
        cs = self.clock() - t
        t = self.clock()
        published = decode_release(np.asarray(self.client.decrypt(fhe.Value.deserialize(out))),
                                   self.k)
        ks = self.clock() - t
        chosen = np.flatnonzero(inputs.select == 1)
        noise = (published - inputs.true)[chosen]
        expected = np.array([joint_noise_plaintext(shapes[i], ks_bits[i:i + 1],
                                                   cs_bits[i:i + 1])[0] for i in chosen],
                            dtype=np.int64)
        if not np.array_equal(noise, expected):
            raise RuntimeError("joint release: published - true is not the XOR-shared noise")
        return {"draw_s_per_value": 0.0, "ks_bits_s": offline, "ks_cs_bytes": len(blob),
                "cs_s": cs, "ks_s": ks, "cs_ks_bytes": len(out)}, noise


class ScoreMismatch(RuntimeError):
    """A decrypted score differs from the plaintext model: the bench's numbers are void."""


def score_digits(value: int, bits: int) -> np.ndarray:
    return np.array([(value >> j) & 1 for j in range(bits)], dtype=np.int64)


class ScoreVariant:
    """One compiled score module (two-server ``noise`` or ``joint``) and its current keys."""

    def __init__(self, name: str, shape: NoisyScoreShape, module, sigma2: Fraction,
                 compile_s: float = 0.0):
        self.name, self.shape, self.module, self.sigma2 = name, shape, module, sigma2
        self.compile_s = compile_s
        self.client: fhe.Client | None = None
        self.evaluation_keys: fhe.EvaluationKeys | None = None

    @classmethod
    def compiled(cls, name: str, shape: NoisyScoreShape, p_error: float,
                 sigma2: Fraction) -> ScoreVariant:
        started = time.perf_counter()
        module = compile_noisy_scores(shape, p_error)
        return cls(name, shape, module, sigma2, time.perf_counter() - started)

    @property
    def function(self) -> str:
        return self.shape.noise_function

    @property
    def bootstraps(self) -> int:
        return int(getattr(self.module, self.function).statistics[
            "programmable_bootstrap_count"])

    def keygen(self) -> dict[str, float]:
        """Fresh keys from ``secrets`` seeds (the key server's way); the evaluation keys go
        through their bytes, as the compute server receives them."""
        self.client = self.evaluation_keys = None
        gc.collect()
        client = fhe.Client(self.module.client.specs)
        started = time.perf_counter()
        client.keys.generate(force=True, secret_seed=secrets.randbits(128),
                             encryption_seed=secrets.randbits(128))
        keygen_s = time.perf_counter() - started
        serialized = client.evaluation_keys.serialize()
        self.evaluation_keys = fhe.EvaluationKeys.deserialize(serialized)
        self.client = client
        return {"keygen_s": keygen_s, "evaluation_key_bytes": len(serialized)}

    def call(self, score: int) -> dict[str, float]:
        """One pair's noise addition on an encrypted score; decrypted and checked (raises
        :class:`ScoreMismatch`)."""
        x = score_digits(score, self.shape.score_bits)
        out: dict[str, float] = {}
        if self.shape.joint is None:
            z = int(discrete_gaussian_vector(self.sigma2, 1)[0])
            operand = noise_operand(z, self.shape)
            encrypted = self.client.encrypt(x, None, function_name=self.function)[0]
            arguments = (encrypted, operand)
            expected = noisy_score_plaintext(score, z, self.shape)
        else:
            joint = self.shape.joint
            ks_bits, cs_bits = draw_bits(1, joint), draw_bits(1, joint)
            encrypted = self.client.encrypt(x, None, None, function_name=self.function)[0]
            started = time.perf_counter()
            a = self.client.encrypt(None, ks_bits[0], None, function_name=self.function)[1]
            a_bytes = a.serialize()
            out["ks_bits_encrypt_s"] = time.perf_counter() - started
            out["ks_bits_bytes"] = len(a_bytes)
            arguments = (encrypted, fhe.Value.deserialize(a_bytes), cs_bits[0])
            z = int(joint_noise_plaintext(joint, ks_bits, cs_bits)[0])
            expected = joint_score_plaintext(score, ks_bits[0], cs_bits[0], self.shape)
        wall, cpu = time.perf_counter(), time.process_time()
        result = self.module.server.run(*arguments, evaluation_keys=self.evaluation_keys,
                                        function_name=self.function)
        out["call_s"] = time.perf_counter() - wall
        out["call_cpu_s"] = time.process_time() - cpu
        digits = np.asarray(self.client.decrypt(result, function_name=self.function)).ravel()
        decoded = (decode_noisy_score(digits.tolist(), self.shape) if self.shape.joint is None
                   else decode_joint_score(digits.tolist(), self.shape))
        if digits.tolist() != expected or decoded != score + z:
            raise ScoreMismatch(f"{self.name}: score {score} noise {z} decrypted to "
                                f"{digits.tolist()}, the model says {expected}")
        return out


# ----------------------------------------------------------------------------- measured

def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def measure_p1(count_bits: int, cells: int, shapes: list, repeats: int) -> dict:
    """P1 plain and with the joint noise on one chunk of ``cells`` cells (run in a child:
    its peak RSS is its own): the checked calls' variants, timed in CPU seconds of this
    process (on a shared machine at low priority, wall seconds measure the queue)."""
    from feddpsyn.crypto.aggregation import compile_aggregation
    from feddpsyn.crypto.joint_noise import JointNoiseShape, columns_for, compile_joint_release

    shapes = [JointNoiseShape(u, b) for u, b in shapes]
    columns = columns_for(shapes)
    started = rss_mb()
    plain = compile_aggregation(CLIENTS, cells, count_bits, 2.0 ** -40)
    joint = compile_joint_release(CLIENTS, cells, count_bits, shapes, 2.0 ** -40)
    t = time.process_time()
    plain_client, joint_client = keyed(plain), keyed(joint)
    keygen_s = time.process_time() - t
    widest = max(shapes, key=lambda s: s.ciphertexts)
    variants = [TwoNoiseVariant(plain, plain_client, count_bits, Fraction(16),
                                clock=time.process_time),
                JointVariant(joint, joint_client, count_bits, columns,
                             dict.fromkeys(range(cells), widest), clock=time.process_time)]
    runs: dict[str, list[dict]] = {v.name: [] for v in variants}
    encrypt = []
    for _ in range(repeats):
        whole = np.arange(cells)
        inputs = chunk_inputs(ReleaseChunk(0, whole, whole, False), cells, count_bits)
        for variant in variants:
            runs[variant.name].append(variant.measure(inputs)[0])
        args: list = [None] * (CLIENTS + 2)
        args[0] = inputs.masked[0]
        t = time.process_time()
        blob = plain_client.encrypt(*args)[0].serialize()
        encrypt.append((time.process_time() - t, len(blob)))
    best = {name: {key: min(r[key] for r in rows) for key in rows[0]}
            for name, rows in runs.items()}
    return {"count_bits": count_bits, "cells": cells, "columns": columns,
            "bits": cells * columns, "repeats": repeats, "keygen_s": keygen_s,
            "plain_cs_s": best["two-noise"]["cs_s"], "plain_ks_s": best["two-noise"]["ks_s"],
            "joint_cs_s": best["joint"]["cs_s"], "joint_ks_s": best["joint"]["ks_s"],
            "ks_coins_s": best["joint"]["ks_bits_s"],
            "ks_coins_bytes": best["joint"]["ks_cs_bytes"],
            "joint_output_bytes": best["joint"]["cs_ks_bytes"],
            "plain_output_bytes": best["two-noise"]["cs_ks_bytes"],
            "ks_encrypt_client_chunk_s": min(s for s, _ in encrypt),
            "client_chunk_bytes": encrypt[0][1],
            "rss_before_mb": started, "peak_rss_mb": rss_mb()}


def measure_module(shape_fields: dict, p_error: float, calls: int) -> dict:
    """The noisy-score module at the given widths (a child process): compile, keygen, a P2
    chunk of 8 cells, an ``add`` and a score call, each timed, decrypted and checked."""
    from feddpsyn.crypto.indif import digits_of, indif_exact, indif_from_bits, indif_offset
    from feddpsyn.dp.joint_noise_accounting import JointNoiseShape

    fields = dict(shape_fields)
    joint = fields.pop("joint")
    shape = NoisyScoreShape(**fields, joint=None if joint is None else JointNoiseShape(*joint))
    t = time.process_time()
    module = compile_noisy_scores(shape, p_error)
    variant = ScoreVariant("joint" if joint else "two-server", shape, module, Fraction(16),
                           time.process_time() - t)
    figures = module_statistics(variant.module, variant.compile_s)
    t = time.process_time()
    keys = variant.keygen()
    keygen_s = time.process_time() - t
    client, evaluation = variant.client, variant.evaluation_keys
    server, k, n = variant.module.server, shape.count_bits, shape.score_bits
    rng = np.random.default_rng(1)
    chunk, add, encrypt, decrypt, score = [], [], [], [], []
    for _ in range(calls):
        counts, expected = rng.integers(0, 40, 8), rng.integers(0, 40, 8)
        mask = rng.integers(0, 1 << k, 8)
        t = time.process_time()
        masked = client.encrypt(digits_of((counts + mask) % (1 << k), k), None,
                                function_name="indif_8")[0]
        blob = masked.serialize()
        encrypt.append(time.process_time() - t)
        t = time.process_time()
        out = server.run(fhe.Value.deserialize(blob), digits_of(indif_offset(mask, expected, k), k),
                         evaluation_keys=evaluation, function_name="indif_8")
        chunk.append(time.process_time() - t)
        t = time.process_time()
        total = server.run(out, out, evaluation_keys=evaluation, function_name="add")
        add.append(time.process_time() - t)
        t = time.process_time()
        bits = client.decrypt(total, function_name="add")
        decrypt.append(time.process_time() - t)
        exact = indif_exact(counts, expected)
        if indif_from_bits(bits) != 2 * exact:
            raise RuntimeError("a P2 chunk plus itself did not decrypt to twice its InDif")
        score.append(variant.call(min(exact, (1 << n) - 1))["call_cpu_s"])
    f = figures["functions"]
    return {**figures, "shape": shape_fields, "keygen_s": keygen_s,
            "evaluation_key_bytes": keys["evaluation_key_bytes"], "calls": calls,
            "p2_chunk_8_s": min(chunk), "add_s": min(add), "score_call_s": min(score),
            "ks_encrypt_p2_chunk_8_s": min(encrypt), "p2_chunk_8_bytes": len(blob),
            "ks_decrypt_score_s": min(decrypt),
            "s_per_bootstrap_p2": min(chunk) / f["indif_8"]["bootstraps"],
            "s_per_bootstrap_add": min(add) / f["add"]["bootstraps"],
            "s_per_bootstrap_score": min(score) / f[shape.noise_function]["bootstraps"],
            "peak_rss_mb": rss_mb()}


def in_child(function, *args):
    """Run ``function(*args)`` in a fresh spawned process (its own peak RSS, its own OpenMP
    threads from the environment)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def measure_sample(smallest: SessionPlan, widths: tuple[int, ...], cells: tuple[int, ...],
                   repeats: int) -> dict:
    """The sample (module docstring): P1 at each width and chunk size, the module at the
    smallest noisy-greedy point's widths."""
    shapes = [(s.uniforms, s.bits) for s in smallest.joint_shapes()]
    p1 = []
    for k in widths:
        for c in cells:
            print(f"  measuring P1 at k = {k}, {c} cells", flush=True)
            p1.append(in_child(measure_p1, k, c, shapes, repeats))
    s = smallest.selection.noisy_shape(smallest.used_chunk_sizes())
    fields = {"count_bits": s.count_bits, "chunk_sizes": s.chunk_sizes,
              "score_bits": s.score_bits, "noise_bits": s.noise_bits,
              "joint": SAMPLE_SCORE_SHAPE}
    print(f"  measuring the score module {fields}", flush=True)
    module = in_child(measure_module, fields, smallest.selection.p_error, repeats)
    return {"p1": p1, "module": module, "shapes": shapes}


# ----------------------------------------------------------------------------- the model

@dataclass
class Units:
    """Seconds on one core per unit of work, from the sample (module docstring)."""

    p1: list[dict]
    module: dict
    # Every bootstrap's seconds times this (1: the sample's CPU seconds; the "calibrated"
    # case: the rate Adult's served session measured, ``calibration``).
    bootstrap_scale: float = 1.0

    def p1_line(self, key: str, count_bits: int, size: str) -> tuple[float, float]:
        """(fixed seconds, seconds per unit of ``size``: "cells" or "bits") of a P1 figure:
        each measured width's least-squares line over its chunk sizes, then linear in k
        between the measured widths (held flat outside them)."""
        by_k: dict[int, list[dict]] = {}
        for m in self.p1:
            by_k.setdefault(m["count_bits"], []).append(m)
        lines = {k: fit([m[size] for m in ms], [m[key] for m in ms])
                 for k, ms in by_k.items()}
        ks = sorted(lines)
        if count_bits <= ks[0]:
            return lines[ks[0]]
        if count_bits >= ks[-1]:
            return lines[ks[-1]]
        high = next(k for k in ks if k >= count_bits)
        low = max(k for k in ks if k < count_bits)
        w = (count_bits - low) / (high - low)
        return tuple((1 - w) * a + w * b for a, b in zip(lines[low], lines[high],
                                                           strict=True))

    def p1_chunk(self, key: str, count_bits: int, amount: int, size: str) -> float:
        fixed, per = self.p1_line(key, count_bits, size)
        return max(0.0, fixed) + per * amount

    def bootstrap_s(self, complexity_per_bootstrap: float | None) -> float:
        """Seconds a P2 bootstrap of a module of this complexity per bootstrap."""
        m = self.module
        ratio = (1.0 if complexity_per_bootstrap is None
                 else complexity_per_bootstrap / m["complexity_per_bootstrap"])
        return m["s_per_bootstrap_p2"] * ratio * self.bootstrap_scale

    @property
    def score_factor(self) -> float:
        """A score call's seconds per bootstrap over a P2 chunk's (same module)."""
        return self.module["s_per_bootstrap_score"] / self.module["s_per_bootstrap_p2"]

    @property
    def add_factor(self) -> float:
        return self.module["s_per_bootstrap_add"] / self.module["s_per_bootstrap_p2"]

    @property
    def keygen_s_per_key_byte(self) -> float:
        m = self.module
        return m["keygen_s"] / (m["bootstrap_key_bytes"] + m["keyswitch_key_bytes"])


def fit(x: list[float], y: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope); one point: a line through the origin."""
    if len(set(x)) < 2:
        return 0.0, sum(y) / sum(x)
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    slope = (sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
             / sum((a - mx) ** 2 for a in x))
    return my - slope * mx, slope


@dataclass
class Step:
    name: str
    phase: str            # prepare, offline, uploads, online
    host: str             # ks or cs
    tasks: list[float]    # independent tasks, seconds each on one core
    serial_s: float = 0.0
    levels: list[tuple[int, float]] = field(default_factory=list)  # (adds, seconds) a level
    scales_today: bool = False

    @property
    def work_s(self) -> float:
        return sum(self.tasks) + self.serial_s + sum(n * c for n, c in self.levels)


def longest_first(costs: list[float], workers: int) -> float:
    """Makespan of list scheduling, longest task first (``bench_scaleout.longest_first`` on a
    heap: a point has up to ~10^4 tasks)."""
    if not costs:
        return 0.0
    finish = [0.0] * min(workers, len(costs))
    heapq.heapify(finish)
    for cost in sorted(costs, reverse=True):
        heapq.heappush(finish, heapq.heappop(finish) + cost)
    return max(finish)


def step_seconds(step: Step, cores: int, today: bool = False,
                 overhead: float = TASK_OVERHEAD_S) -> float:
    """The step on ``cores`` cores (module docstring); ``today``: on one core unless it was
    measured to speed up on this code's executors."""
    if cores == 1 or (today and not step.scales_today):
        return step.work_s
    tasks = longest_first([c + overhead for c in step.tasks], cores)
    adds = sum(math.ceil(n / cores) * (c + overhead) for n, c in step.levels)
    # A step whose tasks gain nothing from the cores (one release chunk) runs as on one
    # core: the executor's overhead would only add to it.
    return min(step.work_s, tasks + adds + step.serial_s)


def session_steps(figures: dict, circuits: dict | None, units: Units) -> list[Step]:
    """A point's steps (module docstring), each task's cost from the units."""
    k, chunk, columns = figures["count_bits"], figures["chunk_cells"], figures["joint_columns"]
    clients = figures["clients"]
    bits = chunk * columns
    if columns:
        cs_chunk = units.p1_chunk("joint_cs_s", k, bits, "bits")
        ks_decrypt = units.p1_chunk("joint_ks_s", k, chunk, "cells")
    else:
        cs_chunk = units.p1_chunk("plain_cs_s", k, chunk, "cells")
        ks_decrypt = units.p1_chunk("plain_ks_s", k, chunk, "cells")
    coins = units.p1_chunk("ks_coins_s", k, bits, "bits") if columns else 0.0
    encrypt = units.p1_chunk("ks_encrypt_client_chunk_s", k, chunk, "cells")
    p1_compile = 0.0 if circuits is None else circuits["p1"]["compile_s"]
    steps = []
    releases = {r["name"]: r for r in figures["releases"]}
    selection = figures["selection_figures"]
    module = None if circuits is None else circuits.get("module")
    prepare = p1_compile + min(m["keygen_s"] for m in units.p1)
    if selection is not None:
        key_bytes = (module["bootstrap_key_bytes"] + module["keyswitch_key_bytes"]
                     if module else units.module["bootstrap_key_bytes"]
                     + units.module["keyswitch_key_bytes"])
        prepare += (module or units.module)["compile_s"] + key_bytes * units.keygen_s_per_key_byte
    steps.append(Step("prepare (compile, keys)", "prepare", "ks", [], prepare))
    coin_chunks = figures["ks_coin_chunks"]
    score_coins = [] if selection is None else (
        [units.p1_chunk("ks_coins_s", k, selection["score_shape"][0]
                        * selection["score_shape"][1], "bits")] * figures["pairs"]
        if selection["score_shape"] else [])
    # The key server's encryptions run on its offline pool but do not speed up today (module
    # docstring: every compressed ciphertext's seed comes from RDSEED, shared by the cores).
    steps.append(Step("key server coins", "offline", "ks", [coins] * coin_chunks + score_coins,
                      scales_today=False))
    steps.append(Step("key server encrypts uploads", "uploads", "ks",
                      [encrypt] * (clients * figures["chunks"]), scales_today=False))
    one = releases["one_way"]
    steps.append(Step("1-way release", "online", "cs", [cs_chunk] * one["chunks"],
                      ks_decrypt * one["chunks"], scales_today=True))
    if selection is not None:
        s = units.bootstrap_s(module["complexity_per_bootstrap"] if module else None)
        digit = units.module["ks_encrypt_p2_chunk_8_s"] / (
            8 * -(-units.module["shape"]["count_bits"] // 2))
        digits_per_cell = -(-selection["indif_bits"] // 2)
        sizes = [int(size) for size, n in selection["p2_chunks_by_size"].items()
                 for _ in range(n)]
        steps.append(Step("key server encrypts P2 inputs", "online", "ks",
                          [digit * digits_per_cell * size for size in sizes],
                          scales_today=False))
        add_s = (2 * selection["score_bits"] - 1) * s * units.add_factor
        steps.append(Step("P2 (dependency scores)", "online", "cs",
                          [chunk_bootstraps(size, selection["indif_bits"]) * s
                           for size in sizes],
                          levels=[(n, add_s) for n in add_levels(
                              [int(chunks) for chunks, pairs in
                               selection["p2_pairs_by_chunks"].items() for _ in range(pairs)])]
                          if figures["pairs"] else [],
                          scales_today=True))
        call = selection["score_bootstraps_per_call"] * s * units.score_factor
        steps.append(Step("score noise", "online", "cs", [call] * figures["pairs"],
                          scales_today=True))
        steps.append(Step("key server decrypts scores, greedy rule", "online", "ks", [],
                          units.module["ks_decrypt_score_s"] * figures["pairs"]))
    two = releases["two_way"]
    steps.append(Step("2-way release", "online", "cs", [cs_chunk] * two["chunks"],
                      ks_decrypt * two["chunks"], scales_today=True))
    return steps


def projection(steps: list[Step], cores: tuple[int, ...] = CORES,
               calibrated: list[Step] | None = None) -> dict:
    """Per core count: each step's seconds, the phases' and the session's, for the model
    (every step on the cores), for today's code, and (``calibrated``: the steps at the
    calibrated bootstrap rate) the model at that rate."""
    out = {}
    cases = [("model", steps, False), ("today", steps, True)]
    if calibrated is not None:
        cases.append(("calibrated", calibrated, False))
    for n in cores:
        for case, steps, today in cases:
            per = {s.name: step_seconds(s, n, today) for s in steps}
            phase = {}
            for s in steps:
                phase[s.phase] = phase.get(s.phase, 0.0) + per[s.name]
            # Upload to release: the last client's upload encrypted, then the online steps.
            last = next(s for s in steps if s.phase == "uploads")
            last_s = step_seconds(Step(last.name, last.phase, last.host,
                                       last.tasks[:len(last.tasks) // CLIENTS]), n, today)
            out.setdefault(str(n), {})[case] = {
                "steps_s": per, "phases_s": phase, "session_s": sum(per.values()),
                "upload_to_release_s": last_s + phase.get("online", 0.0)}
    return out


def memory_estimate(figures: dict, circuits: dict | None, sample: dict) -> dict:
    """Peak resident bytes per server process (module docstring): the compute server's
    worker holds the module's keys (uncompressed) and one P1 chunk expanded; the key server's
    keygen holds the keys it makes. The P1 chunk's working set is the sample's measured peak
    RSS, as a line in the chunk's input ciphertexts (clients + columns a cell), at the
    nearest measured width."""
    k = figures["count_bits"]
    nearest = min({m["count_bits"] for m in sample["p1"]}, key=lambda w: abs(w - k))
    measured = [m for m in sample["p1"] if m["count_bits"] == nearest]
    base, per = fit([m["cells"] * (CLIENTS + m["columns"]) for m in measured],
                    [m["peak_rss_mb"] * 1e6 for m in measured])
    chunk = figures["chunk_cells"] * (figures["clients"] + figures["joint_columns"])
    p1 = max(base, 0.0) + per * chunk
    keys = 0
    if figures["selection_figures"] is not None:
        module = circuits.get("module") if circuits else None
        source = module or sample["module"]
        keys = source["bootstrap_key_bytes"] + source["keyswitch_key_bytes"]
    return {"cs_worker_bytes": int(p1 + keys), "cs_p1_chunk_bytes": int(p1),
            "evaluation_key_bytes_uncompressed": keys,
            "ks_keygen_bytes": int(max(base, 0.0) + keys)}


def byte_figures(figures: dict, circuits: dict | None, sample: dict) -> dict:
    """Ciphertext bytes moved in a session, from the compiler's sizes (or the sample's)."""
    clients, chunks = figures["clients"], figures["chunks"]
    p1 = circuits["p1"] if circuits else None
    per_input = (p1["bytes_per_input_ciphertext"] if p1 else
                 sample["p1"][0]["client_chunk_bytes"] / sample["p1"][0]["cells"])
    out_chunk = (p1["output_bytes_per_chunk"] if p1 else None)
    touched = sum(r["chunks"] for r in figures["releases"])
    out = {"upload_per_client": figures["upload_bytes_per_client"],
           "ks_to_cs_client_ciphertexts": int(clients * chunks * figures["chunk_cells"]
                                              * per_input),
           "ks_to_cs_release_coins": int(figures["ks_release_coin_bits"] * per_input),
           "cs_to_ks_releases": None if out_chunk is None else int(touched * out_chunk)}
    selection = figures["selection_figures"]
    module = circuits.get("module") if circuits else None
    if selection is not None:
        out["ks_to_cs_score_coins"] = int(selection["ks_score_coin_bits"] * per_input)
        out["ks_to_cs_p2_inputs"] = int(selection["p2_digit_ciphertexts"] * per_input)
        if module:
            score = module["functions"][selection["score_function"]]["output_bytes"]
            out["cs_to_ks_scores"] = figures["pairs"] * score
            keys = module["bootstrap_key_bytes"] + module["keyswitch_key_bytes"]
            ratio = (sample["module"]["evaluation_key_bytes"]
                     / (sample["module"]["bootstrap_key_bytes"]
                        + sample["module"]["keyswitch_key_bytes"]))
            out["evaluation_keys_uncompressed"] = keys
            out["evaluation_keys_compressed_estimate"] = int(keys * ratio)
    return out


# ----------------------------------------------------------------------------- the sweep

def sweep_point(columns: list[tuple[str, int]], rows: int,
                selection: str) -> tuple[dict, SessionPlan | None]:
    """One point from the plan alone."""
    planned = plan_for(schema_of(columns), rows, selection)
    point = {"columns": len(columns), "rows": rows, "selection": selection,
             "parameter_set": planned.parameter_set, "plan_s": planned.seconds,
             "accepted": planned.plan is not None,
             "default_set_refused": bool(planned.refusals)}
    if planned.refusals:
        point["refusals"] = planned.refusals
    if planned.plan is not None:
        point.update(plan_figures(planned.plan))
    return point, planned.plan


def largest_within(points: list[dict], budget_s: float, cores: int, case: str,
                   key: str = "session_s") -> dict:
    """Per row count, the most columns whose default-selection session fits ``budget_s`` on
    ``cores`` cores (the grid's columns only)."""
    out = {}
    for rows in sorted({p["rows"] for p in points}):
        fits = [p["columns"] for p in points
                if p["rows"] == rows and p["selection"] == SELECTIONS[0] and p.get("projection")
                and p["projection"][str(cores)][case][key] <= budget_s]
        out[str(rows)] = max(fits) if fits else None
    return out


def model_point(point: dict, units: Units, calibrated: Units, sample: dict) -> None:
    """A planned point's steps, projection, memory and bytes (in place)."""
    circuits = point.get("circuits")
    steps = session_steps(point, circuits, units)
    point["work_s"] = {s.name: s.work_s for s in steps}
    point["tasks"] = {s.name: len(s.tasks) for s in steps}
    point["projection"] = projection(steps,
                                     calibrated=session_steps(point, circuits, calibrated))
    point["memory"] = memory_estimate(point, circuits, sample)
    point["bytes"] = byte_figures(point, circuits, sample)


def calibration_factor(units: Units, adult: dict, pool: list[tuple[str, int]], cache: dict,
                       no_compile: bool) -> dict:
    """The seconds a P2 bootstrap a core that Adult's served session measured (wall seconds
    x 2 cores over its bootstraps: an upper bound on its CPU seconds, the machine being
    shared) over what the model gives Adult's module: the "calibrated" case multiplies every
    bootstrap by it."""
    planned = plan_for(schema_of(pool[:15]), 32_561, SELECTIONS[0])
    circuits = None if no_compile else circuit_figures(planned.plan, cache)
    model = units.bootstrap_s(circuits["module"]["complexity_per_bootstrap"]
                              if circuits else None)
    measured = adult["p2_em_session"]["s_per_bootstrap_core"]
    return {"factor": measured / model, "adult_measured_s_per_bootstrap": measured,
            "adult_model_s_per_bootstrap": model}


SEARCH_RESOLUTION = 5
SEARCH_MAX_COLUMNS = 240


def search_largest(rows: int, grid: list[dict], pool: list[tuple[str, int]], units: Units,
                   calibrated: Units, sample: dict, cache: dict,
                   compile_figures: bool) -> list[dict]:
    """The most columns whose default session fits the budget on ``BUDGET_CORES`` cores at
    ``rows`` rows, for the model and the calibrated case, to ``SEARCH_RESOLUTION`` columns:
    from the grid's last fit, doubling the step past the grid, then bisecting. Returns the
    points planned for it (each a full point)."""
    budget = BUDGET_MIN * 60
    probes: dict[int, dict] = {p["columns"]: p for p in grid
                               if p["rows"] == rows and p["selection"] == SELECTIONS[0]
                               and p.get("projection")}
    new: list[dict] = []

    def fits(count: int, case: str) -> bool:
        if count not in probes:
            point, plan = sweep_point(scale_columns(count, pool), rows, SELECTIONS[0])
            probes[count] = point
            new.append(point)
            if plan is None:
                return False
            if compile_figures:
                point["circuits"] = circuit_figures(plan, cache)
            model_point(point, units, calibrated, sample)
            print(f"  search {rows:,} rows, {count} columns: session on {BUDGET_CORES} cores "
                  f"{point['projection'][str(BUDGET_CORES)]['model']['session_s'] / 60:.1f} "
                  "min (model)", flush=True)
        point = probes[count]
        return bool(point.get("projection")) and (
            point["projection"][str(BUDGET_CORES)][case]["session_s"] <= budget)

    for case in ("model", "calibrated"):
        known = sorted(probes)
        fitting = [c for c in known if fits(c, case)]
        if not fitting:
            continue
        low = max(fitting)
        above = [c for c in known if c > low]
        high = min(above) if above else None
        step = 2 * SEARCH_RESOLUTION
        while high is None and low + step <= SEARCH_MAX_COLUMNS:  # bounded: doubling
            trial = low + step
            if fits(trial, case):
                low, step = trial, 2 * step
            else:
                high = trial
        while high is not None and high - low > SEARCH_RESOLUTION:  # bounded: bisection
            middle = (low + high) // 2
            if fits(middle, case):
                low = middle
            else:
                high = middle
    return new


def machine() -> dict:
    load = os.getloadavg()
    return {"cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "load_average_at_start": round(load[0], 2),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "nice": os.nice(0)}


def git_commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "bench/scale/bench_scale.py"],
                           cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return head + ("-dirty" if dirty else "")


def adult_measured() -> dict:
    """Adult's figures measured through the servers, from the kept result files: the joint
    releases (``joint_noise.json``) and P2 of a served em session (``adult_online.json``)."""
    results = ROOT / "bench" / "results"
    out: dict = {}
    noise = json.loads((results / "joint_noise.json").read_text())
    for r in noise["releases"]:
        if r["session"] not in ("adult-none", "adult-noisy-greedy"):
            continue
        j = r["variants"]["joint"]
        out.setdefault(r["session"], {})[r["release"]] = {
            "cs_online_s": j["cs_online_s"], "offline_ks_bits_s": j["offline_ks_bits_s"],
            "chunks_touched": r["chunks_touched"], "chunks_prepared": r["chunks_prepared"]}
    out["joint_noise_commit"] = noise.get("commit")
    online = json.loads((results / "adult_online.json").read_text())
    out["p2_em_session"] = {"p2_s_on_2_cores": online["measured"]["p2_s"],
                            "p2_bootstraps": online["model"]["p2_bootstraps"],
                            "s_per_bootstrap_core": online["model"]["seconds_per_bootstrap_p2"]}
    return out


def plot(points: list[dict], path: Path, rows_shown: tuple[int, ...]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, grid = plt.subplots(1, len(rows_shown), figsize=(5 * len(rows_shown), 4.2),
                                sharey=True, squeeze=False)
    axes = list(grid[0])
    for ax, rows in zip(axes, rows_shown, strict=True):
        chosen = sorted((p for p in points if p["rows"] == rows and p.get("projection")
                         and p["selection"] == SELECTIONS[0]), key=lambda p: p["columns"])
        for n in CORES:
            ax.plot([p["columns"] for p in chosen],
                    [p["projection"][str(n)]["model"]["session_s"] / 60 for p in chosen],
                    marker="o", label=f"{n} core{'s' if n > 1 else ''}")
        ax.plot([p["columns"] for p in chosen],
                [p["projection"][str(BUDGET_CORES)]["calibrated"]["session_s"] / 60
                 for p in chosen], color="black", linestyle=":",
                label=f"{BUDGET_CORES}, Adult's bootstrap rate")
        ax.axhline(BUDGET_MIN, color="grey", linestyle="--", linewidth=1)
        ax.set_yscale("log")
        ax.set_xlabel("columns")
        ax.set_title(f"{rows:,} rows" + (" (what-if k)" if any(
            p["parameter_set"] != DEFAULT_SET for p in chosen) else ""))
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("projected session, minutes (model)")
    axes[-1].legend(title="cores", fontsize=8)
    figure.suptitle("Default plan (noisy-greedy, noise auto): projected session time "
                    "(dashed: 30 min)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def _shown(path: Path) -> str:
    """A path as the results file records it: relative to the checkout when inside it (a
    run writing elsewhere, to compare before copying, keeps its absolute path)."""
    resolved = path.resolve()
    return (resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT)
            else resolved.as_posix())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--columns", type=int, nargs="+", default=list(COLUMNS))
    parser.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    parser.add_argument("--selections", nargs="+", default=list(SELECTIONS))
    parser.add_argument("--no-compile", action="store_true",
                        help="skip concrete's compile figures (keys, ciphertext bytes)")
    parser.add_argument("--sample-widths", type=int, nargs="+", default=[20, 25],
                        help="P1 count widths measured")
    parser.add_argument("--sample-cells", type=int, nargs="+", default=[32, 128],
                        help="P1 chunk sizes measured")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sample", type=Path, default=None,
                        help="read the measured sample from this JSON (a previous --out)")
    parser.add_argument("--cache", type=Path, default=None,
                        help="compile figures cache (JSON), read and written")
    parser.add_argument("--no-search", action="store_true",
                        help="skip the search past the grid for the largest table in budget")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    started_at = time.time()
    info = machine()
    pool = column_pool()
    cache = json.loads(args.cache.read_text()) if args.cache and args.cache.exists() else {}

    points, plans = [], {}
    for rows in args.rows:
        for count in args.columns:
            for selection in args.selections:
                point, plan = sweep_point(scale_columns(count, pool), rows, selection)
                if plan is not None and not args.no_compile:
                    point["circuits"] = circuit_figures(plan, cache)
                    if args.cache:
                        args.cache.write_text(json.dumps(cache, indent=1) + "\n")
                points.append(point)
                plans[(count, rows, selection)] = plan
                sel = point.get("selection_figures") or {}
                print(f"{count:3d} columns {rows:>10,} rows {selection:>12}: plan "
                      f"{point['plan_s']:.1f} s, {point['parameter_set']}, "
                      f"{point.get('pairs', '-')} pairs, {point.get('two_way_cells', '-')} "
                      f"2-way cells, {point.get('joint_columns', '-')} bits a count, "
                      f"bootstraps {(sel.get('bootstraps') or {}).get('total', 0):,}",
                      flush=True)

    sample_from = None
    if args.sample:
        earlier = json.loads(args.sample.read_text())
        sample = earlier["sample"]
        sample_from = {key: earlier.get(key) for key in ("command", "commit", "date",
                                                          "machine")}
    else:
        smallest = next(plans[key] for key in sorted(plans, key=lambda k: (k[1], k[0]))
                        if key[2] == SELECTIONS[0] and plans[key] is not None)
        sample = measure_sample(smallest, tuple(args.sample_widths),
                                tuple(args.sample_cells), args.repeats)
    units = Units(sample["p1"], sample["module"])
    adult = adult_measured()
    calibration = calibration_factor(units, adult, pool, cache, args.no_compile)
    calibrated = Units(sample["p1"], sample["module"], calibration["factor"])
    search: list[dict] = []
    for point in points:
        if not point["accepted"]:
            continue
        model_point(point, units, calibrated, sample)
    for rows in [] if args.no_search else args.rows:
        search += search_largest(rows, points, pool, units, calibrated, sample, cache,
                                 not args.no_compile)
        if args.cache:
            args.cache.write_text(json.dumps(cache, indent=1) + "\n")

    check = []
    for selection in args.selections:
        planned = plan_for(schema_of(pool[:15]), 32_561, selection)
        if planned.plan is None:
            continue
        figures = plan_figures(planned.plan)
        circuits = None if args.no_compile else circuit_figures(planned.plan, cache)
        steps = {s.name: s for s in session_steps(figures, circuits, units)}
        entry = {"columns": 15, "rows": 32_561, "selection": selection, "table": "adult",
                 "model_1_core_s": {name: s.work_s for name, s in steps.items()},
                 "model_2_cores_today_s": {name: step_seconds(s, 2, True)
                                           for name, s in steps.items()},
                 "model_two_way_chunks": next(r["chunks"] for r in figures["releases"]
                                              if r["name"] == "two_way"),
                 "joint_columns": figures["joint_columns"]}
        if figures["selection_figures"]:
            entry["model_p2_bootstraps"] = figures["selection_figures"]["bootstraps"]["p2"]
            entry["model_s_per_bootstrap"] = units.bootstrap_s(
                circuits["module"]["complexity_per_bootstrap"] if circuits else None)
        check.append(entry)

    budget = BUDGET_MIN * 60
    document = {
        "command": " ".join(["bench/scale/bench_scale.py", *(argv if argv is not None
                                                        else sys.argv[1:])]),
        "commit": git_commit(), "date": started, "machine": info,
        "seconds": time.time() - started_at,
        "epsilon": EPSILON, "delta": DELTA, "clients": CLIENTS, "cores": list(CORES),
        "task_overhead_s": TASK_OVERHEAD_S, "budget_min": BUDGET_MIN,
        "budget_cores": BUDGET_CORES,
        "columns_source": [t for t, _, _ in SOURCES],
        "model": ("tasks list-scheduled longest first on n cores, each plus the per-task "
                  "overhead; P2's adds by levels in waves; serial parts serial; P2 and score "
                  "bootstraps at the sample's seconds scaled by the module's complexity per "
                  "bootstrap; P1 per encrypted bit; 'today': the key server's encryptions "
                  "(measured not to speed up with workers) stay on one core; noisy-greedy's "
                  "2-way release at its worst case (every pair)"),
        "sample": sample, "sample_from": sample_from, "units": {
            "s_per_bootstrap_p2_sample": units.module["s_per_bootstrap_p2"],
            "score_factor": units.score_factor, "add_factor": units.add_factor,
            "keygen_s_per_key_byte": units.keygen_s_per_key_byte},
        "calibration": calibration,
        "largest_within_budget": {
            case: largest_within(points + search, budget, BUDGET_CORES, case)
            for case in ("model", "calibrated", "today")},
        "largest_within_budget_online": {
            case: largest_within(points + search, budget, BUDGET_CORES, case,
                                 "upload_to_release_s")
            for case in ("model", "calibrated", "today")},
        "search_resolution_columns": SEARCH_RESOLUTION,
        "search_points": sorted(search, key=lambda p: (p["rows"], p["columns"])),
        "adult_check": {"model": check, "measured": adult},
        "plot": None if args.plot is None else _shown(args.plot),
        "points": points}
    print_summary(document)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(dump(document))
        print(f"written {args.out}")
    if args.plot:
        shown = tuple(r for r in (10_000, 100_000, 1_000_000) if r in args.rows) or (
            args.rows[0],)
        plot(points + search, args.plot, shown)
        print(f"written {args.plot}")


def rounded(value, digits: int = 6):
    """``value`` with every float to ``digits`` significant digits (the file stays small)."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value


def dump(document: dict) -> str:
    """The document as JSON, indented, with each point on one line."""
    document = rounded(document)
    lists = ("points", "search_points")
    head = json.dumps({k: v for k, v in document.items() if k not in lists}, indent=1)
    text = head[:-2]
    for key in lists:
        items = ",\n  ".join(json.dumps(p, separators=(",", ":")) for p in document[key])
        text += f',\n "{key}": [\n  {items}\n ]'
    return text + "\n}\n"


def print_summary(document: dict) -> None:
    print("\ncolumns rows selection: pairs, 2-way cells, bits a count, bootstraps; "
          "session minutes on 1 / 2 / 16 / 64 / 192 cores (model)")
    for p in document["points"]:
        if not p["accepted"]:
            print(f"{p['columns']:3d} {p['rows']:>10,} {p['selection']:>12}: refused")
            continue
        sel = p["selection_figures"] or {}
        minutes = " / ".join(f"{p['projection'][str(n)]['model']['session_s'] / 60:.1f}"
                             for n in CORES)
        print(f"{p['columns']:3d} {p['rows']:>10,} {p['selection']:>12}: {p['pairs']} "
              f"pairs, {p['two_way_cells']:,} cells, {p['joint_columns']} bits, "
              f"{(sel.get('bootstraps') or {}).get('total', 0):,} bootstraps; {minutes}")
    for case, fits in document["largest_within_budget"].items():
        print(f"largest within {document['budget_min']:.0f} min on {document['budget_cores']} "
              f"cores ({case}): " + ", ".join(f"{rows} rows: {c} columns"
                                             for rows, c in fits.items()))


if __name__ == "__main__":
    main()
