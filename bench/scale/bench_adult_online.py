"""Adult's full online phase through both servers, timed end to end, and a projection to many
cores calibrated on that run (a model, stated as one).

What runs (``--run DIR``): ``feddpsyn demo --dataset adult --clients 4 --selection em --rounds
15`` on loopback with the compute server's default executor (in-process, one thread per core:
on this 2-core machine it measured as fast as two local worker processes, bench_scaleout.py),
its output in ``DIR/log``. Or ``--log FILE`` reads the compute server's log of such a run made
earlier (``DIR/demo/state/computeserver.log``; ``--time-file`` adds GNU time's figures).

What is read from the compute server's log (its timestamped lines): P2, from the 1-way
release's publication to "dependency scores ... computed" (it includes fetching the key
server's encryption of the selection inputs); each P3 round, from the previous step to the
round's pick; the 2-way release, from the last pick to its publication. A server restarted
mid-run (the session resumes from its stored state) is allowed: the step it was restarted in
is timed from ``--restarted-at``, since its work before the restart was lost and redone.

The projection (a MODEL, not a measurement): CPU-seconds per bootstrap at Adult's own circuit
parameters, s = P2 seconds x 2 cores / P2's bootstraps (``SelectionPlan.bootstraps_by_phase``).
That over-states s a little: the key server's offline encryption of the joint noise's bits
shares the cores during P2. Chunks and adds then cost their bootstrap counts times s, plus
the per-task overhead ``--overhead-ms`` (bench_scaleout.py measures it: 19 ms was the dearest,
a Dask task on loopback); P2 on n cores is list-scheduled longest first, then the add levels
in waves (``bench_scaleout.longest_first`` / ``add_levels``). P3 one call a round stays at its
measured round time whatever n; P3 by candidate batches (``crypto.selection_batches.batch_layout``)
costs its steps' bootstrap counts times s' = (a measured round x 2 cores / the call's
bootstraps), step after step, each in ceil(tasks / n) waves.

Why this calibration and not bench_scaleout's: a P2 bootstrap in Adult's module costs 2.3x
one in bench_scaleout's small module (23.8 ms a bootstrap a core measured here, 10.2 ms there
on one worker). Concrete's compilation feedback of Adult's module (``compilation_feedback.json``
in the saved server) shows why: every chunk spends 43-73 of its bootstraps (the bit
extractions of its plane sums) on a level-9 bootstrap key, GLWE 5 x 256, about 5.5x the work
of the level-1 keys its other lookups use. Its 32-cell chunks set that precision for the
whole module: compiled with chunk sizes (8, 16) only, the same partition takes a level-3 key
(about 2.6x) and a 16-cell chunk's work falls by 29%, but Adult then needs 799 chunks instead
of 453 and P2's total work (bootstraps weighted by their keys' FFT work) only 4.5% less: not
a change to make without timing it, since a bootstrap's time also follows its key's size
(2.4 GB of bootstrap keys against 1.6 GB).

Run: .venv/bin/python bench/scale/bench_adult_online.py --run /tmp/adult-online  (about 1 h 45 min)
     .venv/bin/python bench/scale/bench_adult_online.py --log \
         /tmp/adult-online/demo/state/computeserver.log                    (seconds)
"""

from __future__ import annotations

import argparse
import json
import math
import re
import resource
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.scale.bench_scaleout import (  # noqa: E402
    ADULT_ROUNDS,
    FEDDPSYN_A6000_MIN,
    FU_ET_AL_MIN,
    add_levels,
    adult_p2,
    adult_plan,
    longest_first,
)

CORES_HERE = 2
PROJECTED_CORES = (2, 16, 64, 192)


def demo_command() -> list[str]:
    return [sys.executable, "-m", "feddpsyn.cli", "demo", "--dataset", "adult", "--clients",
            "4", "--selection", "em", "--rounds", str(ADULT_ROUNDS)]


