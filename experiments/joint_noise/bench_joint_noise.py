"""Benchmark: the servers' one joint noise (``crypto.joint_noise``) against the two-noise
release of the same cells, per released cell, in one run.

What is measured is what the servers run, taken from their plan (``SessionPlan.build`` with
``noise="auto"`` and ``max_rows`` stated as the demo states it:
``fedbench.methods.feddpsyn_served.served_plan``), not chosen here:

* **joint**: the session's one P1 joint circuit (``compile_joint_release`` over
  ``plan.joint_shapes()``, as ``keyserver.keys`` compiles it), each chunk of
  ``chunk_cells`` cells with the key server's bits at the session's width
  (``plan.joint_columns``, ``keyserver.coins``: draw, encrypt, serialize: the KS -> CS
  transfer), the compute server's own bits and clear operands per cell
  (``joint_operands`` over ``plan.cell_noises``: a split release's cells each carry their
  group's shape), the run, and the key server's decryption and decoding. Offline, the key
  server prepares bits for every chunk the release may use (``keyserver.coins.
  release_chunks``: for a selected release, its packed chunks), and a split
  release keeps the per-m Gaussian draws of its even two-server fallback
  (``SessionPlan.noise_draws``).
* **two-noise**: the same cells as a two-server session releases them (the plan built with
  ``noise="two-server"``: the plain P1 circuit, each server's discrete Gaussian from its
  pool, offline, for every draw ``noise_draws`` lists: for noisy-greedy one per possible
  number of pairs over every pair cell), the CS's run and the KS's decryption plus its noise.

Sessions (4 clients, eps 1, delta 1e-5, parameter set "default"):

* ``fhd-em``: the Fed-Heart-Disease default demo (em, 4 rounds): the 1-ways and em's 2-way
  release (the pairs the servers' exact round model picks on the union, one run);
* ``fhd-noisy-greedy``: the same data with noisy-greedy: the 1-ways and the 2-way release
  split by PrivSyn's c^(2/3) allocation (``SessionPlan.split_release``) over the pairs the
  servers keep in one simulated run (``feddpsyn_served.served_selection``: InDif on the
  union against the noisy 1-ways, the scores' noise as the plan gives it, the key server's
  greedy rule);
* ``adult-none``: Adult, the demo's default for it (every one of its 105 pairs released);
* ``adult-noisy-greedy``: Adult with noisy-greedy's split release, as for Fed-Heart-Disease.

Each release runs the chunks it touches (the circuit runs a whole chunk whatever its selected
cells, so every chunk of a session's circuit costs the same); at most ``--max-chunks`` of
them, evenly spaced, are measured per repeat and the release's totals are scaled by its
chunk counts (the table says which). Every measured chunk is decrypted and checked: published
minus true equals, cell by cell, the noise both servers' bits (or Gaussians) make. Variants
alternate within each repeat (two-noise, then joint, chunk by chunk); the machine is shared,
so only ratios within one run count. The split release is also summarised for m = 1 .. all
pairs taken in order of their InDif on the union (shapes, variance against the even
two-server release, chunks touched: a plan-only computation, no circuit).

Run: echo 19 > /proc/self/autogroup; .venv/bin/python experiments/joint_noise/bench_joint_noise.py
--repeats 3 --max-chunks 2 --out experiments/joint_noise/results/joint_noise.json [--lookup]

The two variants (one chunk run as the servers run it, every output checked) live in
``bench/scale/bench_scale.py``, whose measured sample uses them too.
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from concrete import fhe  # noqa: E402

from bench.scale.bench_scale import (  # noqa: E402
    CLIENTS,
    JointVariant,
    TwoNoiseVariant,
    chunk_inputs,
    keyed,
)
from feddpsyn.crypto.aggregation import compile_aggregation  # noqa: E402
from feddpsyn.crypto.joint_noise import (  # noqa: E402
    compile_joint_release,
    draw_bits,
    joint_noise_plaintext,
)
from feddpsyn.dp.accounting import gaussian_sigma2  # noqa: E402
from feddpsyn.dp.discrete_gaussian import discrete_gaussian_vector  # noqa: E402
from feddpsyn.fedbench.methods.feddpsyn_served import served_plan, served_selection  # noqa: E402
from feddpsyn.keyserver.coins import release_chunks  # noqa: E402
from feddpsyn.params.modes import NoiseMode  # noqa: E402
from feddpsyn.params.operator_bound import stated_max_rows  # noqa: E402
from feddpsyn.params.plan_request import PlanRequest  # noqa: E402
from feddpsyn.params.release_chunks import ReleaseChunk  # noqa: E402
from feddpsyn.params.release_spec import ReleaseSpec  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402
from feddpsyn.params.session_plan import SessionPlan  # noqa: E402
from feddpsyn.params.table_codec import encode_csv  # noqa: E402
from feddpsyn.synthesis.marginals import NoisyMarginal  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EPSILON, DELTA = 1.0, 1e-5
# Fed-Heart-Disease's demo default: em with 4 rounds (feddpsyn.demo.DEMO_ROUNDS).
SESSIONS = (("fhd-em", "fed_heart_disease", "em", 4),
            ("fhd-noisy-greedy", "fed_heart_disease", "noisy-greedy", None),
            ("adult-none", "adult", "none", None),
            ("adult-noisy-greedy", "adult", "noisy-greedy", None))


def plan_for(schema: Schema, rows: int, selection: str, rounds: int | None,
             noise: str) -> SessionPlan:
    """The plan the servers build for a table of ``rows`` rows, ``max_rows`` stated as the
    demo states it (``params.operator_bound``); noise "auto" is ``feddpsyn_served``'s."""
    if noise == NoiseMode.AUTO:
        return served_plan(schema, rows, EPSILON, DELTA, selection, rounds)
    max_rows = stated_max_rows(schema, rows, EPSILON, DELTA, selection, rounds, noise)
    return SessionPlan.build(PlanRequest(schema, EPSILON, DELTA, max_rows, selection=selection,
                                         rounds=rounds, noise=noise))


