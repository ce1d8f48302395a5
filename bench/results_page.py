"""Write docs/results.md and docs/results-archive.md from the kept measurements.

docs/results.md answers a reader first: it opens with today's default in numbers (accuracy
against a trusted curator, the demo's and Adult's times with the machine's lookup rate,
DistAIM against FLAIM, the privacy spent), read from the files ``HEADLINE`` names, then
shows every file of bench/results that ``CURRENT`` names. docs/results-archive.md holds the
rest: the earlier runs of the benchmarks (every other file of bench/results) and the results
of the design studies in experiments/ (``experiments/<study>/results``), by study.

Every JSON file becomes a table (files of one kind share a table), and every utility run (a
folder with ``results.csv``, written by ``feddpsyn bench utility``) becomes a table of its
mean 2-way error per method and epsilon. Each table says what it measures, the command that
produced it where the file records one (and where the script it names lives now, if it
moved) and the commit and date where the file records them. Nothing is measured here and no
number is typed in by hand: the pages are a function of the files and of the two lists of
file names below, with files, keys and rows in a fixed order, so the same files always give
the same pages.

    .venv/bin/python bench/results_page.py            # rewrite both pages
    .venv/bin/python bench/results_page.py --check    # exit 1 if a committed page is stale

Standard library only, so tests/project/test_docs.py can run the check in well under a second.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
EXPERIMENTS = ROOT / "experiments"
PAGE = ROOT / "docs" / "results.md"
ARCHIVE = ROOT / "docs" / "results-archive.md"
REGENERATE = ".venv/bin/python bench/results_page.py"
UTILITY_TITLE = "Utility runs (`feddpsyn bench utility`)"

# The files of bench/results that hold today's figures (paths or patterns relative to
# bench/results; a folder stands for everything in it), in the order docs/results.md shows
# them. Every other file of bench/results is an earlier run: docs/results-archive.md. A run
# that replaces one of these takes its place here.
CURRENT = (
    "served_vs_central.json",             # feddpsyn-default against the curator, 6 tables
    "adult_eps03_30_repeats",             # its one cell above 1.05, at 30 repeats
    "served_eps_sweep/adult_a.json",      # every served plan, eps 0.3 to 4
    "served_eps_sweep/adult_b.json",
    "served_eps_sweep/fed_heart_disease_v3.json",
    "served_eps_sweep/fed_heart_disease_all_pgm.json",
    "plan_acceptance_envelope_384.json",  # the default set's version 3: the eps spent
    "demo_time/fed_heart_disease_metered_*.json",  # the demo at the default's code
    "absent_owner",                       # the demo with an owner who never uploads
    "demo_time/adult_default.json",
    "demo_time/adult_offline_first_128.json",
    "demo_time/adult_noisy_greedy_widths.json",
    "distaim_flaim*.json",
    "distaim_adult_mpc.json",             # DistAIM in three MPyC processes on Adult
    "client_stream*.json",
    "admission",                          # a fresh key server's answers to POST /sessions
    "scale.json",
    "adult/2026-12-05",                   # every method, at the current default
    "adult/2026-12-01",                   # every method, the complete 3-repeat run
)

# What the summary at the top of docs/results.md reads (each a file CURRENT names).
HEADLINE = {
    "accuracy": ("served_vs_central.json",),
    "accuracy_repeats": ("adult_eps03_30_repeats/adult_eps03.json",),
    "demo": ("demo_time/fed_heart_disease_metered_1.json",
             "demo_time/fed_heart_disease_metered_2.json",
             "demo_time/fed_heart_disease_metered_3.json"),
    "adult": ("demo_time/adult_default.json", "demo_time/adult_offline_first_128.json",
              "demo_time/adult_noisy_greedy_widths.json"),
    "distaim": ("distaim_flaim.json", "distaim_flaim_32.json", "distaim_flaim_32_subset.json",
                "distaim_flaim_32_interleaved.json", "distaim_flaim_enrolment.json",
                "distaim_flaim_32_enrolment.json"),
    "privacy": ("plan_acceptance_envelope_384.json",),
    "distaim_mpc": ("distaim_adult_mpc.json",),
}
# The same code's demo on two days (archived runs), for the spread of a time between days.
SAME_CODE_TWO_DAYS = ("demo_time/fed_heart_disease_default.json",
                      "demo_time/fed_heart_disease_320ce6f_back_to_back.json")

# Scripts that recorded commands name and that are not in this tree (nor moved within it).
HISTORICAL = {
    "split_exp.py": "an uncommitted what-if script; its runs are what "
                    "`bench/accuracy/bench_served_vs_central.py --first-shares` does now",
}


# ----------------------------------------------------------------------------- formatting

def num(x, digits: int = 4) -> str:
    """A number with `digits` significant digits; '-' for a missing value."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if x == 0:
        return "0"
    if abs(x) >= 10 ** digits:  # whole numbers in full, never in exponent form
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def fixed(x, places: int = 1) -> str:
    return "-" if x is None else f"{x:,.{places}f}"


def pm(mean, sd, digits: int = 3) -> str:
    if mean is None:
        return "-"
    if sd is None:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"


def mean_sd(values) -> str:
    """Mean ± population sd of a list of numbers; '-' when there is none."""
    if not values:
        return "-"
    sd = statistics.pstdev(values) if len(values) > 1 else None
    return pm(statistics.fmean(values), sd)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def rel(path: Path) -> str:
    """A path relative to the repository, as text."""
    return path.relative_to(ROOT).as_posix()


def link(path: Path) -> str:
    """A markdown link from docs/ to a file of the repository."""
    return f"[`{rel(path)}`](../{rel(path)})"


# ----------------------------------------------------------------------------- scripts
# A recorded command names its script by the path it had when it ran; the pages say where
# it is now (a moved script is the one script of that name in bench/ or experiments/).

SCRIPT = re.compile(r"[\w./-]*\.py\b")
_SCRIPTS: dict[str, list[str]] = {}


def scripts() -> dict[str, list[str]]:
    """Every Python script of bench/ and experiments/ today, by file name."""
    if not _SCRIPTS:
        for folder in (ROOT / "bench", EXPERIMENTS):
            for path in sorted(folder.rglob("*.py")):
                _SCRIPTS.setdefault(path.name, []).append(rel(path))
    return _SCRIPTS


def script_status(token: str) -> tuple[str, str]:
    """Where a script a recorded command names is today: ("here", path) if at that path,
    ("moved", path) if one script of that name is elsewhere in bench/ or experiments/,
    ("historical", why) if HISTORICAL says why it is gone, else ("missing", token)."""
    path = token.removeprefix("./")
    if (ROOT / path).is_file():
        return "here", path
    name = Path(path).name
    found = scripts().get(name, [])
    if len(found) == 1:
        return "moved", found[0]
    if name in HISTORICAL:
        return "historical", HISTORICAL[name]
    return "missing", token


def script_notes(command: str) -> str:
    """What a recorded command's reader needs about its scripts: where each moved one lives
    now and why a historical one is gone ('' when every script is where the command says)."""
    notes = []
    for token in dict.fromkeys(SCRIPT.findall(command)):
        status, where = script_status(token)
        if status == "moved":
            notes.append(f"`{token}` is now `{where}`")
        elif status == "historical":
            notes.append(f"`{token}` is historical: {where}")
        elif status == "missing":
            notes.append(f"`{token}` is not in this tree")
    return "; ".join(notes)


def locate(name: str) -> str:
    """A script's path today, from its file name (the name itself if none or several)."""
    found = scripts().get(name.split()[0], [])
    return " ".join([found[0], *name.split()[1:]]) if len(found) == 1 else name


def provenance(*, command: str | None = None, script: str | None = None,
               commit: str | None = None, started: str | None = None,
               added: dict | None = None) -> list[str]:
    """The file's command, commit and date as recorded; ``script``: the file name of the
    script that writes such files (with its usual arguments), for a file that records no
    command; ``added``: for a file kept before its script recorded them, the commit and date
    that added it (``added_in``)."""
    lines = []
    if command:
        lines.append(f"Command (as recorded): `{command}`")
        notes = script_notes(command)
        if notes:
            lines.append(f"Scripts: {notes}.")
    elif script:
        lines.append(f"Command: not recorded in the file; written by `{locate(script)}`.")
    recorded = []
    if commit:
        recorded.append(f"commit `{commit}`")
    if started:
        recorded.append(f"started {started}")
    if recorded or not added:
        lines.append("Recorded: " + (", ".join(recorded) if recorded else
                                     "no commit, machine or date in the file") + ".")
    else:
        lines.append(f"Recorded: not by the run; the file was added in commit "
                     f"`{added['commit']}` on {added['date']} (machine: {added['machine']}).")
    return [line + "  " if i < len(lines) - 1 else line for i, line in enumerate(lines)]