def run_demo(out: Path) -> dict:
    """The demo, its output in ``out/log``; its wall time, CPU time and peak memory."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / "log"
    started = time.perf_counter()
    with log.open("w") as sink:
        done = subprocess.run([*demo_command(), "--out", str(out / "demo")], stdout=sink,
                              stderr=subprocess.STDOUT, cwd=ROOT, check=False)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"the demo failed (exit {done.returncode}); see {log}")
    return {"wall_s": time.perf_counter() - started, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_gb": usage.ru_maxrss / 1e6}


_STAMPED = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) feddpsyn\S* INFO (.*)$")


def _seconds(stamp: str, millis: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp() + int(millis) / 1e3


def phases_of(lines: list[str], restarted_at: float | None = None) -> dict:
    """The online phase's steps from the compute server's log (module docstring): P2 from
    the 1-way release to the scores, each round to its pick, the 2-way release to its
    publication. A step the server was restarted in is timed from ``restarted_at`` (its
    work before the restart was lost and done again)."""
    events: list[tuple[float, str]] = []
    restarts = 0
    for line in lines:
        if "Started server process" in line:
            restarts += 1
            if restarts > 1:
                if restarted_at is None:
                    raise SystemExit("the compute server was restarted: give --restarted-at")
                events.append((restarted_at, "restart"))
        found = _STAMPED.match(line)
        if found:
            events.append((_seconds(found.group(1), found.group(2)), found.group(3)))

    def first(text: str) -> float:
        return next(t for t, what in events if text in what)

    try:
        p2_start = first("release one_way published")
        p2_end = first("dependency scores of")
        picks = [(t, what) for t, what in events if "selection round" in what]
        released = first("release two_way published")
    except StopIteration:
        raise SystemExit("the log holds no complete em session (P2, rounds, 2-way release)"
                         ) from None
    rounds, before, spanning = [], p2_end, []
    for t, _ in picks:
        restart = [r for r, what in events if what == "restart" and before < r < t]
        if restart:
            spanning.append(len(rounds))
        rounds.append(t - (restart[-1] if restart else before))
        before = t
    return {"p2_s": p2_end - p2_start, "rounds_s": rounds, "rounds_after_restart": spanning,
            "release_2way_s": released - picks[-1][0],
            "online_s": (p2_end - p2_start) + sum(rounds) + (released - picks[-1][0])}


def time_file(text: str) -> dict:
    """Wall, CPU and peak memory from GNU time -v's output."""
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text)
    parts = [float(p) for p in wall.group(1).split(":")]
    cpu = sum(float(re.search(rf"{name} time \(seconds\): (\S+)", text).group(1))
              for name in ("User", "System"))
    peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    return {"wall_s": sum(p * 60 ** i for i, p in enumerate(reversed(parts))), "cpu_s": cpu,
            "peak_rss_gb": peak / 1e6}


