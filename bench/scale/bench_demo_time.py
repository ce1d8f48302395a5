"""The demo's wall time: ``feddpsyn demo`` end to end, as a user runs it, with its phases.

Runs the demo (its defaults unless arguments follow ``--``) in a fresh output folder, times the
whole process, and keeps the phases the demo's ``report.json`` records (server start, session
preparation, uploads, the encrypted aggregation, selection and releases, synthesis), each
server's peak resident memory (``feddpsyn.peak_memory``), where the core-seconds went
(``feddpsyn.core_seconds``, ``computeserver.metering``), the machine's load average
before and after (a run on a loaded machine says so in its file) and, measured just before
the demo, one core's milliseconds per 3-bit lookup (``bench/scale/lookup_rate.py``): the
same code's wall time moved by 1.3-1.6x between days on one VM, so a time is read beside
the machine's rate of that day.

    .venv/bin/python bench/scale/bench_demo_time.py --json bench/results/demo_time/FILE.json
    .venv/bin/python bench/scale/bench_demo_time.py --json OUT.json -- --selection none
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.accuracy.bench_served_vs_central import _commit  # noqa: E402
from bench.scale.lookup_rate import rate_in_subprocess  # noqa: E402


def run_demo(args: list[str], out: Path) -> tuple[float, dict]:
    """The demo's wall seconds and its report."""
    command = [str(ROOT / ".venv" / "bin" / "feddpsyn"), "demo", "--out", str(out), *args]
    start = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"the demo failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, json.loads((out / "report.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, required=True, help="the result to write")
    parser.add_argument("--no-rate", action="store_true",
                        help="skip the machine's lookup rate (about 20 s before the demo)")
    parser.add_argument("demo_args", nargs="*", help="after --: the demo's own options")
    args = parser.parse_args()
    if args.json.exists():
        raise SystemExit(f"{args.json} exists: results are never overwritten")
    rate = None if args.no_rate else rate_in_subprocess()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        seconds, report = run_demo(args.demo_args, Path(tmp) / "out")
    load_after = os.getloadavg()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "what": "feddpsyn demo end to end: wall time and the report's phases",
        "command": "python bench/scale/bench_demo_time.py " + " ".join(sys.argv[1:]),
        "demo_args": args.demo_args, "commit": _commit(), "machine": platform.node(),
        "cores": os.cpu_count(), "date": datetime.date.today().isoformat(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "lookup_rate": rate,
        "wall_seconds": round(seconds, 1), "dataset": report["dataset"],
        "selection": report["selection"].get("mode") if report.get("selection") else "none",
        "epsilon": report["epsilon_budget"], "delta": report["delta"],
        "phases": report["phases"],
        "peak_memory_mb": report.get("peak_memory_mb"),
        # Where the core-seconds went: each server's process tree per phase and the idle
        # rest (feddpsyn.core_seconds), the compute server's steps (computeserver.metering).
        "core_seconds": report.get("core_seconds"),
        "contributors": report.get("contributors"), "absent": report.get("absent"),
        "late_upload_refused": report.get("late_upload_refused"),
        "two_way_error": report["workload_error"].get("two_way"),
        "central_two_way_error": report["central_workload_error"].get("two_way")},
        indent=1) + "\n")
    speed = "" if rate is None else f", {rate['ms_per_lookup']} ms a lookup on one core"
    print(f"demo: {seconds:.0f} s wall{speed} ({args.json})")


if __name__ == "__main__":
    main()