# ----------------------------------------------------------------------------- JSON kinds
# A kind is known by its keys or by its script's file name in the recorded command, never by
# the script's folder: files kept before bench/ had topic folders record bench/bench_x.py,
# later ones bench/<topic>/bench_x.py, and both are read.

def is_online(d: dict) -> bool:
    return "measured" in d and "model" in d


def is_demo_ratio(d: dict) -> bool:
    return {"one_way", "two_way", "three_way", "draws"} <= d.keys()


def is_flaim(d: dict) -> bool:
    return "flaim_table_1" in d


def is_joint_noise(d: dict) -> bool:
    return "releases" in d and "sessions" in d


def is_joint_scores(d: dict) -> bool:
    return str(d.get("bench", "")).endswith("bench_joint_scores.py")


def is_served_vs_central(d: dict) -> bool:
    return "bench_served_vs_central.py" in str(d.get("command", ""))


def is_demo_time(d: dict) -> bool:
    return "bench_demo_time.py" in str(d.get("command", ""))


def render_demo_time(files: list[tuple[Path, dict]]) -> list[str]:
    out = ["## The demo's wall time", "",
           "`feddpsyn demo` end to end as a user runs it (servers started, session prepared, "
           "uploads, encrypted aggregation, selection and releases, synthesis), with the "
           "phases its report records, the machine's 1-minute load average before and "
           "after and, in the runs that measured it just before the demo, one core's "
           "milliseconds per 3-bit lookup (`bench/scale/lookup_rate.py`): the same code's "
           "time moved by 1.3-1.6x between days on one VM.", ""]
    rows = []
    for path, d in files:
        phases = d["phases"]
        rate = d.get("lookup_rate")
        rows.append([link(path), d["dataset"], d["selection"], num(d["epsilon"]),
                     f"{d['cores']}", f"{d['load_before'][0]:.2f} / {d['load_after'][0]:.2f}",
                     "-" if rate is None else f"{rate['ms_per_lookup']:.1f}",
                     f"{d['wall_seconds'] / 60:.1f}",
                     ", ".join(f"{k} {v:.0f}" for k, v in phases.items() if v >= 0.5),
                     num(d["two_way_error"]), num(d["central_two_way_error"])])
    out += table(["file", "data", "selection", "eps", "cores", "load before / after",
                  "ms a lookup", "minutes", "phases (s)", "2-way L1", "central 2-way L1"], rows)
    out.append("")
    for path, d in files:
        steps = (d.get("core_seconds") or {}).get("compute_server_steps")
        rate = (d.get("lookup_rate") or {}).get("ms_per_lookup")
        if steps:
            # Where the compute server's core-seconds went (computeserver.metering).
            parts = []
            for step in steps:
                each = step.get("cpu_ms_per_bootstrap")
                # Only P2's lookups are 3 bits wide, as the isolated rate's are; the sums'
                # are 2-bit and a few a task, the joint scores' passes 5-bit.
                ratio = (f", x{each / rate:.2f} the isolated 3-bit rate"
                         if each and rate and step["step"] == "p2_indif" else
                         ", 5-bit lookups" if step["step"] == "score_noise" else "")
                parts.append(f"{step['step']} {step['tasks']} tasks, "
                             f"{num(step['bootstraps'])} bootstraps, "
                             f"{step['cpu_seconds']:.0f} CPU s in {step['wall_seconds']:.0f} s"
                             + (f" ({each:.1f} ms CPU a bootstrap{ratio})" if each else ""))
            phase = d["core_seconds"]["phases"].get("encrypt_aggregate_release", {})
            out += [f"{link(path)}: the compute server's steps: " + "; ".join(parts)
                    + (f". In that phase ({phase['wall_s']:.0f} s on {d['cores']} cores) the "
                       f"compute server used {phase['computeserver']:.0f} CPU s, the key "
                       f"server {phase['keyserver']:.0f}, idle {phase['idle']:.0f}."
                       if phase else "."), ""]
    for path, d in files:
        if d.get("absent"):
            # A session closed without an owner (``demo --absent N --close-by``).
            refused = (d.get("late_upload_refused") or "").split(":", 1)
            out += [f"{link(path)}: owners {', '.join(d['contributors'])} contributed; "
                    f"{', '.join(d['absent'])} never uploaded and the session completed "
                    f"without it (`{' '.join(d['demo_args'])}`); its late upload: "
                    + (f"refused, `{refused[0].strip()}` answered "
                       f"\"{refused[1].strip()[:120]}...\"" if len(refused) == 2
                       else "not tried"), ""]
    for path, d in files:
        out += [f"{link(path)}:", *provenance(command=d["command"], commit=d["commit"],
                                              started=d["date"]), ""]
    return out


def is_client_stream(d: dict) -> bool:
    return "bench_client_stream.py" in str(d.get("run", ""))


def render_client_stream(files: list[tuple[Path, dict]]) -> list[str]:
    out = ["## The client agent's memory on a large table", ""]
    for path, d in files:
        m = d["machine"]
        out += [f"File: {link(path)}. Tables generated from `{d['table']}` ({d['columns']} "
                f"columns, {d['cells']} cells: its own lines drawn with replacement), each "
                "measured in a fresh process: the client agent's counting "
                "(`clients.counting`), `feddpsyn client check` and `feddpsyn client upload` "
                "under `/usr/bin/time -v`, the whole-table path on a prefix for contrast. "
                f"Target: at most {d['target_peak_rss_mb']} MB resident. Machine: "
                f"{m.get('cpus')} CPUs, {m.get('memory_gb')} GB, load "
                f"{m.get('load_average_at_start')} at the start.", "",
                *provenance(command=d.get("run"), commit=d.get("commit"),
                            started=d.get("started")), ""]
        c, check = d.get("counting"), d.get("client_check")
        whole, upload = d.get("whole_file_contrast"), d.get("upload")
        rows = []
        if c:
            rows.append(["counting (`count_csv`)", fixed(d["file_mb"], 0), str(c["rows"]),
                         fixed(c["seconds"], 0), str(c["rows_per_s"]),
                         fixed(c["peak_rss_mb"], 0),
                         "equal to the draw's" if c.get("counts_equal_expected")
                         else "NOT EQUAL"])
        if check:
            rows.append(["`feddpsyn client check`", fixed(d["file_mb"], 0), str(c["rows"]),
                         fixed(check["seconds"], 0), "", fixed(check["peak_rss_mb"], 0), ""])
        if whole:
            rows.append(["whole-table path (before)", fixed(whole["file_mb"], 0),
                         str(whole["rows"]), fixed(whole["seconds"], 0),
                         str(whole["rows_per_s"]), fixed(whole["peak_rss_mb"], 0),
                         "equal to the streamed" if whole.get("counts_equal_stream")
                         else "NOT EQUAL"])
        if upload:
            rows.append(["`feddpsyn client upload` (rows padded)", fixed(upload["file_mb"], 0),
                         str(upload["rows"]), fixed(upload["seconds"], 0), "",
                         fixed(upload["peak_rss_mb"], 0),
                         "stored" if upload["returncode"] == 0 else "FAILED"])
        out += table(["path", "file MB", "rows", "seconds", "rows/s", "peak RSS MB",
                      "counts"], rows)
        out.append("")
    return out