def projection(measured: dict, overhead_s: float, batch: int) -> dict:
    """The model of the module docstring, per core count."""
    from feddpsyn.crypto.indif import chunk_bootstraps
    from feddpsyn.crypto.selection_batches import batch_layout
    from feddpsyn.crypto.selection_cost import batched_pbs_estimate, pbs_estimate

    plan = adult_plan()
    cells = [slot.size for slot in plan.layout.two_way]
    p2_bootstraps = plan.selection.bootstraps_by_phase(cells)["p2"]
    spb = measured["p2_s"] * CORES_HERE / p2_bootstraps
    pairs, k, digits = adult_p2()
    chunks = [chunk_bootstraps(size, k) * spb + overhead_s for pair in pairs for size in pair]
    add = (2 * digits - 1) * spb + overhead_s
    levels = add_levels([len(pair) for pair in pairs])
    shape = plan.selection.shape
    round_s = float(np.median(measured["rounds_s"]))
    spb3 = round_s * CORES_HERE / pbs_estimate(shape)
    layout = batch_layout(shape.candidates, batch)
    per_call = batched_pbs_estimate(shape, layout)
    out = {"seconds_per_bootstrap_p2": spb, "seconds_per_bootstrap_p3": spb3,
           "p2_bootstraps": p2_bootstraps, "median_round_s": round_s,
           "batches": [layout.count, layout.size], "by_cores": {}}
    for cores in PROJECTED_CORES:
        p2 = longest_first(chunks, cores) + sum(math.ceil(n / cores) * add for n in levels)
        waves = math.ceil(layout.count / cores)
        batched_round = (waves * ((per_call["maximum"] + per_call["pick"] + per_call["mask"])
                                  * spb3 + 3 * overhead_s)
                         + (per_call["combine_maximum"] + per_call["least"]) * spb3
                         + 2 * overhead_s)
        out["by_cores"][cores] = {
            "p2_min": p2 / 60, "p3_one_call_min": ADULT_ROUNDS * round_s / 60,
            "p3_batched_min": ADULT_ROUNDS * batched_round / 60,
            "online_one_call_min": (p2 + ADULT_ROUNDS * round_s) / 60,
            "online_batched_min": (p2 + ADULT_ROUNDS * batched_round) / 60}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", type=Path, help="run the demo, its output under this folder")
    source.add_argument("--log", type=Path,
                        help="the compute server's log of a run made earlier")
    parser.add_argument("--restarted-at", help=("when the compute server was started again "
                                                 "in the run (YYYY-mm-dd HH:MM:SS, UTC)"))
    parser.add_argument("--time-file", type=Path,
                        help="GNU time -v output of the --log run (wall, CPU, peak memory)")
    parser.add_argument("--overhead-ms", type=float, default=19.0,
                        help="per-task overhead in the model (bench_scaleout.py measures it)")
    parser.add_argument("--batch", type=int, default=6,
                        help="candidates a P3 batch holds at most in the model")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()

    usage: dict = {}
    if args.run:
        usage = run_demo(args.run)
        log = args.run / "demo" / "state" / "computeserver.log"
    else:
        log = args.log
        if args.time_file:
            usage = time_file(args.time_file.read_text())
    restarted = (None if args.restarted_at is None else
                 datetime.strptime(args.restarted_at, "%Y-%m-%d %H:%M:%S").timestamp())
    measured = phases_of(log.read_text().splitlines(), restarted)
    model = projection(measured, args.overhead_ms / 1e3, args.batch)
    rounds = measured["rounds_s"]
    print(f"MEASURED: Adult, 4 clients, em, {len(rounds)} rounds over 105 pairs, this machine "
          f"({CORES_HERE} cores, in-process executor), from the compute server's log")
    print(f"  P2 {measured['p2_s'] / 60:.1f} min ({model['p2_bootstraps']:,} bootstraps: "
          f"{model['seconds_per_bootstrap_p2'] * 1e3:.1f} ms a bootstrap a core)")
    print(f"  P3 {sum(rounds) / 60:.1f} min ({min(rounds):.0f}-{max(rounds):.0f} s a round, "
          f"median {model['median_round_s']:.0f} s"
          + (f"; rounds {measured['rounds_after_restart']} timed from the restart"
             if measured["rounds_after_restart"] else "") + ")")
    print(f"  2-way release {measured['release_2way_s'] / 60:.1f} min; online phase (P2, P3, "
          f"2-way release) {measured['online_s'] / 60:.1f} min")
    if usage:
        print(f"  the demo process {usage['wall_s'] / 60:.1f} min wall, {usage['cpu_s'] / 60:.1f} "
              f"CPU-min, peak memory {usage['peak_rss_gb']:.1f} GB")
    count, size = model["batches"]
    print(f"\nMODEL (not a measurement), calibrated on this run; P3 by {count} batches of "
          f"{size}, o = {args.overhead_ms:.0f} ms a task:")
    for cores, row in model["by_cores"].items():
        print(f"  {cores:>3} cores: P2 {row['p2_min']:.1f} min; P3 {row['p3_batched_min']:.1f} "
              f"min by batches ({row['p3_one_call_min']:.1f} one call a round); online "
              f"{row['online_batched_min']:.1f} min ({row['online_one_call_min']:.1f})")
    print(f"  compare FedDPSyn {FEDDPSYN_A6000_MIN} min (one A6000 GPU), Fu et al. "
          f"{FU_ET_AL_MIN} min (MPC over a WAN)")
    if args.json:
        args.json.write_text(json.dumps({"command": " ".join(demo_command()),
                                         "measured": measured, "usage": usage,
                                         "model": model}, indent=1) + "\n")


if __name__ == "__main__":
    main()