def union_counts(dataset: str) -> tuple[Schema, int, np.ndarray]:
    from feddpsyn.demo import dataset as demo_dataset

    ds = demo_dataset(dataset)
    schema = Schema.load(ds.schema)
    records = encode_csv(ds.csv, schema).records
    return schema, len(records), records


def chosen_pairs(plan: SessionPlan, counts: np.ndarray) -> list[tuple[int, int]]:
    """The pairs the servers' selection keeps in one simulated run (module docstring): the
    1-ways noised as the plan says, then ``feddpsyn_served.served_selection``."""
    if plan.selection is None:
        return [slot.attrs for slot in plan.layout.two_way]
    spec = plan.release("one_way")
    one_way = []
    for slot in plan.layout.one_way:
        true = counts[slot.offset:slot.offset + slot.size]
        if spec.joint is not None:
            noise = joint_noise_plaintext(spec.joint, draw_bits(slot.size, spec.joint),
                                          draw_bits(slot.size, spec.joint))
        else:
            noise = (discrete_gaussian_vector(spec.sigma2, slot.size)
                     + discrete_gaussian_vector(spec.sigma2, slot.size))
        one_way.append(NoisyMarginal(slot.attrs, true + noise, float(spec.per_count_variance)))
    return served_selection(plan, counts, one_way)[0]


def values_drawn(plan: SessionPlan, name: str) -> int:
    """Gaussian values one server draws offline for a release (``noise_draws``)."""
    return sum(len(d.positions) for d in plan.noise_draws()
               if d.label == name or d.label.startswith(f"{name}@"))


@dataclass
class ReleaseBench:
    """One release of a session, both variants over the same chunks."""

    session: str
    name: str
    joint_spec: ReleaseSpec
    two_spec: ReleaseSpec
    positions: np.ndarray
    touched: list[int]
    measured: list[ReleaseChunk]
    prepared: int
    values_joint: int
    values_two: int
    variance_joint: Fraction
    variance_two: Fraction
    groups: list[dict]
    variants: list = field(default_factory=list)
    times: dict = field(default_factory=dict)
    noises: dict = field(default_factory=dict)


