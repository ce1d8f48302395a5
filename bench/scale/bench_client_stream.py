"""Benchmark: the client agent's counting of a large table, in memory that does not grow
with the file (``clients.counting``).

A CSV of about ``--size-mb`` MB is generated under ``--workdir`` (default /tmp) from a real
table and its schema: the table's own data lines, drawn uniformly with replacement
(``--seed``), so every value is one the schema accepts. Each measurement runs in a fresh
Python process, so the process's peak resident set is the measurement's own:

* **counting**: ``clients.counting.count_csv`` (what ``ClientAgent.upload`` runs before it
  masks) into the all-pairs layout, with its peak RSS (``getrusage`` ru_maxrss and
  ``/proc/self/status`` VmHWM), seconds and rows per second; its counts are checked against
  the counts the draw implies (each source row's counts times the times it was drawn), which
  is exactly the count vector of the generated file;
* **client check**: ``feddpsyn client check`` on the same file under ``/usr/bin/time -v``
  (the whole command: imports, counting, report), its "Maximum resident set size";
* **whole file** (contrast, ``--whole-mb``, on a prefix of the file): the whole-table path
  (``encode_csv`` then ``MarginalLayout.counts``), whose memory grows with the file;
* **upload** (``--upload-mb``): ``feddpsyn client upload`` under ``/usr/bin/time -v``
  against both servers started on loopback, one owner in a session with the "default"
  parameter set, whose counts (20 bits, read as signed) stay below 2^19 with the session's
  ``max_rows`` plus the noise's bound: the file holds ``--upload-rows`` drawn lines (the
  session's ``max_rows``), each padded with trailing spaces (which the codec strips) to
  reach the size. The servers store the upload; the command's peak RSS is read.

The results are written to ``--out`` as JSON with the command, commit, machine and date; an
existing file is never overwritten (choose another name).

Run: .venv/bin/python bench/scale/bench_client_stream.py --size-mb 1024 \
    --out bench/results/client_stream.json
(``--size-mb 0 --upload-mb 1024``: the upload alone.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from feddpsyn.clients.counting import count_csv  # noqa: E402
from feddpsyn.params.layout import MarginalLayout  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402
from feddpsyn.params.table_codec import encode_csv, encode_rows, read_csv  # noqa: E402
from feddpsyn.peak_memory import status_kb  # noqa: E402

DATA = Path(os.environ.get("FEDDPSYN_DATA", ROOT.parent / "shared" / "data"))
TARGET_MB = 500


def source_lines(source: Path) -> tuple[str, list[str]]:
    """(the header line, the data lines) of a table with one line a row."""
    _, rows, _ = read_csv(source)
    text = source.read_text(encoding="utf-8-sig").splitlines()
    lines = [line + "\n" for line in text[1:] if line.strip()]
    if len(lines) != len(rows):
        raise SystemExit(f"{source}: a quoted line break; pick a table with one line a row")
    return text[0], lines


def generate_padded(source: Path, out: Path, size_bytes: int, rows: int, seed: int) -> int:
    """``rows`` of the source's lines drawn with replacement, each padded with trailing
    spaces so that the file holds about ``size_bytes``; returns the file's size."""
    first, lines = source_lines(source)
    pad = max(0, (size_bytes - len(first) - 1) // rows - max(len(x) for x in lines))
    rng = np.random.default_rng(seed)
    with out.open("wb") as fh:
        fh.write((first + "\n").encode())
        for start in range(0, rows, 100_000):
            picks = rng.integers(0, len(lines), min(100_000, rows - start))
            fh.write("".join(lines[i][:-1] + " " * pad + "\n" for i in picks).encode())
    return out.stat().st_size


def run_upload(csv_path: Path, table: str, schema_path: Path, workdir: Path,
               rows: int) -> dict:
    """Both servers on loopback, a one-owner session, and ``feddpsyn client upload`` of the
    file under /usr/bin/time -v."""
    from feddpsyn.common import wire
    from feddpsyn.common.files import write_private
    from feddpsyn.demo import start_servers
    from feddpsyn.operator_api import create_session

    state = workdir / "servers"
    ks, cs = start_servers(state)
    try:
        operator = (state / "keyserver" / "operator.token").read_text().strip()
        request = wire.SessionCreate(
            schema=json.loads(schema_path.read_text()) | {"name": table}, clients=["owner"],
            parameter_set="default", budget=wire.BudgetSpec(epsilon=1.0, delta=1e-6),
            max_rows=rows, selection=wire.SelectionRequest(mode="none"))
        started = time.perf_counter()
        created = create_session(ks.url, operator, request, timeout=1800)
        session_s = time.perf_counter() - started
        token = workdir / "owner.token"
        write_private(token, created.client_tokens["owner"].encode())
        feddpsyn = Path(sys.executable).with_name("feddpsyn")
        session = created.session.session_id
        args = ["client", "upload", "--keyserver", ks.url, "--computeserver", cs.url,
                "--session", session, "--client-id", "owner", "--token-file", str(token),
                "--csv", str(csv_path), "--state-dir", str(workdir / "agent")]
        started = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-v", str(feddpsyn), *args],
                              capture_output=True, text=True)
        seconds = time.perf_counter() - started
        peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
        return {"command": " ".join(["/usr/bin/time", "-v", "feddpsyn", *args]),
                "returncode": done.returncode, "seconds": round(seconds, 2),
                "session_preparation_s": round(session_s, 1),
                "stdout": done.stdout.strip().splitlines()[-3:],
                "stderr_tail": [] if done.returncode == 0
                else done.stderr.strip().splitlines()[-5:],
                "peak_rss_mb": round(int(peak.group(1)) / 1024, 1) if peak else None}
    finally:
        ks.stop()
        cs.stop()