def render_served_vs_central(files: list[tuple[Path, dict]]) -> list[str]:
    out = ["## Served plans against the curator", "",
           "2-way L1 of the servers' plans and the central references on the shipped "
           "tables (4 uniform owners): mean +- sd over the repeats, and each method's ratio "
           "to the best central method of its table and eps.", ""]
    for path, d in files:
        out += [f"### `{rel(path)}`", ""]
        if d.get("covers"):
            out += [f"Covers: {d['covers']}", ""]
        # The ratio to central PrivSyn with the same estimator, where the file has it.
        privsyn = any("ratio_to_central_privsyn_pgm" in e for e in d["results"])
        rows = [[e["table"], f"`{e['method']}`", num(e["eps"]), pm(e["mean"], e["sd"]),
                 str(e["repeats"]),
                 "-" if e.get("ratio_to_best_central") is None
                 else fixed(e["ratio_to_best_central"], 2)]
                + ([] if not privsyn else
                   ["-" if e.get("ratio_to_central_privsyn_pgm") is None
                    else fixed(e["ratio_to_central_privsyn_pgm"], 2)])
                for e in sorted(d["results"], key=lambda e: (e["table"], e["eps"],
                                                             e["method"]))]
        out += table(["table", "method", "eps", "2-way L1", "repeats", "/ best central"]
                     + (["/ central PrivSyn+PGM"] if privsyn else []), rows)
        out += [""] + provenance(command=d.get("command"), commit=d.get("commit"),
                                 started=d.get("date")) + [""]
    return out


def render_online(files: list[tuple[Path, dict]]) -> list[str]:
    out = ["## Adult's online phase through both servers", ""]
    for path, d in files:
        m, model = d["measured"], d["model"]
        rounds = m.get("rounds_s", [])
        out += [
            f"File: {link(path)}. Adult, 4 clients, em selection, both servers on loopback with "
            "the in-process executor; the phases are read from the compute server's log. The "
            "second table is a model calibrated on this run (seconds per bootstrap, list "
            "scheduling), not a measurement.", "",
            *provenance(command=d.get("command"), script="bench_adult_online.py",
                        added=d.get("added_in")), ""]
        restarted = m.get("rounds_after_restart") or []
        if restarted:
            out += ["Rounds timed from a restart of the servers: "
                    + ", ".join(str(r) for r in restarted) + ".", ""]
        p3 = sum(rounds)
        out += table(["phase", "minutes", "detail"], [
            ["P2 (dependency scores)", fixed(m["p2_s"] / 60),
             f"{num(model.get('p2_bootstraps'))} bootstraps, "
             f"{fixed(model['seconds_per_bootstrap_p2'] * 1000)} ms a bootstrap a core"],
            ["P3 (selection rounds)", fixed(p3 / 60),
             f"{len(rounds)} rounds, {fixed(min(rounds), 0)}-{fixed(max(rounds), 0)} s each"
             if rounds else ""],
            ["2-way release", fixed(m["release_2way_s"] / 60), ""],
            ["online phase", fixed(m["online_s"] / 60), "end to end"],
        ])
        out.append("")
        by_cores = model.get("by_cores", {})
        rows = []
        for cores in sorted(by_cores, key=int):
            c = by_cores[cores]
            rows.append([cores, fixed(c["p2_min"]), fixed(c["p3_one_call_min"]),
                         fixed(c["p3_batched_min"]), fixed(c["online_one_call_min"]),
                         fixed(c["online_batched_min"])])
        batches = model.get("batches")
        out += [f"Model, minutes (P3 by candidate batches: {batches[0]} batches of at most "
                f"{batches[1]}):" if batches else "Model, minutes:", ""]
        out += table(["cores", "P2", "P3 one call a round", "P3 batched",
                      "online, one call", "online, batched"], rows)
        out.append("")
    return out


def render_demo_ratio(files: list[tuple[Path, dict]]) -> list[str]:
    out = ["## The default demo's federated / central error ratio", "",
           "Many fresh sessions of the demo's plan (the servers' plan and its selection model in "
           "clear), each against a fresh central reference for its own pairs: mean average L1 "
           "error per marginal order, and the ratio with its standard error.", ""]
    rows = []
    for path, d in files:
        for order, name in (("one_way", "1-way"), ("two_way", "2-way"), ("three_way", "3-way")):
            r = d[order]
            rows.append([f"`{path.name}`", str(d.get("method")), name, num(r["federated"]),
                         num(r["central"]), f"{r['ratio']:.3f} ± {r['ratio_se']:.3f}"])
    out += table(["file", "synthesis", "marginals", "federated", "central",
                  "ratio ± se"], rows)
    out.append("")
    for path, d in files:
        out += [f"{link(path)}: {d.get('dataset')}, selection {d.get('selection')}, "
                f"{d.get('rounds')} rounds, eps {d.get('epsilon')}, {d.get('draws')} draws, "
                f"{fixed(d.get('seconds'), 0)} s.  ",
                *provenance(command=d.get("command"),
                            script="bench_demo_central_ratio.py --json OUT",
                            commit=d.get("commit"), started=d.get("date"),
                            added=d.get("added_in")), ""]
    return out


def render_flaim(files: list[tuple[Path, dict]]) -> list[str]:
    first = files[0][1]
    s = first["setting"]
    out = ["## DistAIM in FLAIM's setting", "",
           f"{s['dataset']}, {s['clients']} clients ({s['partition']} split), "
           f"{s['workload']}, participation {s['participation']}, T = {s['rounds']}, "
           f"eps {s['epsilon']}, delta {s['delta']}. Central AIM runs on the union with the "
           "same T and rho in the same run. Error: " + first["metric"] + ". Mean ± sd over "
           "repeats. `oracle plain` runs the algorithm with the data in the clear; `mpc` runs "
           "the servers' MPC program in a one-party runtime.", ""]
    rows = []
    for path, d in files:
        st = d["setting"]
        schedule = st.get("schedule", "")
        if st.get("enrolment_one_ways"):
            schedule += " + enrolment 1-ways"
        rows.append([f"`{path.name}`", str(d["bins"]), str(d["oracle"]), schedule,
                     str(d["repeats"]), pm(d["distaim"], d["distaim_sd"]),
                     pm(d["central_aim"], d["central_aim_sd"]), f"{d['ratio']:.2f}",
                     pm(d.get("distaim_p1"), d.get("distaim_p1_sd")),
                     pm(d.get("central_aim_subset"), d.get("central_aim_subset_sd")),
                     mean_sd(d.get("subset_floor")),
                     fixed(statistics.fmean(d["clients_joined_by_last_round"]), 0)
                     if d.get("clients_joined_by_last_round") else "-",
                     fixed(d["upload_bytes_per_client"]["http"] / 1e6, 2)])
    published = first["flaim_table_1"]
    rows.append(["FLAIM Table 1 (published)", "", "", "", "", f"{published['distaim']}",
                 f"{published['central_aim']}", f"{published['ratio']}", "-", "-", "-", "-", "-"])
    out += table(["file", "bins", "oracle", "schedule", "repeats", "DistAIM p = 0.1",
                  "central AIM", "ratio", "DistAIM p = 1", "curator on admitted clients",
                  "admitted clients' exact marginals", "clients admitted (mean)",
                  "upload MB a client (HTTP)"], rows)
    out += ["", "The curator is central AIM (same T and rho) on exactly the clients the "
            "participation admitted, scored against the union; the admitted clients' exact "
            "marginals (no noise, no model) show how far the data DistAIM may read is from the "
            "union."]
    out += ["", "Commands, as recorded (some wrote to a scratch path and were copied here):", ""]
    for path, d in files:
        notes = script_notes(d.get("command", ""))
        out.append(f"* {link(path)}: `{d.get('command', 'not recorded')}`"
                   + (f" (scripts: {notes})" if notes else ""))
    out.append("")
    return out


