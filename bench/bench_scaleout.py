"""The compute server's executors on P2 and P3, 1 and 2 local workers in the same run, and a
model of many cores built from the measured per-task cost and overhead.

What runs: a selection module at the demo's P2 width (k = 12, chunks of 16 cells) with a small
P3 (``--candidates``), keyed once; ``--pairs`` P2 tasks (one chunk each, random counts) and
``--rounds`` P3 calls, on (a) today's in-process executor (two threads, concrete's default
OpenMP threads), (b) one spawned worker process and (c) two, each worker pinned to one
OpenMP thread (``computeserver.executor``), the three alternating across ``--repeats`` so
that machine noise hits each. Every score decrypts to the clear InDif and every executor's
outputs decrypt to the in-process ones.

Overhead per task, measured apart: serialising and pickling a task and its result, and the
round trip of one task at a time on a warm worker minus its time inside concrete; the key
load once per worker process.

The model (stated as a model, not a measurement): a step of N equal tasks of t seconds each
(one worker, one thread) with overhead o per task on n cores takes ceil(N / n) (t + o) plus
one key load L; Adult's P2 is its 105 pairs, t scaled by each pair's chunk count, its
critical path the largest pair (a pair is one task). P3 is one call per round: more workers
do not shorten it, so the model keeps its measured per-round time.

Run: .venv/bin/python bench/bench_scaleout.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import pickle
import secrets
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# No concrete import at this level: spawned workers re-import this file as their main
# module, and concrete must load there only after the worker has pinned its OpenMP threads.
from computeserver.executor import (CallTask, Circuit, InProcessExecutor,  # noqa: E402
                                    LocalPoolExecutor, ScoreTask)

K, CHUNK = 12, 16
FEDDPSYN_A6000_MIN, FU_ET_AL_MIN = 13.7, 24.0


def build(candidates: int, directory: Path):
    from crypto.private_selection import PrivateSelectionShape, compile_private_selection
    from crypto.selection import choose_shape, thresholds

    selection = choose_shape(candidates, 10, 0.5)
    shape = PrivateSelectionShape(count_bits=K, chunk_sizes=(CHUNK,), selection=selection)
    started = time.perf_counter()
    module = compile_private_selection(shape, thresholds(selection, Fraction(1, 4)),
                                       2.0 ** -40)
    compiled = time.perf_counter() - started
    module.keygen(seed=secrets.randbits(64), encryption_seed=secrets.randbits(64))
    module.server.save(directory / "server.zip")
    (directory / "keys.bin").write_bytes(module.keys.evaluation.serialize())
    print(f"module: P2 k = {K}, {CHUNK} cells a chunk "
          f"({module.indif_16.statistics['programmable_bootstrap_count']} bootstraps); "
          f"P3 over {candidates} candidates, {selection.score_bits} score bits "
          f"({module.select.statistics['programmable_bootstrap_count']} bootstraps); "
          f"compiled in {compiled:.0f} s; evaluation keys "
          f"{(directory / 'keys.bin').stat().st_size / 1e6:.0f} MB", flush=True)
    return module, selection


def score_tasks(module, pairs: int, seed: int) -> tuple[list[ScoreTask], list[int]]:
    from crypto.indif import digits_of, indif_exact, indif_offset

    rng = np.random.default_rng(seed)
    tasks, exact = [], []
    for _ in range(pairs):
        counts, expected = rng.integers(0, 20, CHUNK), rng.integers(0, 20, CHUNK)
        mask = rng.integers(0, 2 ** K, CHUNK)
        masked, _ = module.indif_16.encrypt(digits_of((counts + mask) % 2 ** K, K), None)
        tasks.append(ScoreTask((("indif_16", masked.serialize(),
                                 digits_of(indif_offset(mask, expected, K), K)),)))
        exact.append(indif_exact(counts, expected))
    return tasks, exact


def select_task(module, selection, candidates: list[bytes]) -> CallTask:
    from crypto.selection import clear_arguments, random_priorities, random_share

    s = selection.candidates
    args = clear_arguments(np.zeros((1, s, selection.score_bits), dtype=np.int64),
                           np.ones(s, dtype=np.int64), random_share(selection),
                           random_share(selection), random_priorities(selection))
    shares = module.select.encrypt(*([None] * (s + 1)), args[2], args[3], None, None)
    return CallTask("select", (*candidates[:s], args[1],
                               *[v.serialize() for v in shares[s + 1:s + 3]], *args[4:]))


def decode(module, score: bytes) -> int:
    from concrete import fhe

    bits = np.asarray(module.add.decrypt(fhe.Value.deserialize(score))).ravel()
    return int(sum(int(b) << j for j, b in enumerate(bits)))


def one_hot(module, outputs: tuple[bytes, ...]) -> list[int]:
    from concrete import fhe

    return [int(np.asarray(v).ravel()[0])
            for v in module.select.decrypt(*[fhe.Value.deserialize(o) for o in outputs])]


def overhead(executor, circuit: Circuit, task, repeats: int) -> float:
    """Seconds per task outside concrete: one task at a time on a warm worker."""
    extra = []
    for _ in range(repeats):
        started = time.perf_counter()
        executor.map(circuit, [task])
        extra.append(time.perf_counter() - started - executor.stats.run_seconds[0])
    return float(np.median(extra))


def adult_p2_chunks() -> list[int]:
    """Chunks per pair of Adult's P2 at the demo's widths (the cut of ``SessionPlan``)."""
    from feddpsyn.demo import dataset
    from params.schema import Schema
    from params.session_plan import SessionPlan

    schema = Schema.load(dataset("adult").schema)
    plan = SessionPlan.build(schema, None, 1.0, 1e-5, None, "default", 1143, selection="em",
                             rounds=1)
    per_pair: dict[int, float] = {}
    for index, _, size in plan.indif_chunks():
        # Cost of a chunk relative to one of CHUNK cells: linear in cells (the digit
        # conversion is per cell at a fixed k), a stated simplification.
        per_pair[index] = per_pair.get(index, 0.0) + size / CHUNK
    return [per_pair[i] for i in sorted(per_pair)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few minutes")
    parser.add_argument("--pairs", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--candidates", type=int, default=4)
    args = parser.parse_args()
    pairs = args.pairs or (8 if args.quick else 24)
    rounds = args.rounds or (1 if args.quick else 3)
    repeats = args.repeats or (1 if args.quick else 2)

    directory = Path(tempfile.mkdtemp(prefix="scaleout-"))
    module, selection = build(args.candidates, directory)
    circuit = Circuit.of_files("bench", directory / "server.zip", directory / "keys.bin")
    tasks, exact = score_tasks(module, pairs, seed=1)
    executors = {"in-process (2 threads)": InProcessExecutor(),
                 "1 worker": LocalPoolExecutor(workers=1, threads=1),
                 "2 workers": LocalPoolExecutor(workers=2, threads=1)}
    # Warm-up: every worker process spawned and keyed before anything is timed.
    loads = {}
    for name, executor in executors.items():
        started = time.perf_counter()
        executor.map(circuit, tasks[:2])
        loads[name] = (time.perf_counter() - started, dict(executor.stats.load_seconds))
        print(f"warm-up {name}: {loads[name][0]:.1f} s (key load per process: "
              f"{', '.join(f'{s:.2f} s' for s in loads[name][1].values()) or 'cached'})",
              flush=True)

    p2: dict[str, list[float]] = {name: [] for name in executors}
    p3: dict[str, list[float]] = {name: [] for name in executors}
    reference_scores, reference_hots = None, []
    names = list(executors)
    selects = None
    for repeat in range(repeats):
        for name in (names if repeat % 2 == 0 else names[::-1]):
            executor = executors[name]
            started = time.perf_counter()
            scores = executor.map(circuit, tasks)
            p2[name].append(time.perf_counter() - started)
            values = [decode(module, s) for s in scores]
            assert values == exact, f"{name}: a score differs from the clear InDif"
            if reference_scores is None:
                reference_scores = scores
                selects = [select_task(module, selection, scores) for _ in range(rounds)]
            for r, task in enumerate(selects):
                started = time.perf_counter()
                outputs = executor.map(circuit, [task])[0]
                p3[name].append(time.perf_counter() - started)
                hot = one_hot(module, outputs)
                assert sum(hot) == 1
                if len(reference_hots) <= r:
                    reference_hots.append(hot)
                assert hot == reference_hots[r], f"{name}: a P3 output differs"
            print(f"repeat {repeat} {name}: P2 {pairs} tasks {p2[name][-1]:.1f} s, P3 "
                  f"{np.mean(p3[name][-rounds:]):.1f} s a call", flush=True)

    # Per-task overhead, apart from the timings above.
    from concrete import fhe

    task = tasks[0]
    started = time.perf_counter()
    blob = pickle.dumps(task)
    pickle.loads(blob)
    pickling = time.perf_counter() - started
    value = fhe.Value.deserialize(task.chunks[0][1])
    started = time.perf_counter()
    for _ in range(10):
        fhe.Value.deserialize(value.serialize())
    value_codec = (time.perf_counter() - started) / 10
    one_trip = overhead(executors["1 worker"], circuit, task, 3)
    in_trip = overhead(executors["in-process (2 threads)"], circuit, task, 3)
    for executor in executors.values():
        executor.close()

    p2_median = {n: float(np.median(v)) for n, v in p2.items()}
    p3_median = {n: float(np.median(v)) for n, v in p3.items()}
    task_seconds = p2_median["1 worker"] / pairs
    load = max(loads["2 workers"][1].values(), default=0.0)
    print(f"\nP2 ({pairs} tasks, median of {repeats}): "
          + ", ".join(f"{n} {s:.1f} s" for n, s in p2_median.items()))
    print("P3 (one call a round, median): "
          + ", ".join(f"{n} {s:.1f} s" for n, s in p3_median.items()))
    print(f"overhead per task: task pickle {len(blob) / 1e3:.1f} KB in {pickling * 1e3:.2f} ms, "
          f"one ciphertext serialise+parse {value_codec * 1e3:.2f} ms, round trip on a warm "
          f"worker process outside concrete {one_trip * 1e3:.1f} ms (in-process "
          f"{in_trip * 1e3:.1f} ms); key load {load:.2f} s per worker process, once")
    print(f"task time on one worker, one thread: {task_seconds:.2f} s; overhead / task time "
          f"{one_trip / task_seconds:.2%}")
    print(f"P2 2 workers vs in-process default: x{p2_median['in-process (2 threads)'] / p2_median['2 workers']:.2f}; "
          f"P3 2 workers vs in-process: x{p3_median['in-process (2 threads)'] / p3_median['2 workers']:.2f}")

    # The model (see the module docstring), applied to Adult's P2.
    chunks = adult_p2_chunks()
    print(f"\nMODEL (not a measurement): Adult's P2, {len(chunks)} pair tasks, "
          f"{sum(chunks):.0f} chunk-equivalents of {CHUNK} cells; t = {task_seconds:.2f} s a "
          f"chunk, o = {one_trip * 1e3:.0f} ms a task, L = {load:.1f} s")
    for cores in (2, 16, 64, 192):
        # Longest-first list scheduling of the pair tasks on `cores` one-thread workers.
        finish = [0.0] * cores
        for c in sorted(chunks, reverse=True):
            i = finish.index(min(finish))
            finish[i] += c * task_seconds + one_trip
        minutes = (max(finish) + load) / 60
        share = one_trip / (one_trip + task_seconds * max(min(chunks), 1e-9))
        print(f"  {cores:>3} cores: P2 {minutes:.1f} min (overhead {share:.2%} of the "
              f"smallest task); critical path the largest pair {max(chunks) * task_seconds / 60:.1f} min")
    print(f"  P3 does not shorten with workers (one call a round): "
          f"{p3_median['1 worker']:.1f} s a round at {args.candidates} candidates here; "
          f"compare FedDPSyn {FEDDPSYN_A6000_MIN} min (A6000), Fu et al. {FU_ET_AL_MIN} min")
    print(f"speedup 2 workers: {p2_median['1 worker'] / p2_median['2 workers']:.2f}")


if __name__ == "__main__":
    main()