def generate(source: Path, out: Path, size_bytes: int, seed: int) -> np.ndarray:
    """Write the source's header, then its data lines drawn with replacement until the file
    holds at least ``size_bytes``; returns how often each source line was drawn."""
    header, lines = source_lines(source)
    rng = np.random.default_rng(seed)
    drawn = np.zeros(len(lines), dtype=np.int64)
    written = 0
    with out.open("wb") as fh:
        first = (header + "\n").encode()
        fh.write(first)
        written += len(first)
        while written < size_bytes:
            picks = rng.integers(0, len(lines), 200_000)
            block = "".join(lines[i] for i in picks)
            data = block.encode()
            if written + len(data) > size_bytes:  # stop near the size: whole lines only
                sizes = np.cumsum([len(lines[i].encode()) for i in picks])
                keep = int(np.searchsorted(sizes, size_bytes - written)) + 1
                picks = picks[:keep]
                data = "".join(lines[i] for i in picks).encode()
            fh.write(data)
            written += len(data)
            np.add.at(drawn, picks, 1)
    return drawn


def expected_counts(source: Path, schema: Schema, layout: MarginalLayout,
                    drawn: np.ndarray) -> np.ndarray:
    """The count vector of the generated file: each source row's counts, weighted by how
    often it was drawn."""
    header, rows, lines = read_csv(source)
    records = encode_rows(rows, header, schema, lines=lines).records
    out = np.zeros(layout.total_cells, dtype=np.int64)
    for m in layout.marginals:
        flat = np.zeros(len(records), dtype=np.int64)
        for a in m.attrs:
            flat = flat * layout.domain_sizes[a] + records[:, a]
        out[m.offset:m.offset + m.size] = np.bincount(flat, weights=drawn,
                                                      minlength=m.size).astype(np.int64)
    return out


def measure(kind: str, csv_path: Path, schema_path: Path) -> dict:
    """In this (fresh) process: count the file and report its own peak memory."""
    schema = Schema.load(schema_path)
    layout = MarginalLayout.build(schema.domain_sizes)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    if kind == "stream":
        counts, tally = count_csv(csv_path, schema, layout)
        rows = tally.rows_kept
    else:
        records = encode_csv(csv_path, schema).records
        counts, rows = layout.counts(records), len(records)
    seconds = time.perf_counter() - started
    hwm = status_kb(os.getpid(), "VmHWM")
    return {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "vm_hwm_mb": None if hwm is None else round(hwm / 1024, 1),
            "rss_before_counting_mb": round(rss_before / 1024, 1),
            "counts_sha256": hashlib.sha256(counts.astype(np.int64).tobytes()).hexdigest()}