def render_joint_noise(files: list[tuple[Path, dict]]) -> list[str]:
    out = ["## One joint noise against the two-noise release", ""]
    for path, d in files:
        out += [f"File: {link(path)}. Per release of each session's plan (noise auto), the "
                "joint release against the two-noise release of the same cells, alternating "
                "in one run; only same-run ratios count. Where `scaled` is yes, some chunks "
                "were measured and the rest scaled by chunk count.", "",
                *provenance(command=d.get("run"), script="bench_joint_noise.py",
                            commit=d.get("commit"), started=d.get("started")), ""]
        rows = []
        for r in d["releases"]:
            j, t = r["variants"]["joint"], r["variants"]["two-noise"]
            groups = f", {len(r['groups'])} groups" if r.get("groups") else ""
            rows.append([r["session"], r["release"] + groups, num(r["released_cells"]),
                         f"{r['chunks_measured']} / {r['chunks_touched']}",
                         num(r["scaled"]),
                         f"{num(j['online_s'], 3)} vs {num(t['online_s'], 2)}",
                         f"{num(j['offline_s'], 3)} vs {num(t['offline_s'], 2)}",
                         fixed(j["ks_cs_bytes"] / 1e6, 2),
                         f"{num(j['variance_per_count'])} vs {num(t['variance_per_count'])}"])
        out += table(["session", "release", "cells", "chunks measured / touched", "scaled",
                      "online s, joint vs two-noise", "offline s, joint vs two-noise",
                      "KS to CS MB", "variance per count, joint vs two-noise"], rows)
        out += ["", "Sessions:", ""]
        rows = [[s["session"], s["dataset"], str(s["selection"]),
                 str(s["rounds"]) if s.get("rounds") is not None else "-",
                 str(s["epsilon"]), repr(s["delta_total"]), str(s["count_bits"]),
                 ", ".join(f"{u} x {b}-bit" for u, b in s["joint_shapes"])]
                for s in d["sessions"]]
        out += table(["session", "dataset", "selection", "rounds", "eps", "delta_total",
                      "count bits", "joint shapes (1-way, 2-way envelope)"], rows)
        for session in d["sessions"]:
            sweep = session.get("split_sweep")
            if not sweep:
                continue
            out += ["", f"{session['session']}: the split 2-way release for m kept pairs (the "
                    "largest InDif first; plan only), mean variance per count against the even "
                    "two-server release:", ""]
            out += table(["m", "cells", "chunks", "noise", "groups", "variance",
                          "even two-server variance", "ratio"],
                         [[str(r["m"]), num(r["cells"]), str(r["chunks"]), r["noise"],
                           str(r["groups"]), num(r["variance"]),
                           num(r["even_two_server_variance"]), f"{r['variance_ratio']:.2f}"]
                          for r in sweep])
        look = d.get("lookup")
        if look:
            out += ["", "The additive form (a + b) mod 2^w that the XOR replaced, timed alone "
                    f"({look['bits']}-bit, {look['uniforms']} uniforms): "
                    f"{num(look['run_s_per_uniform'], 3)} s a uniform, evaluation keys "
                    f"{fixed(look['evaluation_keys_mb'])} MB, exact: {num(look['exact'])}."]
        out.append("")
    return out


def render_joint_scores(files: list[tuple[Path, dict]]) -> list[str]:
    out = ["## Noisy-greedy's joint scores against the two-server adder", ""]
    for path, d in files:
        command = "python " + " ".join([d["bench"], *d.get("argv", [])])
        out += [f"File: {link(path)}. The score module at the servers' plans: evaluation keys, "
                "key generation and seconds a score call (median over the calls after the "
                "first), every call decrypted and checked against its plaintext model; "
                f"{d.get('repeats')} repeats of {d.get('calls_per_repeat')} calls, peak "
                f"{fixed(d.get('peak_rss_mb'), 0)} MB.", "",
                *provenance(command=command, commit=d.get("commit"), started=d.get("started")),
                ""]
        rows = []
        for s in d["sessions"]:
            two, joint = s["summary"]["two-server"], s["summary"]["joint"]
            ratio = s["summary"]["ratio_joint_over_two_server"]
            rows.append([s["dataset"], str(s["epsilon"]),
                         f"{s['joint_uniforms']} x {s['joint_bits']}-bit",
                         f"{num(s['joint_score_variance'])} vs "
                         f"{num(s['two_server_score_variance'])}",
                         f"{joint['lookup_bits']} vs {two['lookup_bits']}",
                         f"{fixed(joint['evaluation_key_mb'])} vs "
                         f"{fixed(two['evaluation_key_mb'])}",
                         f"{fixed(joint['keygen_s'])} vs {fixed(two['keygen_s'])}",
                         f"{num(joint['call_s'], 2)} vs {num(two['call_s'], 2)} "
                         f"(x{ratio['call_s']:.2f})",
                         f"{num(joint['first_call_s'], 2)} vs {num(two['first_call_s'], 2)}"])
        out += table(["dataset", "eps", "joint shape", "score variance, joint vs two-server",
                      "lookup bits", "evaluation keys MB", "keygen s", "call s",
                      "first call s"], rows)
        out.append("")
    return out

def is_scale(d: dict) -> bool:
    return "bench_scale.py" in str(d.get("command", "")) and "points" in d


def minutes(seconds) -> str:
    return "-" if seconds is None else fixed(seconds / 60)


