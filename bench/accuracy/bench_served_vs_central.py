"""The servers' plans against a trusted curator's, on every real table we ship.

For each table, budget and method, ``fedbench.runner.run_utility`` runs the method on the
same splits and seeds (4 uniform owners, 20% held out), and this script keeps each method's
mean and sd over the repeats of the 2-way and 1-way L1 errors, then the ratio of each served
method to the best central method of the same table and budget. Everything is written to
one JSON file (``--json``) with the command that made it, so ``bench/results_page.py`` can
show it; the per-run rows stay in ``--out``'s folders.

    .venv/bin/python bench/accuracy/bench_served_vs_central.py --eps 0.3,1,4 --repeats 5 \\
        --json bench/results/served_vs_central.json --out /tmp/served_vs_central
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from feddpsyn.demo import data_dir  # noqa: E402
from feddpsyn.demo import dataset as bundled  # noqa: E402
from feddpsyn.fedbench.methods import KINDS, METHODS, WHAT_IF  # noqa: E402
from feddpsyn.fedbench.methods.feddpsyn_served import (  # noqa: E402
    default_at_envelope_bits,
    default_at_first_share,
)
from feddpsyn.fedbench.provenance import commit as _commit  # noqa: E402
from feddpsyn.fedbench.runner import Setting, run_utility  # noqa: E402
from feddpsyn.params.schema import Schema  # noqa: E402

# table: (csv, schema, target column for the ML metrics)
TABLES = {
    "mroz": ("mroz/mroz.csv", "mroz/mroz.schema.json", "work"),
    "wages": ("wages/wages.csv", "wages/wages.schema.json", "union"),
    "computers": ("computers/computers.csv", "computers/computers.schema.json", "premium"),
    "doctor_contacts": ("doctor_contacts/doctor_contacts.csv",
                        "doctor_contacts/doctor_contacts.schema.json", "physlim"),
    "fed_heart_disease": None,
    "adult": None,
}
SERVED = ["feddpsyn-served-all-pgm", "feddpsyn-served-noisy-greedy-pgm", "feddpsyn-served-pgm"]
CENTRAL = ["central-privsyn-pgm", "central-aim", "central-privsyn-all"]


def _table(name: str) -> tuple[Path, Schema, str]:
    if TABLES[name] is None:
        ds = bundled(name)
        return ds.csv, Schema.load(ds.schema), {"adult": "label",
                                                "fed_heart_disease": "target"}[name]
    csv, schema, target = TABLES[name]
    return data_dir() / csv, Schema.load(data_dir() / schema), target


def summarise(rows: list[dict], table: str) -> list[dict]:
    """Mean and sd over repeats per (method, eps), and each method's ratio to the table's
    best central method at that eps."""
    out = []
    for method in sorted({r["method"] for r in rows}):
        for eps in sorted({float(r["eps"]) for r in rows}):
            cell = [r for r in rows if r["method"] == method and float(r["eps"]) == eps]
            if not cell:
                continue
            two = [float(r["two_way"]) for r in cell]
            one = [float(r["one_way"]) for r in cell]
            out.append({"table": table, "method": method, "eps": eps,
                        "mean": statistics.fmean(two),
                        "sd": statistics.stdev(two) if len(two) > 1 else 0.0,
                        "one_way_mean": statistics.fmean(one), "repeats": len(cell),
                        "seconds_mean": statistics.fmean(float(r["seconds"]) for r in cell)})
    for entry in out:
        central = [e["mean"] for e in out if e["eps"] == entry["eps"]
                   and e["method"].startswith("central-")]
        entry["ratio_to_best_central"] = entry["mean"] / min(central) if central else None
    return out


def against(summary: dict, references: list[tuple[str, dict]]) -> dict:
    """``summary`` with each entry's ratios to the central methods of ``references`` (pairs
    of path and summary of the same bench on the same tables, splits and seeds: the runner
    draws a repeat's split from its seed alone), for a run of served methods only. The
    references' central entries are carried into the result with the command and file they
    came from (an entry's own ``source`` where a gathered references file names one), so the
    one file holds every figure its ratios use. A central cell found in two
    references is refused: which one a ratio used would not be clear. A run of served and
    central methods together is its own reference: given as the summary and as a
    references file, its central entries are carried once, from the references."""
    central: dict = {}
    carried: list[dict] = []
    for path, reference in references:
        for e in reference["results"]:
            if not e["method"].startswith("central-"):
                continue
            key = (e["table"], float(e["eps"]), e["method"])
            if key in central:
                raise SystemExit(f"{key} is in two references (the second: {path})")
            central[key] = e["mean"]
            carried.append({**e, "command": e.get("command", reference.get("command")),
                            "source": e.get("source", path)})
    out = []
    for e in summary["results"]:
        if e["method"].startswith("central-"):
            continue  # a reference, not a served entry: carried from the references only
        refs = {m: v for (t, eps, m), v in central.items()
                if t == e["table"] and eps == float(e["eps"])}
        e = {**e, "ratio_to_best_central": e["mean"] / min(refs.values()) if refs else None,
             "command": e.get("command", summary.get("command"))}
        if "central-privsyn-pgm" in refs:
            e["ratio_to_central_privsyn_pgm"] = e["mean"] / refs["central-privsyn-pgm"]
        out.append(e)
    tables = {e["table"] for e in out}
    for e in carried:
        if e["table"] in tables:
            best = min(v for (t, eps, _), v in central.items()
                       if t == e["table"] and eps == float(e["eps"]))
            out.append({**e, "ratio_to_best_central": e["mean"] / best})
    return {**summary, "results": out, "references": [path for path, _ in references]}


def _earlier_rows(resume: Path | None, table: str) -> Path | None:
    """The file of an earlier run's rows for ``table`` under its --out, if it has one."""
    if resume is None:
        return None
    if not resume.is_dir():
        raise SystemExit(f"--resume: {resume} is not an earlier run's --out folder")
    for name in ("results.partial.csv", "results.csv"):
        if (resume / table / name).is_file():
            return resume / table / name
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--methods", default=",".join(SERVED + CENTRAL))
    parser.add_argument("--eps", default="0.3,1,4")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--resume", type=Path, default=None,
                        help="an earlier run's --out: the tasks it finished (its tables' "
                             "results.partial.csv or results.csv) are not run again")
    parser.add_argument("--out", type=Path, required=True, help="per-run rows, per table")
    parser.add_argument("--json", type=Path, required=True, help="the summary to write")
    parser.add_argument("--against", nargs="+", type=Path, metavar="SUMMARY REFERENCES",
                        help="instead of running: SUMMARY's entries with their ratios to the "
                             "central methods of one or more REFERENCES files, and those "
                             "central entries, written to --json")
    parser.add_argument("--first-shares", default="",
                        help="what-ifs: also run feddpsyn-default with noisy-greedy's first "
                             "1-way release at each of these fixed shares (methods "
                             "feddpsyn-default@first=<share>), e.g. 0.1,0.2,0.3")
    parser.add_argument("--envelope-bits", default="",
                        help="what-ifs: also run feddpsyn-default with the split 2-way "
                             "release's groups allowed this many encrypted bits a count "
                             "(methods feddpsyn-default@envelope=<bits>; plaintext only), "
                             "e.g. 384,512")
    args = parser.parse_args()
    methods = args.methods.split(",")
    for bits in filter(None, args.envelope_bits.split(",")):
        name = f"feddpsyn-default@envelope={int(bits)}"
        METHODS[name] = default_at_envelope_bits(int(bits))
        KINDS[name] = WHAT_IF
        methods.append(name)
    for share in filter(None, args.first_shares.split(",")):
        name = f"feddpsyn-default@first={float(share):g}"
        METHODS[name] = default_at_first_share(float(share))
        KINDS[name] = WHAT_IF
        methods.append(name)
    if args.jobs > 1 and (args.first_shares or args.envelope_bits):
        raise SystemExit("--first-shares and --envelope-bits run in one process (--jobs 1): "
                         "their methods are registered here, not in the workers")
    if args.against:
        if len(args.against) < 2:
            raise SystemExit("--against takes a SUMMARY and at least one REFERENCES file")
        summary, *references = args.against
        if args.json.exists():
            raise SystemExit(f"{args.json} exists: results are never overwritten")
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(against(
            json.loads(summary.read_text()),
            [(str(r), json.loads(r.read_text())) for r in references]), indent=1) + "\n")
        return
    # The code the runs use is the tree at the start: a commit made while a long run goes
    # on must not be recorded as its code.
    code = _commit()
    entries = []
    for name in args.tables.split(","):
        csv, schema, target = _table(name)
        rows = run_utility(csv, schema, target, [m for m in methods if m],
                           [float(e) for e in args.eps.split(",")], [Setting(4, "uniform", None)],
                           args.repeats, args.out / name, args.delta, jobs=args.jobs,
                           resume=_earlier_rows(args.resume, name))
        entries += summarise(rows, name)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "what": "2-way L1 of the servers' plans and the central references, 4 uniform "
                    "owners, mean and sd over repeats",
            "command": "python bench/accuracy/bench_served_vs_central.py " + " ".join(sys.argv[1:]),
            "commit": code, "machine": platform.node(),
            "date": datetime.date.today().isoformat(), "delta": args.delta,
            "results": entries}, indent=1) + "\n")


if __name__ == "__main__":
    main()