def release_benches(label: str, plan: SessionPlan, plan_two: SessionPlan,
                    chosen: list[tuple[int, int]], max_chunks: int) -> list[ReleaseBench]:
    out = []
    for name in ("one_way", "two_way"):
        spec = plan.resolve(plan.release(name), chosen)
        two = plan_two.resolve(plan_two.release(name), chosen)
        positions = plan.layout.cells_of(plan.slots_of(spec))
        if not np.array_equal(positions, plan_two.layout.cells_of(plan_two.slots_of(two))):
            raise RuntimeError("the two plans lay the release's cells out differently")
        # The chunks the servers run (``params.release_chunks``: a selected release packed).
        parts = plan.release_chunks(spec)
        touched = [part.index for part in parts]
        step = max(1, -(-len(touched) // max_chunks))
        groups = []
        if spec.parts:
            for part in spec.parts:
                cells = sum(s.size for s in plan.slots_of(part))
                groups.append({"group": part.name, "pairs": len(part.marginal_keys),
                               "cells": cells, "shape": part.joint.label,
                               "variance": float(part.per_count_variance)})
        out.append(ReleaseBench(
            label, name, spec, two, positions, touched, parts[::step][:max_chunks],
            len(release_chunks(plan, name)) if spec.joint is not None else 0,
            values_drawn(plan, name), values_drawn(plan_two, name),
            plan.per_count_variance(spec), plan_two.per_count_variance(two), groups))
    return out


def sweep(plan: SessionPlan, counts: np.ndarray) -> list[dict]:
    """The split release for the m pairs of largest InDif on the union (against expected
    counts from the true 1-ways), m = 1 .. all on a doubling grid: groups, fallback,
    per-count variance against the even two-server release, chunks touched."""
    from feddpsyn.dp.pair_selection import expected_counts_for_pairs, indif_scores

    pairs = [slot.attrs for slot in plan.layout.two_way]
    one_way = [counts[s.offset:s.offset + s.size] for s in plan.layout.one_way]
    scores = indif_scores({s.attrs: counts[s.offset:s.offset + s.size]
                           for s in plan.layout.two_way},
                          expected_counts_for_pairs(one_way, pairs, plan.max_rows))
    order = sorted(pairs, key=lambda p: (-scores[p], p))
    grid = sorted({m for m in (1, 2, 4, 8, 16, 32, 64, len(pairs)) if m <= len(pairs)})
    release = plan.release("two_way")
    rows = []
    for m in grid:  # bounded: the grid's few points
        keys = plan.keys_of_pairs(order[:m])
        split, why = plan.split_release(release, keys)
        even = 2 * gaussian_sigma2(release.rho, m)
        cells = plan.layout.cells_of([s for s in plan.layout.two_way if s.key in set(keys)])
        row = {"m": m, "cells": len(cells),
               "chunks": -(-len(cells) // plan.parameters.chunk_cells),  # packed
               "even_two_server_variance": float(even)}
        if split is None:
            row.update(noise="two-server fallback", reason=why)
        else:
            variance = plan.per_count_variance(split)
            row.update(noise="joint", groups=len(split.parts),
                       shapes=sorted({p.joint.label for p in split.parts}),
                       variance=float(variance), variance_ratio=float(variance / even))
        rows.append(row)
    return rows


def lookup_variant(bits: int = 4, uniforms: int = 8, cells: int = 2) -> dict:
    """The additive form u = (a + b) mod 2^w: one lookup per uniform. Alone (its own small
    partition); inside the k = 20 release circuit its compile passed 20 GB (stopped), so it is
    measured here alone, for its per-uniform cost."""
    def noise(a, b):
        return np.sum((a + b) % (1 << bits), axis=1)

    compiler = fhe.Compiler(noise, {"a": "encrypted", "b": "clear"})
    zero = np.zeros((cells, uniforms), dtype=np.int64)
    top = zero + (1 << bits) - 1
    t = time.perf_counter()
    circuit = compiler.compile([(zero, zero), (top, top), (top, zero), (zero, top)],
                               fhe.Configuration(compress_input_ciphertexts=True,
                                                 compress_evaluation_keys=True,
                                                 show_progress=False, p_error=2.0 ** -40,
                                                 global_p_error=None))
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    circuit.keygen()
    keygen_s = time.perf_counter() - t
    a = np.array([[secrets.randbelow(1 << bits) for _ in range(uniforms)] for _ in range(cells)])
    b = np.array([[secrets.randbelow(1 << bits) for _ in range(uniforms)] for _ in range(cells)])
    enc = circuit.encrypt(a, None)[0]
    t = time.perf_counter()
    out = circuit.run(enc, b)
    run_s = time.perf_counter() - t
    result = {"bits": bits, "uniforms": uniforms, "cells": cells, "compile_s": compile_s,
              "keygen_s": keygen_s,
              "evaluation_keys_mb": len(circuit.keys.evaluation.serialize()) / 1e6,
              "lookups": circuit.statistics["programmable_bootstrap_count"],
              "run_s_per_uniform": run_s / (uniforms * cells),
              "exact": bool(np.array_equal(circuit.decrypt(out),
                                           ((a + b) % (1 << bits)).sum(axis=1)))}
    print(f"\nlookup variant (a + b) mod 2^{bits}, {uniforms} uniforms x {cells} cells, alone: "
          f"compile {compile_s:.1f} s, keygen {keygen_s:.1f} s, evaluation keys "
          f"{result['evaluation_keys_mb']:.0f} MB, {result['lookups']} lookups, run "
          f"{result['run_s_per_uniform']:.3f} s per uniform, exact {result['exact']}")
    return result


def summarise(bench: ReleaseBench, repeats: int) -> dict:
    """Per released cell and per release, each variant: the least over repeats of its
    measured chunks' sum, scaled to the release's chunks (module docstring)."""
    cells = len(bench.positions)
    per_chunk, rows = {}, {}
    for variant in bench.variants:
        runs = bench.times[variant.name]
        best = {key: min(sum(r[key] for r in run) for run in runs) / len(bench.measured)
                for key in runs[0][0]}
        per_chunk[variant.name] = best
        values = bench.values_two if variant.name == "two-noise" else bench.values_joint
        # Offline: the KS's bits for every chunk it prepares, and both servers' Gaussian
        # draws the plan lists for this release (two-noise: its noise; joint: the fallback's).
        draws = 2 * values * seconds_per_draw(bench)
        bits = best["ks_bits_s"] * bench.prepared
        online_cs = best["cs_s"] * len(bench.touched)
        online_ks = best["ks_s"] * len(bench.touched)
        noise = np.concatenate(bench.noises[variant.name])
        rows[variant.name] = {
            "offline_s": bits + draws, "offline_ks_bits_s": bits, "offline_draws_s": draws,
            "gaussian_values_drawn": 2 * values,
            "ks_cs_bytes": best["ks_cs_bytes"] * bench.prepared,
            "cs_ks_bytes": best["cs_ks_bytes"] * len(bench.touched),
            "cs_online_s": online_cs, "ks_decrypt_s": online_ks,
            "online_s": online_cs + online_ks,
            "per_cell": {"offline_s": (bits + draws) / cells,
                         "ks_cs_bytes": best["ks_cs_bytes"] * bench.prepared / cells,
                         "online_s": (online_cs + online_ks) / cells},
            "per_chunk": best,
            "variance_per_count": float(bench.variance_two if variant.name == "two-noise"
                                        else bench.variance_joint),
            "measured_variance": float(np.var(noise)), "measured_counts": int(noise.size)}
    two, joint = rows["two-noise"], rows["joint"]
    return {
        "session": bench.session, "release": bench.name,
        "noise": bench.joint_spec.noise_kind if not bench.joint_spec.parts else "joint split",
        "shape": (None if bench.joint_spec.joint is None or bench.joint_spec.parts
                  else [bench.joint_spec.joint.uniforms, bench.joint_spec.joint.bits]),
        "groups": bench.groups, "marginals": len(bench.joint_spec.marginal_keys),
        "released_cells": cells, "chunks_touched": len(bench.touched),
        "chunks_prepared": bench.prepared, "chunks_measured": len(bench.measured),
        "scaled": len(bench.measured) < len(bench.touched) or bench.prepared > len(bench.measured),
        "variants": rows,
        "ratios_joint_over_two_noise": {
            "cs_online": joint["cs_online_s"] / two["cs_online_s"],
            "ks_decrypt": joint["ks_decrypt_s"] / two["ks_decrypt_s"],
            "online": joint["online_s"] / two["online_s"],
            "offline": joint["offline_s"] / two["offline_s"] if two["offline_s"] else None,
            "variance": joint["variance_per_count"] / two["variance_per_count"]}}


def seconds_per_draw(bench: ReleaseBench) -> float:
    """Seconds per Gaussian value, measured in the two-noise variant of the same run."""
    runs = bench.times["two-noise"]
    return min(min(r["draw_s_per_value"] for r in run) for run in runs)


def print_release(row: dict) -> None:
    print(f"\n{row['session']} / {row['release']}: {row['noise']}"
          + (f" {row['shape'][0]}x{row['shape'][1]}" if row["shape"] else "")
          + f", {row['marginals']} marginals, {row['released_cells']} cells; chunks: "
          f"{row['chunks_touched']} run, {row['chunks_prepared']} with KS bits, "
          f"{row['chunks_measured']} measured" + (" (totals scaled by chunks)"
                                                   if row["scaled"] else ""))
    for g in row["groups"]:
        print(f"  group {g['group']:>14s}: {g['pairs']:3d} pairs {g['cells']:5d} cells, "
              f"{g['shape'][0]}x{g['shape'][1]}, variance {g['variance']:.1f}")
    print(f"  {'variant':9s} {'offline s/cell':>14s} {'KS->CS B/cell':>13s} "
          f"{'online s/cell':>13s} {'variance':>9s} {'(measured)':>10s} "
          f"{'offline s':>9s} {'KS->CS MB':>9s} {'CS s':>7s} {'KS s':>7s}")
    for name, v in row["variants"].items():
        c = v["per_cell"]
        print(f"  {name:9s} {c['offline_s']:14.2e} {c['ks_cs_bytes']:13.0f} "
              f"{c['online_s']:13.2e} {v['variance_per_count']:9.1f} "
              f"{v['measured_variance']:10.1f} {v['offline_s']:9.2f} "
              f"{v['ks_cs_bytes'] / 1e6:9.2f} {v['cs_online_s']:7.2f} {v['ks_decrypt_s']:7.2f}")
    r = row["ratios_joint_over_two_noise"]
    offline = "n/a" if r["offline"] is None else f"x{r['offline']:.1f}"
    print(f"  joint / two-noise: online x{r['online']:.1f} (CS x{r['cs_online']:.1f}, KS "
          f"x{r['ks_decrypt']:.2f}), offline {offline}, variance x{r['variance']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-chunks", type=int, default=2,
                        help="chunks measured per release and repeat (totals scaled)")
    parser.add_argument("--sessions", default=",".join(s[0] for s in SESSIONS))
    parser.add_argument("--out", type=Path, default=None, help="write the table as JSON")
    parser.add_argument("--lookup", action="store_true",
                        help="also time the (a + b) mod 2^w lookup form alone")
    args = parser.parse_args()
    wanted = set(args.sessions.split(","))
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()

    benches, sessions, circuits = [], [], {}
    for label, dataset, selection, rounds in SESSIONS:
        if label not in wanted:
            continue
        schema, rows, records = union_counts(dataset)
        plan = plan_for(schema, rows, selection, rounds, "auto")
        plan_two = plan_for(schema, rows, selection, rounds, "two-server")
        counts = plan.layout.counts(records)
        chosen = chosen_pairs(plan, counts)
        p = plan.parameters
        key = ("p1", p.chunk_cells, p.count_bits)
        if key not in circuits:
            circuit = compile_aggregation(CLIENTS, p.chunk_cells, p.count_bits, p.p_error)
            circuits[key] = (circuit, keyed(circuit))
        p1, p1_client = circuits[key]
        t = time.perf_counter()
        joint_circuit = compile_joint_release(CLIENTS, p.chunk_cells, p.count_bits,
                                              plan.joint_shapes(), p.p_error)
        joint_client = keyed(joint_circuit)
        setup = time.perf_counter() - t
        info = {"session": label, "dataset": dataset, "rows": rows, "selection": selection,
                "rounds": rounds, "epsilon": EPSILON, "delta": DELTA,
                "delta_total": plan.delta_total(), "max_rows": plan.max_rows,
                "count_bits": p.count_bits, "chunk_cells": p.chunk_cells,
                "pairs": len(plan.layout.two_way), "joint_columns": plan.joint_columns,
                "joint_shapes": [[s.uniforms, s.bits] for s in plan.joint_shapes()],
                "release_allocation": {r.name: r.allocation for r in plan.releases},
                "chosen_pairs": [list(c) for c in chosen],
                "joint_circuit_compile_keygen_s": setup}
        print(f"{label}: {rows} rows, {selection}"
              + (f" {rounds} rounds" if rounds else "")
              + f", max_rows {plan.max_rows}, k = {p.count_bits}, {p.chunk_cells} cells a chunk;"
              f" joint circuit {plan.joint_columns} KS bits a cell (shapes "
              f"{', '.join(f'{s.uniforms}x{s.bits}' for s in plan.joint_shapes())}), "
              f"compiled + keys {setup:.1f} s; delta_total {plan.delta_total():.4g}; "
              f"{len(chosen)} of {len(plan.layout.two_way)} pairs released")
        for bench in release_benches(label, plan, plan_two, chosen, args.max_chunks):
            shapes = {}
            for positions, shape in plan.cell_noises(bench.joint_spec):
                shapes.update({int(q): shape for q in positions})
            bench.variants = [TwoNoiseVariant(p1, p1_client, p.count_bits, bench.two_spec.sigma2),
                              JointVariant(joint_circuit, joint_client, p.count_bits,
                                           plan.joint_columns, shapes)]
            bench.times = {v.name: [] for v in bench.variants}
            bench.noises = {v.name: [] for v in bench.variants}
            benches.append((bench, p.chunk_cells, p.count_bits))
        if plan.release("two_way").allocation == "privsyn":
            info["split_sweep"] = sweep(plan, counts)
        sessions.append(info)

    for repeat in range(args.repeats):  # alternate the variants within each repeat
        print(f"repeat {repeat + 1} of {args.repeats} ({time.strftime('%H:%M:%S')})",
              file=sys.stderr, flush=True)
        for bench, chunk_cells, k in benches:
            runs = {v.name: [] for v in bench.variants}
            for chunk in bench.measured:
                inputs = chunk_inputs(chunk, chunk_cells, k)
                for variant in bench.variants:
                    measured, noise = variant.measure(inputs)
                    runs[variant.name].append(measured)
                    bench.noises[variant.name].append(noise)
            for name, run in runs.items():
                bench.times[name].append(run)

    table = [summarise(bench, args.repeats) for bench, _, _ in benches]
    for row in table:
        print_release(row)
    for info in sessions:
        for row in info.get("split_sweep", []):
            if row is info["split_sweep"][0]:
                print(f"\n{info['session']}: the split 2-way release for the m pairs of largest "
                      "InDif (plan only)")
            text = (f"{row['groups']} groups, shapes {row['shapes']}, variance "
                    f"{row['variance']:.1f} (x{row['variance_ratio']:.3f} of the even "
                    f"two-server {row['even_two_server_variance']:.1f})"
                    if row["noise"] == NoiseMode.JOINT else f"fallback: {row['reason']}")
            print(f"  m {row['m']:3d}: {row['cells']:5d} cells, {row['chunks']:2d} chunks; {text}")
    lookup = lookup_variant() if args.lookup else None
    if args.out is not None:
        document = {"run": " ".join(["experiments/joint_noise/bench_joint_noise.py"]
                                             + sys.argv[1:]),
                    "started": started, "commit": commit, "repeats": args.repeats,
                    "max_chunks": args.max_chunks, "sessions": sessions, "releases": table,
                    "lookup": lookup}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(document, indent=1, default=_plain) + "\n")
        print(f"\nwritten {args.out}")


def _plain(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"not JSON: {type(value)}")


if __name__ == "__main__":
    main()