def render_scale(files: list[tuple[Path, dict]]) -> list[str]:
    out = ["## A session's cost by columns and rows", ""]
    for path, d in files:
        m = d.get("machine", {})
        cores = [str(n) for n in d["cores"]]
        out += [f"File: {link(path)}. The servers' default plan (noise auto) for C real "
                f"columns ({', '.join(d['columns_source'])}, in that order) and N rows, "
                f"{d['clients']} clients, eps {d['epsilon']}, delta {d['delta']}: what the "
                "plan alone gives, concrete's compile figures, and a projection to many cores "
                "from a sample measured on this machine (CPU seconds). The projection is a "
                f"model, not a measurement: {d['model']}. `model` puts every step on the "
                "cores; `today` keeps on one core the steps the code does not yet run on an "
                "executor. Rows the shipped parameter set refuses are planned at a what-if "
                "count width (`what-if-k<k>`, not shipped).", "",
                *provenance(command=d.get("command"), commit=d.get("commit"),
                            started=f"{d.get('date')} on {m.get('cpus')} CPUs, load "
                                    f"{m.get('load_average_at_start')}"), ""]
        if d.get("plot"):
            out += [f"![projected session time by columns]({'../' + d['plot']})", ""]
        budget = f"{fixed(d['budget_min'], 0)} min on {d['budget_cores']} cores"
        rows = []
        for case, fits in sorted(d["largest_within_budget"].items()):
            online = d["largest_within_budget_online"][case]
            for n, c in sorted(fits.items(), key=lambda kv: int(kv[0])):
                rows.append([case, num(int(n)), "-" if c is None else str(c),
                             "-" if online.get(n) is None else str(online[n])])
        out += [f"Most columns (the grid's and the search's below) whose default session "
                f"fits {budget}; `calibrated`: the model at Adult's measured bootstrap rate "
                "(below):", ""]
        out += table(["case", "rows", "whole session (keys, coins, uploads, online)",
                      "upload to release"], rows)
        for selection in ("noisy-greedy", "none"):
            points = [p for p in d["points"] if p["selection"] == selection]
            if not points:
                continue
            out += ["", f"Selection {selection}, minutes (model; `today` at "
                    f"{d['budget_cores']} cores in the last column). Bits a count: each "
                    "release's encrypted bits per count; a two-server release still runs "
                    "through the session's joint circuit, at its width (in brackets). CS "
                    "memory: the module's keys uncompressed plus one P1 chunk, an estimate:",
                    ""]
            body = []
            for p in sorted(points, key=lambda p: (p["rows"], p["columns"])):
                if not p["accepted"]:
                    body.append([str(p["columns"]), num(p["rows"]), p["parameter_set"],
                                 "refused", *["-"] * (6 + len(cores))])
                    continue
                sel = p.get("selection_figures") or {}
                boots = (sel.get("bootstraps") or {}).get("total", 0)
                shapes = " / ".join(str(r["bits_per_count"]) if r["noise"] == "joint"
                                    else f"two-server ({r['circuit_bits_per_count']})"
                                    for r in p["releases"])
                keys = p["bytes"].get("evaluation_keys_compressed_estimate")
                proj = p["projection"]
                body.append([str(p["columns"]), num(p["rows"]), p["parameter_set"],
                             num(p["pairs"]), num(p["two_way_cells"]), shapes, num(boots),
                             fixed(p["upload_bytes_per_client"] / 1e3, 0),
                             "-" if keys is None else fixed(keys / 1e6, 0),
                             fixed(p["memory"]["cs_worker_bytes"] / 1e9, 1),
                             *[minutes(proj[n]["model"]["session_s"]) for n in cores],
                             minutes(proj[str(d["budget_cores"])]["today"]["session_s"])])
            out += table(["columns", "rows", "parameter set", "pairs", "2-way cells",
                          "bits a count (1-way / 2-way)", "bootstraps",
                          "upload KB a client", "eval keys MB", "CS memory GB",
                          *[f"{n} cores" for n in cores], "today"], body)
        search = d.get("search_points") or []
        if search:
            n = str(d["budget_cores"])
            out += ["", f"Searched past the grid (to {d['search_resolution_columns']} columns; "
                    "columns past the 82 shipped ones are resampled from them), minutes on "
                    f"{n} cores:", ""]
            out += table(["columns", "rows", "parameter set", "pairs", "bootstraps", "model",
                          "calibrated", "today"],
                         [[str(p["columns"]), num(p["rows"]), p["parameter_set"],
                           num(p.get("pairs")),
                           num(((p.get("selection_figures") or {}).get("bootstraps") or {})
                               .get("total")),
                           *[minutes(p["projection"][n][case]["session_s"])
                             if p.get("projection") else "refused"
                             for case in ("model", "calibrated", "today")]]
                          for p in search])
        calibration = d.get("calibration")
        if calibration:
            out += ["", "`calibrated`: every bootstrap at the rate Adult's served session "
                    f"measured ({fixed(calibration['adult_measured_s_per_bootstrap'] * 1e3)} "
                    "ms a bootstrap a core, wall seconds x 2 cores: an upper bound on a shared "
                    "machine) instead of the sample's CPU seconds scaled to Adult's module "
                    f"({fixed(calibration['adult_model_s_per_bootstrap'] * 1e3)} ms): "
                    f"x{calibration['factor']:.2f}."]
        sample = d["sample"]
        mod = sample["module"]
        origin = d.get("sample_from")
        if origin:
            out += ["", f"The sample was measured by an earlier run: `{origin.get('command')}` "
                    f"(commit `{origin.get('commit')}`, {origin.get('date')})."]
        out += ["", "Measured sample (CPU seconds, least of the repeats; every run decrypted "
                "and checked):", ""]
        rows = [[f"P1 k = {p['count_bits']}, {p['cells']} cells x {p['columns']} bits",
                 num(p["plain_cs_s"], 3), num(p["joint_cs_s"], 3), num(p["ks_coins_s"], 3),
                 num(p["ks_encrypt_client_chunk_s"], 3), fixed(p["peak_rss_mb"], 0)]
                for p in sample["p1"]]
        out += table(["chunk", "plain P1 s", "joint P1 s", "KS coins s",
                      "KS encrypts a client's chunk s", "peak RSS MB"], rows)
        out += ["", f"Score module at k = {mod['shape']['count_bits']} (chunks "
                f"{mod['shape']['chunk_sizes']}, joint score {mod['shape']['joint']}): "
                f"keygen {fixed(mod['keygen_s'])} s, evaluation keys "
                f"{fixed(mod['evaluation_key_bytes'] / 1e6, 0)} MB, a P2 chunk of 8 cells "
                f"{num(mod['p2_chunk_8_s'], 3)} s ({fixed(mod['s_per_bootstrap_p2'] * 1e3)} ms "
                f"a bootstrap), an add {num(mod['add_s'], 3)} s, a score call "
                f"{num(mod['score_call_s'], 3)} s; peak {fixed(mod['peak_rss_mb'], 0)} MB.", ""]
        check = d.get("adult_check")
        if check:
            measured = check["measured"]
            rows = []
            for entry in check["model"]:
                session = f"adult-{entry['selection']}"
                release = measured.get(session, {}).get("two_way")
                model = entry["model_1_core_s"]
                if release:
                    rows.append([session, "2-way release, compute server",
                                 fixed(release["cs_online_s"], 0),
                                 fixed(model["2-way release"], 0),
                                 f"{release['chunks_touched']} chunks run vs "
                                 f"{entry['model_two_way_chunks']} (the model's worst "
                                 "case: every pair)"])
                    rows.append([session, "key server coins",
                                 fixed(release["offline_ks_bits_s"], 0),
                                 fixed(model["key server coins"], 0), ""])
                if entry.get("model_s_per_bootstrap"):
                    p2 = measured["p2_em_session"]
                    rows.append([session, "P2, seconds a bootstrap a core",
                                 num(p2["s_per_bootstrap_core"], 3),
                                 num(entry["model_s_per_bootstrap"], 3),
                                 f"{num(p2['p2_bootstraps'])} bootstraps"])
            out += ["Adult (15 columns, 32,561 rows) measured through the servers (kept "
                    "files, wall seconds on the shared 2-core machine, commit "
                    f"`{measured.get('joint_noise_commit')}` for the releases) beside the "
                    "model at one core:", ""]
            out += table(["session", "step", "measured s", "model s", "note"], rows)
        out.append("")
    return out


def is_plan_acceptance(d: dict) -> bool:
    return "points" in d and all("selection" in p and "accepted" in p for p in d["points"])


def render_plan_acceptance(files: list[tuple[Path, dict]]) -> list[str]:
    out = ["## Plans accepted at every budget", "",
           "Each selection's plan as `session create` builds it, accounted by the composed "
           "PLD of every noise it adds: the share of the eps asked it spends.", ""]
    for path, d in files:
        out += [f"`{rel(path)}`", ""]
        if d.get("covers"):
            out += [f"Covers: {d['covers']}", ""]
        rows = [[p["table"], p["selection"], num(p["eps"]),
                 ("yes" if p["accepted"] else "refused: " + p.get("refusal", "")),
                 num(p.get("spent")), num(p.get("encrypted_bits_per_count"))]
                for p in d["points"]]
        out += table(["table", "selection", "eps", "accepted", "eps spent / asked",
                      "encrypted bits per count"], rows)
        out += ["", *provenance(command=d.get("command"), commit=d.get("commit"),
                                started=f"{d.get('date')} on {d.get('machine')}"), ""]
    return out


def render_other(files: list[tuple[Path, dict]]) -> list[str]:
    out = ["## Other result files", "",
           "Files of no kind this page knows; their top-level numbers and strings:", ""]
    for path, d in files:
        out += [f"### `{rel(path)}`", ""]
        rows = [[f"`{k}`", f"`{v}`" if isinstance(v, str) else num(v)]
                for k, v in sorted(d.items()) if not isinstance(v, (dict, list))]
        out += table(["key", "value"], rows) if rows else ["(no top-level scalars)"]
        notes = script_notes(str(d.get("command", "")))
        out += ["", f"Scripts: {notes}."] if notes else []
        out.append("")
    return out


def file_table(heading: str, d: dict, header: list[str], rows: list[list[str]],
               started: str | None) -> list[str]:
    """One file's block: its heading, what it covers (if it says), its table and its
    provenance."""
    out = [heading, ""]
    if d.get("covers"):
        out += [f"Covers: {d['covers']}", ""]
    out += table(header, rows)
    return out + ["", *provenance(command=d.get("command"), commit=d.get("commit"),
                                  started=started), ""]


def is_synthesis_paired(d: dict) -> bool:
    return "bench_synthesis_paired.py" in str(d.get("command", ""))


def render_synthesis_paired(files: list[tuple[Path, dict]]) -> list[str]:
    out = ["## Estimators on the same release", "",
           "Each repeat draws one `feddpsyn-default` release and every estimator synthesizes "
           "it with the same seed: mean +- sd of the 2-way L1 over the repeats, the mean "
           "paired difference from the first estimator (relative to its mean) with its "
           "standard error, and for Private-PGM the 2-way L1 of its fitted model's own "
           "marginals before any record is sampled.", ""]
    for path, d in files:
        rows = [[r["table"], num(r["eps"]), f"`{r['method']}`", pm(r["mean"], r["sd"]),
                 f"{r['paired_vs_first']:+.1%} (se {r['paired_se']:.1%})",
                 num(r.get("model_mean"), 3) if "model_mean" in r else "-", f"{r['repeats']}",
                 fixed(r["seconds_mean"])]
                for r in d["results"]]
        out += file_table(f"### `{rel(path)}`", d,
                          ["table", "eps", "estimator", "2-way L1", "paired vs first",
                           "model before sampling", "repeats", "seconds"], rows, d.get("date"))
    return out


def is_joint_chunk_memory(d: dict) -> bool:
    return "bench_joint_chunk_memory.py" in str(d.get("command", ""))