def run_child(kind: str, csv_path: Path, schema_path: Path) -> dict:
    done = subprocess.run([sys.executable, __file__, "--measure", kind, "--csv", str(csv_path),
                           "--schema", str(schema_path)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_client_check(csv_path: Path, schema_path: Path) -> dict:
    feddpsyn = Path(sys.executable).with_name("feddpsyn")
    command = ["/usr/bin/time", "-v", str(feddpsyn), "client", "check", "--csv", str(csv_path),
               "--schema", str(schema_path)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"client check failed: {done.stdout}{done.stderr}")
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    return {"command": " ".join(["/usr/bin/time", "-v", "feddpsyn"] + command[3:]),
            "seconds": round(seconds, 2), "stdout": done.stdout.strip().splitlines(),
            "peak_rss_mb": round(int(peak.group(1)) / 1024, 1) if peak else None}


def prefix(csv_path: Path, out: Path, size_bytes: int) -> int:
    """The header and whole lines of ``csv_path`` up to about ``size_bytes``."""
    written = 0
    with csv_path.open("rb") as src, out.open("wb") as dst:
        for line in src:
            if written >= size_bytes:
                break
            dst.write(line)
            written += len(line)
    return written


def machine() -> dict:
    memory = None
    try:
        found = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(),
                          re.MULTILINE)
        memory = round(int(found.group(1)) / 1024 ** 2, 1) if found else None
    except OSError:
        pass
    model = None
    try:
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(),
                          re.MULTILINE)
        model = found.group(1).strip() if found else None
    except OSError:
        pass
    return {"platform": platform.platform(), "cpu": model, "cpus": os.cpu_count(),
            "memory_gb": memory, "python": platform.python_version(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


def count_large(args, source: Path, schema_path: Path, schema: Schema,
                layout: MarginalLayout) -> tuple:
    """The counting, client check and whole-file measurements on a generated table:
    (counting, client check, whole-file contrast, file size, rows, generation seconds)."""
    big = args.workdir / f"{args.table}-{int(args.size_mb)}mb.csv"
    print(f"generating {big} ({args.size_mb:g} MB from {source}) ...", flush=True)
    t = time.perf_counter()
    drawn = generate(source, big, int(args.size_mb * 1024 ** 2), args.seed)
    generation_s = time.perf_counter() - t
    size = big.stat().st_size
    print(f"  {size / 1024 ** 2:.0f} MB, {int(drawn.sum())} rows, {generation_s:.0f} s",
          flush=True)
    expected = hashlib.sha256(expected_counts(source, schema, layout, drawn).tobytes()
                              ).hexdigest()
    try:
        print("counting (clients.counting.count_csv, fresh process) ...", flush=True)
        stream = run_child("stream", big, schema_path)
        stream["counts_equal_expected"] = stream["counts_sha256"] == expected
        print(f"  {stream['rows']} rows in {stream['seconds']} s ({stream['rows_per_s']} "
              f"rows/s), peak RSS {stream['peak_rss_mb']} MB, counts exact: "
              f"{stream['counts_equal_expected']}", flush=True)
        print("feddpsyn client check under /usr/bin/time -v ...", flush=True)
        check = run_client_check(big, schema_path)
        print(f"  peak RSS {check['peak_rss_mb']} MB, {check['seconds']} s", flush=True)
        whole = None
        if args.whole_mb > 0:
            small = args.workdir / f"{args.table}-{int(args.whole_mb)}mb-prefix.csv"
            prefix_bytes = prefix(big, small, int(args.whole_mb * 1024 ** 2))
            print(f"whole-table path on a {prefix_bytes / 1024 ** 2:.0f} MB prefix ...",
                  flush=True)
            whole = run_child("whole", small, schema_path)
            streamed_prefix = run_child("stream", small, schema_path)
            whole.update(file_mb=round(prefix_bytes / 1024 ** 2, 1),
                         stream_peak_rss_mb_same_file=streamed_prefix["peak_rss_mb"],
                         counts_equal_stream=whole["counts_sha256"]
                         == streamed_prefix["counts_sha256"])
            print(f"  peak RSS {whole['peak_rss_mb']} MB (streamed: "
                  f"{streamed_prefix['peak_rss_mb']} MB), {whole['seconds']} s", flush=True)
            if not args.keep:
                small.unlink()
    finally:
        if not args.keep:
            big.unlink(missing_ok=True)
    return stream, check, whole, size, int(drawn.sum()), generation_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", default="computers",
                        help="a table of the shared data (FEDDPSYN_DATA): <table>/<table>.csv "
                             "and its schema")
    parser.add_argument("--size-mb", type=float, default=1024)
    parser.add_argument("--whole-mb", type=float, default=50,
                        help="size of the prefix counted by the whole-table path (0: skip)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/feddpsyn-bench-stream"))
    parser.add_argument("--upload-mb", type=float, default=0,
                        help="also run `feddpsyn client upload` of a padded file this large "
                             "against both servers (0: skip)")
    parser.add_argument("--upload-rows", type=int, default=500_000,
                        help="rows of the upload's file, and the session's max_rows")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    parser.add_argument("--out", type=Path, default=None, help="a new JSON file for results")
    parser.add_argument("--measure", choices=["stream", "whole"], help=argparse.SUPPRESS)
    parser.add_argument("--csv", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--schema", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.csv, args.schema)))
        return
    if args.out is not None and args.out.exists():
        raise SystemExit(f"{args.out} exists: results files are never overwritten; choose "
                         "another --out")
    source = DATA / args.table / f"{args.table}.csv"
    schema_path = DATA / args.table / f"{args.table}.schema.json"
    schema = Schema.load(schema_path)
    layout = MarginalLayout.build(schema.domain_sizes)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "clients", "params",
                                 "bench/scale/bench_client_stream.py"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip())
    host = machine()
    args.workdir.mkdir(parents=True, exist_ok=True)
    stream = check = whole = None
    size, rows, generation_s = 0, 0, 0.0
    if args.size_mb > 0:
        stream, check, whole, size, rows, generation_s = count_large(
            args, source, schema_path, schema, layout)
    upload = None
    if args.upload_mb > 0:
        padded = args.workdir / f"{args.table}-{int(args.upload_mb)}mb-padded.csv"
        print(f"generating {padded} ({args.upload_rows} rows padded to {args.upload_mb:g} MB)"
              " ...", flush=True)
        upload_size = generate_padded(source, padded, int(args.upload_mb * 1024 ** 2),
                                      args.upload_rows, args.seed)
        try:
            print("feddpsyn client upload under /usr/bin/time -v, servers on loopback ...",
                  flush=True)
            upload = run_upload(padded, args.table, schema_path, args.workdir,
                                args.upload_rows)
            upload.update(file_mb=round(upload_size / 1024 ** 2, 1), rows=args.upload_rows)
            print(f"  rc {upload['returncode']}, peak RSS {upload['peak_rss_mb']} MB, "
                  f"{upload['seconds']} s: {upload['stdout'][-1:]}", flush=True)
        finally:
            if not args.keep:
                padded.unlink(missing_ok=True)
    peaks = [x["peak_rss_mb"] or 0 for x in (stream, check, upload) if x is not None]
    document = {
        "run": " ".join([".venv/bin/python", "bench/scale/bench_client_stream.py"] + sys.argv[1:]),
        "started": started, "commit": commit, "uncommitted_changes_in_measured_code": dirty,
        "machine": host, "table": args.table, "columns": len(schema.columns),
        "cells": layout.total_cells, "file_mb": round(size / 1024 ** 2, 1),
        "rows": rows, "generation_s": round(generation_s, 1), "seed": args.seed,
        "target_peak_rss_mb": TARGET_MB, "counting": stream, "client_check": check,
        "whole_file_contrast": whole, "upload": upload,
        "within_target": bool(peaks) and max(peaks) <= TARGET_MB
        and (upload is None or upload["returncode"] == 0)}
    print(json.dumps({k: document[k] for k in ("file_mb", "rows", "within_target")}))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("x") as fh:  # never over an existing file
            fh.write(json.dumps(document, indent=1) + "\n")
        print(f"written {args.out}")


if __name__ == "__main__":
    main()