def render_joint_chunk_memory(files: list[tuple[Path, dict]]) -> list[str]:
    out = ["## A joint-release call's memory", "",
           "Peak resident memory (`VmHWM`) of a process running the `default` set's "
           "joint-release calls, one at a time and two at once on threads (as the compute "
           "server's in-process executor on 2 cores): before the calls (keys and inputs) "
           "and after.", ""]
    for path, d in files:
        rows = [[f"{c['columns']}", f"{c['cells']}", f"{c['bits_per_call']:,}",
                 f"{c['concurrent']}", f"{c['hwm_before_calls_mb']:.0f}",
                 f"{c['hwm_after_calls_mb']:.0f}", f"{c['per_call_mb']:.0f}"]
                for c in d["cases"]]
        out += file_table(f"`{rel(path)}`", d,
                          ["bits a cell", "cells a call", "bits a call", "calls at once",
                           "MB before the calls", "peak MB", "MB a call"], rows,
                          f"{d.get('date')} on {d.get('machine')}")
    return out


def is_admission(d: dict) -> bool:
    return "bench_load.py --admission" in str(d.get("command", ""))


def render_admission(files: list[tuple[Path, dict]]) -> list[str]:
    out = ["## A fresh key server's answer to each request", "",
           "One `POST /sessions` after another to a key server process just started "
           "(`feddpsyn.loadtest.run_admission`): seconds to its answer (202: accepted, the "
           "plan and circuits built by its job; 409: refused by a limit, the reason given), "
           "`/health`'s latency right after, the server's peak resident memory after it. "
           "The promise (docs/deployment.md): every request answered within 2 s, a request "
           "past a limit refused at once.", ""]
    for path, d in files:
        rows = [[r["request"], f"{r['bytes']:,}", str(r["status"]), f"{r['seconds']:.2f}",
                 f"{r['health_seconds']:.2f}", f"{r['peak_mb_after']:.0f}"]
                for r in d["requests"]]
        out += file_table(f"`{rel(path)}`", d, ["request", "bytes", "status", "seconds",
                                                "/health s", "peak MB"], rows,
                          f"{d.get('date')} on {d.get('machine')} ({d.get('cores')} cores, "
                          f"load {d.get('load_before')} before)")
    return out


def is_distaim_mpc(d: dict) -> bool:
    return "bench_distaim.py" in str(d.get("command", "")) and "parties" in d


def render_distaim_mpc(files: list[tuple[Path, dict]]) -> list[str]:
    out = ["## DistAIM in three MPyC processes", "",
           "`bench/distaim/bench_distaim.py`: three `feddpsyn distaim serve` processes on "
           "loopback, the owners' shares uploaded over HTTP, then the servers' MPyC parties "
           "run the admission, the uploads' range checks (validation) and AIM's rounds. Per "
           "party: wall and CPU seconds of each phase, bytes sent, peak resident memory.", ""]
    for path, d in files:
        rows = []
        for name, party in sorted(d["parties"].items()):
            rows.append([name] + [f"{party['phases_s'][ph]:.0f} ({party['phases_cpu_s'][ph]:.0f})"
                                  for ph in ("validation", "aim")]
                        + [f"{party['bytes_sent_total'] / 1e9:.2f}",
                           f"{party['peak_rss_mb']['mpc_party']:.0f}"])
        m = d["machine"]
        out += file_table(f"`{rel(path)}`", d, ["party", "validation s (CPU)", "AIM s (CPU)",
                                                "GB sent", "peak MB"], rows,
                          f"{d['date']} on {m['host']} ({m['cores']} cores, {m['cpu_model']}, "
                          f"load {m['load_before']} before)")
    return out


KINDS = [  # (test, renderer), in the page's order; the first test that matches wins
    (is_served_vs_central, render_served_vs_central),
    (is_online, render_online),
    (is_demo_ratio, render_demo_ratio),
    (is_joint_noise, render_joint_noise),
    (is_joint_scores, render_joint_scores),
    (is_flaim, render_flaim),
    (is_client_stream, render_client_stream),
    (is_scale, render_scale),
    (is_plan_acceptance, render_plan_acceptance),
    (is_demo_time, render_demo_time),
    (is_joint_chunk_memory, render_joint_chunk_memory),
    (is_synthesis_paired, render_synthesis_paired),
    (is_admission, render_admission),
    (is_distaim_mpc, render_distaim_mpc),
]


# ----------------------------------------------------------------------------- utility runs

def nearest(name: str, folder: Path, top: Path) -> Path | None:
    """The file `name` in `folder` or the closest folder above it, up to `top`."""
    for candidate in [folder, *folder.parents]:
        if (candidate / name).is_file():
            return candidate / name
        if candidate == top:
            break
    return None


def eps_key(value: str) -> float:
    return float(value)


def render_utility(csv_path: Path, top: Path) -> list[str]:
    """One utility run's table; its README is the nearest one up to `top`."""
    folder = csv_path.parent
    with csv_path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    cells: dict[tuple, dict[str, dict[str, list[float]]]] = {}
    for row in rows:
        setting = (row["partition"], row.get("beta", ""), int(row["clients"]))
        cells.setdefault(setting, {}).setdefault(row["method"], {}).setdefault(
            row["eps"], []).append(float(row["two_way"]))
    out = [f"### `{rel(folder)}`", ""]
    readme, summary = nearest("README.md", folder, top), folder / "summary.md"
    source = [f"Data: {link(csv_path)}"]
    if summary.is_file():
        source.append(f"every metric: {link(summary)}")
    if readme:
        source.append(f"command and context: {link(readme)}")
    plots = sorted(folder.glob("*.png"))
    if plots:
        source.append("plots: " + ", ".join(f"[{p.name}](../{rel(p)})" for p in plots))
    out += ["; ".join(source) + ".  ",
            "Command: `feddpsyn bench utility ...` (`fedbench/runner.py`); the exact command "
            "is not in the CSV" + (", see the README above." if readme else "."), ""]
    for setting in sorted(cells):
        partition, beta, clients = setting
        methods = cells[setting]
        epsilons = sorted({e for m in methods.values() for e in m}, key=eps_key)
        label = f"{partition}{' ' + beta if beta else ''}, {clients} clients"
        out += [f"Mean 2-way L1 error ± sd (repeats), {label}:", ""]
        body = []
        for method in sorted(methods):
            row = [method]
            for e in epsilons:
                values = methods[method].get(e)
                if not values:
                    row.append("-")
                    continue
                sd = statistics.pstdev(values) if len(values) > 1 else None
                row.append(f"{pm(statistics.fmean(values), sd, 4)} ({len(values)})")
            body.append(row)
        out += table(["method", *(f"eps {e}" for e in epsilons)], body)
        out.append("")
    return out


# ----------------------------------------------------------------------------- today's default

CENTRAL = {"central-privsyn-pgm": "PrivSyn+PGM", "central-aim": "AIM",
           "central-privsyn-all": "PrivSyn, every pair"}


def exponent(x: float) -> str:
    """1e-05 as 1e-5."""
    mantissa, power = f"{x:.0e}".split("e")
    return f"{mantissa}e{int(power)}"


def short_commit(d: dict) -> str:
    return str(d.get("commit") or "not recorded").split()[0]


def accuracy_summary(path: Path, d: dict, more: list[tuple[Path, dict]]) -> list[str]:
    """feddpsyn-default over the best central method, per table and eps, from one
    served-vs-central summary; then the cells that files of more repeats settle."""
    entries = d["results"]
    default = {(e["table"], e["eps"]): e for e in entries if e["method"] == "feddpsyn-default"}
    best: dict[tuple, dict] = {}
    for e in entries:
        key = (e["table"], e["eps"])
        if e["method"] in CENTRAL and (key not in best or e["mean"] < best[key]["mean"]):
            best[key] = e
    tables = sorted({t for t, _ in default})
    budgets = sorted({b for _, b in default})
    ratios = [e["ratio_to_best_central"] for e in default.values()]
    repeats = "/".join(str(r) for r in sorted({e["repeats"] for e in default.values()}))
    out = [f"**Accuracy against a trusted curator** ({link(path)}, commit "
           f"`{short_commit(d)}`, {d.get('date')}): the 2-way L1 error of `feddpsyn-default` "
           "over the best central method's (central PrivSyn + Private-PGM, central AIM or "
           "central PrivSyn on every pair, each on the union at the same eps and delta "
           f"{exponent(d.get('delta'))}), {repeats} repeats on the same splits and seeds, 4 "
           f"uniform owners: **{min(ratios):.2f}-{max(ratios):.2f}** on the {len(tables)} "
           "shipped tables (below 1: more accurate than the curator). In brackets: the "
           "default's error and the best central method's.", ""]
    rows = []
    for t in tables:
        row = [t]
        for b in budgets:
            e, c = default.get((t, b)), best.get((t, b))
            row.append("-" if e is None or c is None else
                       f"**{e['ratio_to_best_central']:.2f}** ({e['mean']:.3f} vs "
                       f"{CENTRAL[c['method']]} {c['mean']:.3f})")
        rows.append(row)
    out += table(["table", *(f"eps {num(b)}" for b in budgets)], rows)
    for more_path, m in more:
        for e in m["results"]:
            if e["method"] == "feddpsyn-default":
                out += ["", f"With more repeats: {e['table']} at eps {num(e['eps'])}, "
                        f"{e['repeats']} repeats of each, **{e['ratio_to_best_central']:.2f}** "
                        f"({link(more_path)}, commit `{short_commit(m)}`)."]
    return out


def demo_label(d: dict) -> str:
    command = " ".join(["feddpsyn demo", *d.get("demo_args", [])])
    return (f"`{command}` ({d['dataset']}, {d['selection']}, eps {num(d['epsilon'])}, "
            f"{d['cores']} cores)")


def demo_minutes(d: dict) -> str:
    """The wall minutes, and with --offline-first the offline wait and the rest."""
    phases = d["phases"]
    text = f"{d['wall_seconds'] / 60:.1f}"
    if "offline_wait" in phases:
        online = phases.get("client_uploads", 0) + phases.get("encrypt_aggregate_release", 0)
        text += f" (offline {phases['offline_wait'] / 60:.1f}, uploads to release " \
                f"{online / 60:.1f})"
    return text


def time_summary(runs: list[list[tuple[Path, dict]]],
                 same_code: list[tuple[Path, dict]]) -> list[str]:
    """One row per group of runs of the same command, code and day, each time with the
    machine's lookup rate measured just before it (or 'not measured')."""
    (first_path, first), (second_path, second) = same_code
    out = ["**Time** end to end as a user runs it (`bench/scale/bench_demo_time.py`), each "
           "beside one core's milliseconds per 3-bit lookup measured just before it "
           "(`bench/scale/lookup_rate.py`): time figures move between days on these machines "
           f"(the same code, commit `{short_commit(first)}`, took "
           f"[{first['wall_seconds'] / 60:.1f}](../{rel(first_path)}) minutes on "
           f"{first['date']} and [{second['wall_seconds'] / 60:.1f}](../{rel(second_path)}) "
           f"on {second['date']}: x{second['wall_seconds'] / first['wall_seconds']:.2f}), "
           "so read a time beside its rate.", ""]
    rows = []
    for group in runs:
        d = group[0][1]
        rates = [(g.get("lookup_rate") or {}).get("ms_per_lookup") for _, g in group]
        rows.append([demo_label(d), ", ".join(demo_minutes(g) for _, g in group),
                     ", ".join("not measured" if r is None else f"{r:.1f}" for r in rates),
                     ", ".join(f"{g['load_before'][0]:.2f}" for _, g in group),
                     f"`{short_commit(d)}`, {d['date']}",
                     ", ".join(f"[{i}](../{rel(p)})" for i, (p, _) in enumerate(group, 1))])
    return out + table(["run", "minutes", "ms a lookup", "load before", "commit, date",
                        "files"], rows)


def distaim_summary(files: list[tuple[Path, dict]]) -> list[str]:
    """DistAIM's error over central AIM's in FLAIM's setting, by schedule, beside FLAIM's."""
    s = files[0][1]["setting"]

    def ratios(keep) -> str:
        chosen = [(p, d) for p, d in files if keep(d["setting"])]
        values = [d["ratio"] for _, d in chosen]
        each = ", ".join(f"[{d['ratio']:.2f}](../{rel(p)}) at {d['bins']} bins"
                         + (" in MPC" if d["oracle"] == "mpc" else "") for p, d in chosen)
        if len(values) < 2:
            return each
        return f"**{min(values):.2f}-{max(values):.2f}** ({each})"

    published = files[0][1]["flaim_table_1"]
    return [f"**DistAIM against FLAIM** ({s['dataset'].split()[0].capitalize()}, "
            f"{s['clients']} clients, {s['workload'].split(',')[0]}, participation "
            f"{num(s['participation'])}, T = {s['rounds']}, eps {num(s['epsilon'])}, FLAIM's "
            "error metric): DistAIM's error over central AIM's at the same T and rho, with the "
            "default (deferred) schedule "
            + ratios(lambda st: st["schedule"] == "deferred" and not st["enrolment_one_ways"])
            + f"; FLAIM's Table 1 publishes **{published['ratio']}** for its DistAIM. FLAIM's "
            "interleaved schedule run here: "
            + ratios(lambda st: st["schedule"] == "interleaved")
            + "; with enrolment 1-ways: "
            + ratios(lambda st: st["enrolment_one_ways"]) + "."]


def distaim_mpc_line(path: Path, d: dict) -> str:
    """DistAIM's time in three MPyC processes on Adult, beside the published MPC AIM."""
    s, parties = d["setting"], d["parties"]
    party = parties[min(parties)]
    validation = party["phases_s"]["validation"]
    peak = max(p["peak_rss_mb"]["mpc_party"] for p in parties.values())
    return (f"In real three-party MPC ({link(path)}, {d['date'][:10]}): three `feddpsyn "
            f"distaim serve` processes on one {d['machine']['cores']}-core machine, "
            f"{s['clients']} clients, T = {s['rounds']}, eps {num(s['epsilon'])}, every "
            f"pair of {len(s['domain_sizes'])} attributes: **{d['wall_s']['mpc_run'] / 60:.1f} "
            f"min** of MPC ({validation / d['wall_s']['mpc_run']:.0%} of it the uploads' "
            f"range checks), {d['bytes_between_parties'] / 1e9:.1f} GB between the parties, "
            f"at most {peak:.0f} MB a party; Fu et al. "
            f"2026 publish {d['fu_et_al_2026_minutes']} min for MPC AIM on Adult over a WAN.")


def privacy_summary(path: Path, d: dict) -> list[str]:
    """The share of the eps asked that the default selection's plans spend."""
    points = d["points"]
    default = [p for p in points if p["selection"] == "noisy-greedy" and p["accepted"]]
    spent = [p["spent"] for p in default]
    tables = ", ".join(dict.fromkeys(p["table"] for p in default))
    budgets = ", ".join(num(e) for e in sorted({p["eps"] for p in default}))
    accepted = sum(p["accepted"] for p in points)
    return [f"**Privacy spent** ({link(path)}, commit `{short_commit(d)}`, {d.get('date')}): "
            f"the default's plans (noisy-greedy) on {tables} at eps {budgets} spend "
            f"**{min(spent):.3f}-{max(spent):.3f}** of the eps asked, accounted over every "
            "noise they add by the composed privacy-loss distribution (the mechanisms their "
            "privacy record lists, `params.privacy_record.accounted_epsilon`); "
            + (f"every one of the {len(points)} plans" if accepted == len(points) else
               f"{accepted} of the {len(points)} plans")
            + " (each selection at each eps) is accepted."]


def summary(files: dict[str, tuple[Path, dict]]) -> list[str]:
    """Today's default in numbers: the first screen of docs/results.md."""
    def get(key: str) -> list[tuple[Path, dict]]:
        return [files[name] for name in HEADLINE[key]]

    (acc_path, acc), = get("accuracy")
    out = accuracy_summary(acc_path, acc, get("accuracy_repeats")) + [""]
    groups: dict[tuple, list[tuple[Path, dict]]] = {}
    for path, d in get("demo") + get("adult"):
        key = (tuple(d.get("demo_args", [])), short_commit(d), d["date"])
        groups.setdefault(key, []).append((path, d))
    out += time_summary(list(groups.values()), [files[n] for n in SAME_CODE_TWO_DAYS]) + [""]
    out += distaim_summary(get("distaim")) + [""]
    (mpc_path, mpc), = get("distaim_mpc")
    out += [distaim_mpc_line(mpc_path, mpc), ""]
    (privacy_path, privacy), = get("privacy")
    return out + privacy_summary(privacy_path, privacy)


def readme_figures() -> dict[str, str]:
    """The README's two headline lines' figures, as the summary reads them from HEADLINE's
    files (tests/project/test_docs.py checks the README states them)."""
    def read(name: str) -> dict:
        return json.loads((RESULTS / name).read_text())

    def spread(values: list[float], places: int) -> str:
        low, high = f"{min(values):.{places}f}", f"{max(values):.{places}f}"
        return low if low == high else f"{low}-{high}"

    accuracy = read(HEADLINE["accuracy"][0])["results"]
    demo = [read(name) for name in HEADLINE["demo"]]
    adult = read(HEADLINE["adult"][0])
    return {"accuracy": spread([e["ratio_to_best_central"] for e in accuracy
                                if e["method"] == "feddpsyn-default"], 2),
            "demo minutes": spread([d["wall_seconds"] / 60 for d in demo], 1),
            "demo ms a lookup": spread([d["lookup_rate"]["ms_per_lookup"] for d in demo], 1),
            "adult minutes": f"{adult['wall_seconds'] / 60:.1f}"}


# ----------------------------------------------------------------------------- the pages

def kept(folder: Path) -> tuple[list[tuple[Path, dict]], list[Path]]:
    """The JSON files and the utility runs' results.csv under ``folder``, in path order."""
    jsons = [(path, json.loads(path.read_text())) for path in sorted(folder.rglob("*.json"))]
    runs = sorted(folder.rglob("results.csv"),
                  key=lambda p: p.parent.relative_to(folder).parts)
    return jsons, runs


def current_rank(path: Path) -> int | None:
    """The position in CURRENT of the entry that names this file of bench/results."""
    name = path.relative_to(RESULTS).as_posix()
    for i, entry in enumerate(CURRENT):
        if fnmatch.fnmatch(name, entry) or name.startswith(entry + "/"):
            return i
    return None


def sections(files: list[tuple[Path, dict]]) -> list[list[str]]:
    """One section a kind of file, in KINDS' order; a kind's files in the order given."""
    groups: dict[int, list[tuple[Path, dict]]] = {}
    for path, d in files:
        kind = next((i for i, (test, _) in enumerate(KINDS) if test(d)), len(KINDS))
        groups.setdefault(kind, []).append((path, d))
    return [(KINDS[kind][1] if kind < len(KINDS) else render_other)(groups[kind])
            for kind in sorted(groups)]


def demote(lines: list[str], levels: int) -> list[str]:
    """The same lines with every heading ``levels`` deeper."""
    return ["#" * levels + line if line.startswith("#") else line for line in lines]


def title(section: list[str]) -> str:
    return section[0].lstrip("#").strip()


def contents(titles: list[str], indent: str = "") -> list[str]:
    return [f"{indent}* [{t}](#{anchor(t)})" for t in titles]


UTILITY_INTRO = ("Each folder is one run of the utility benchmark: every method on the same "
                 "partitions and seeds (noise from the OS, never seeded). The error is the mean "
                 "L1 over all 2-way marginals of the synthetic table against the training union, "
                 "mean ± population sd over repeats (the repeat count in brackets).")
GENERATED = ("<!-- Generated by bench/results_page.py from bench/results and experiments/; "
             "do not edit by hand. -->")


def render() -> str:
    """docs/results.md: today's default in numbers, then every current result."""
    jsons, runs = kept(RESULTS)
    ranked = sorted((current_rank(path), path, d) for path, d in jsons
                    if current_rank(path) is not None)
    current = [(path, d) for _, path, d in ranked]
    current_runs = sorted((run for run in runs if current_rank(run) is not None),
                          key=lambda run: (current_rank(run), run))
    found = {path.relative_to(RESULTS).as_posix(): (path, d) for path, d in jsons}
    body = sections(current)
    out = ["# Results", "", GENERATED, "",
           "Today's default (`feddpsyn-default`: noisy-greedy selection, joint noises, "
           "Private-PGM) in numbers, each figure linked to the file it is read from; below "
           "them every current result. Earlier runs, what-ifs and the design studies' "
           "results: [results-archive.md](results-archive.md). What each script measures: "
           "[benchmarks.md](benchmarks.md).", "",
           "## Today's default in numbers", "", *summary(found), "",
           "Regenerate this page and the archive with "
           f"`{REGENERATE}` (`--check`: are they current). Figures from runs never kept as "
           "files: [measurements-history.md](measurements-history.md).", "",
           "## Contents", "",
           *contents([title(s) for s in body] + [UTILITY_TITLE]), ""]
    for section in body:
        out += section
    out += [f"## {UTILITY_TITLE}", "", UTILITY_INTRO, ""]
    for run in current_runs:
        out += render_utility(run, RESULTS)
    return finish(out)


def studies() -> list[Path]:
    """The design studies: experiments/'s folders."""
    if not EXPERIMENTS.is_dir():
        return []
    return sorted(p for p in EXPERIMENTS.iterdir()
                  if p.is_dir() and not p.name.startswith((".", "_")))


def study_title(folder: Path) -> str:
    readme = folder / "README.md"
    lines = readme.read_text().splitlines() if readme.is_file() else []
    first = next((line[2:].strip() for line in lines if line.startswith("# ")), folder.name)
    return f"`{rel(folder)}/`: {first}"


def render_archive() -> str:
    """docs/results-archive.md: the earlier runs of bench/results, then each study's."""
    jsons, runs = kept(RESULTS)
    earlier = sections([(path, d) for path, d in jsons if current_rank(path) is None])
    earlier_runs = [run for run in runs if current_rank(run) is None]
    folders = studies()
    utility = "Utility runs of earlier code (`feddpsyn bench utility`)"
    out = ["# Results archive", "", GENERATED, "",
           "What no longer describes today's default, kept with its provenance: the earlier "
           "runs of the benchmarks in `bench/results` (runs of earlier code, and the per-method "
           "runs today's summaries are made from), then the results of the one-off design "
           "studies in `experiments/`, each beside the decision it informed. Today's "
           "figures: [results.md](results.md).", "",
           "## Contents", "",
           "* [Earlier runs of the benchmarks](#earlier-runs-of-the-benchmarks)",
           *contents([title(s) for s in earlier] + [utility], "  "),
           "* [Design studies in `experiments/`](#design-studies-in-experiments)",
           *contents([study_title(f) for f in folders], "  "), "",
           "## Earlier runs of the benchmarks", "",
           "Every file of `bench/results` that [results.md](results.md) does not show "
           "(`bench/results_page.py`'s `CURRENT` names the ones it shows).", ""]
    for section in earlier:
        out += demote(section, 1)
    out += [f"### {utility}", "", UTILITY_INTRO, ""]
    for run in earlier_runs:
        out += demote(render_utility(run, RESULTS), 1)
    out += ["## Design studies in `experiments/`", "",
            "One folder a study or decision: its scripts, its results and a README saying "
            "which decision it informed, what it found and the command that reproduces it.", ""]
    for folder in folders:
        files, folder_runs = kept(folder)
        scripts_here = [f"`{rel(p)}`" for p in sorted(folder.rglob("*.py"))]
        out += [f"### {study_title(folder)}", "",
                f"[README](../{rel(folder)}/README.md). Scripts: "
                + (", ".join(scripts_here) or "none of its own (see the README)") + "."
                + ("" if files or folder_runs else
                   " No result files: the README states what it found."), ""]
        for section in sections(files):
            out += demote(section, 2)
        for run in folder_runs:
            out += demote(render_utility(run, folder), 2)
    return finish(out)


def finish(lines: list[str]) -> str:
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def pages() -> dict[Path, str]:
    return {PAGE: render(), ARCHIVE: render_archive()}


def anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a page differs from what would be generated")
    args = parser.parse_args(argv)
    stale = []
    for page, text in pages().items():
        if args.check:
            if (page.read_text() if page.is_file() else "") != text:
                stale.append(rel(page))
            continue
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(text)
        print(f"wrote {rel(page)} ({text.count(chr(10))} lines)")
    if args.check:
        if stale:
            print(f"{', '.join(stale)} out of date: run {REGENERATE}", file=sys.stderr)
            return 1
        print(f"{rel(PAGE)} and {rel(ARCHIVE)} are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
