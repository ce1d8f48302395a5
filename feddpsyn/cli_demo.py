"""``feddpsyn demo``: the whole protocol on loopback, on a bundled data set or the user's
table, and its printed report."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from feddpsyn.terminal import fail


def demo(dataset: Optional[str] = typer.Option(
             None, help="fed_heart_disease (default) | adult; or give your own table with "
                        "--csv and --schema"),
         csv_path: Optional[Path] = typer.Option(
             None, "--csv", help="your own table (with --schema): split over --clients owners "
                                 "uniformly at random, or by --owner-column"),
         schema: Optional[Path] = typer.Option(None, help="the schema of --csv (see "
                                                          "`feddpsyn schema draft`)"),
         owner_column: Optional[str] = typer.Option(
             None, help="with --csv: the column naming each row's owner (a natural split; "
                        "left out of the uploads if the schema does not declare it)"),
         clients: Optional[int] = typer.Option(
             None, help="owners of a uniform split (default 4; fed_heart_disease uses its 4 "
                        "hospitals)"),
         out: Optional[Path] = typer.Option(
             None, help="output directory (default: a new demo-out/run-DATE-TIME)"),
         epsilon: float = 1.0,
         delta: float = 1e-5,
         method: str = typer.Option("auto", help="synthesis: auto (gum when every pair is "
                                     "released, else pgm) | gum | pgm"),
         rows: Optional[int] = None,
         seed: int = 0,
         path: str = typer.Option("tfhe", help="tfhe (two servers) | distaim (three MPyC "
                                               "servers)"),
         selection: Optional[str] = typer.Option(
             None, help="tfhe path: noisy-greedy (PrivSyn's noisy scores + greedy, P2's "
                        "cost only; the default on fed_heart_disease: 5.5-8 min on 2 cores) "
                        "| em (private selection under encryption, FedDPSyn's P2 and P3; "
                        "about 13 min on fed_heart_disease) | none (every pair, no encrypted "
                        "selection: the default on adult and on your own table; about 5 min "
                        "on adult on 2 cores, mostly the joint noise). An estimate is "
                        "printed first."),
         rounds: Optional[int] = typer.Option(
             None, help="tfhe path, em: pairs to select (default: 4 on fed_heart_disease, "
                        "half the pairs otherwise)"),
         workers: Optional[int] = typer.Option(
             None, help="tfhe path: the compute server's local worker processes for the "
                        "encrypted selection (0: threads in its process, the default)"),
         noise: str = typer.Option(
             "auto", help="tfhe path: auto (one joint noise neither server knows on every "
                          "release that fits, the default) | joint | two-server (each "
                          "server its own Gaussian)"),
         offline_first: bool = typer.Option(
             False, "--offline-first",
             help="tfhe path: wait for the key server's offline job (the joint noise's "
                  "encrypted bits, made before any data) before the owners upload, as a "
                  "session created ahead of its uploads would; the report then times the "
                  "uploads to the release on their own"),
         absent: int = typer.Option(
             0, min=0, help="tfhe path: this many owners (the last ones) never upload; the "
                            "session runs on the others' tables, its uploads closed without "
                            "the absent ones (see --close-by)"),
         close_by: str = typer.Option(
             "close", help="with --absent: close (the operator's `session close`) | deadline "
                           "(the session's upload deadline, with the present owners as its "
                           "quorum)")) -> None:
    """Run the whole protocol on a bundled data set or your own table, all on loopback."""
    from feddpsyn.demo import user_table
    from feddpsyn.params.modes import NoiseMode, SelectionMode

    if (csv_path is None) != (schema is None):
        fail("--csv and --schema go together")
    if csv_path is not None and dataset is not None:
        fail("give either --dataset or --csv/--schema, not both")
    if owner_column is not None and csv_path is None:
        fail("--owner-column splits your own table: give --csv and --schema too")
    if noise not in tuple(NoiseMode):
        fail(f"--noise is auto, joint or two-server, not {noise!r}")
    if owner_column is not None and clients is not None:
        fail("--owner-column decides the owners; leave out --clients")
    if clients is not None and clients < 1:
        fail("--clients must be at least 1")
    table = None
    if csv_path is not None:
        if path != "tfhe":
            fail("--csv runs on the two-server path (--path tfhe); the DistAIM demo takes "
                  "the bundled data sets")
        try:
            table = user_table(csv_path, schema, owner_column)
        except ValueError as exc:  # SchemaError and InvalidValueError name file and place
            fail(str(exc))
    dataset = dataset or "fed_heart_disease"
    clients = clients or 4
    if out is None:
        out = Path("demo-out") / time.strftime("run-%Y%m%d-%H%M%S")
    if out.exists() and any(out.iterdir()):
        fail(f"{out} exists and is not empty; choose another --out")
    if path == "distaim":
        from feddpsyn.distaim_demo import run_distaim_demo

        report = run_distaim_demo(out, dataset, clients, epsilon, delta, seed=seed, rows=rows)
    elif path == "tfhe":
        from feddpsyn.demo import DEMO_ROUNDS, DEMO_SELECTION, run_demo

        key = dataset if table is None else None
        if selection is None:
            selection = DEMO_SELECTION.get(key, "none")
        if rounds is None and selection == SelectionMode.EM:
            rounds = DEMO_ROUNDS.get(key)
        try:
            report = run_demo(table or dataset, clients, out, epsilon, delta, method, rows,
                              seed, selection=selection, rounds=rounds, workers=workers,
                              noise=noise, offline_first=offline_first, absent=absent,
                              close_by=close_by)
        except ValueError as exc:
            fail(str(exc))
    else:
        fail(f"--path is tfhe or distaim, not {path!r}")
    _print_report(report, out)


def _pairs_text(pairs: list[list[str]]) -> str:
    """One pair a line, "a × b": column names stay whole however narrow the terminal."""
    return "\n".join(f"  {' × '.join(p)}" for p in pairs)


def _print_report(report: dict, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from feddpsyn.params.modes import NoiseMode, SelectionMode

    console = Console()
    table = Table(title=f"feddpsyn demo: {report['dataset']}, {report['clients']} owners, "
                        f"eps={report['epsilon_budget']}")
    table.add_column("average L1 error")
    table.add_column("federated (2 servers)", justify="right")
    table.add_column("centralized, same budget", justify="right")
    for k in ("one_way", "two_way", "three_way"):
        table.add_row(k, f"{report['workload_error'][k]:.4f}",
                      f"{report['central_workload_error'][k]:.4f}")
    console.print(table)

    def say(text: str) -> None:
        # Plain text: a column or path name with "[...]" is not rich markup.
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    if report.get("selected_pairs") and report["selection"]["mode"] == SelectionMode.NOISY_GREEDY:
        sel = report["selection"]
        noise = sel["score_noise"]
        how = (f"one joint noise of {noise['uniforms']} uniforms of {noise['bits']} bits"
               if noise["kind"] == NoiseMode.JOINT else "two servers' Gaussians")
        say(f"selected pairs (noisy-greedy, rho {sel['rho_charged']:.5g}, scores with {how}, "
            f"variance {noise['per_score_variance']:.4g}):\n"
            + _pairs_text(report["selected_pairs"]))
    elif report.get("selected_pairs"):
        sel = report["selection"]
        say(f"selected pairs ({sel['mode']}, {sel['rounds']} rounds, eps "
            f"{sel['epsilon_per_round_charged']:.5f} per round incl. "
            f"{sel['numerical_extra_epsilon_per_round']:.2g} numerical):\n"
            + _pairs_text(report["selected_pairs"]))
    noise = report.get("noise") or {}
    if "per_count_variance" in noise:
        kinds = {"joint": "one joint noise neither server knows",
                 "two-server": "each server's own Gaussian", "mixed": "per release"}
        say(f"noise: {kinds.get(noise['kind'], noise['kind'])}; variance per count "
            + ", ".join(f"{k} {v:.4g}" for k, v in noise["per_count_variance"].items()))
    say(f"epsilon spent {report['epsilon_spent']:.4f} (delta {report['delta']})")
    say("phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in report["phases"].items()))
    online = (report.get("core_seconds") or {}).get("phases", {}).get(
        "encrypt_aggregate_release")
    if online:
        steps = report["core_seconds"].get("compute_server_steps", [])
        say(f"core-seconds of encrypt_aggregate_release ({report['core_seconds']['cores']} "
            f"cores x {online['wall_s']:.0f} s): key server {online['keyserver']:.0f}, "
            f"compute server {online['computeserver']:.0f}"
            + "".join(f" ({s['step']} {s['cpu_seconds']:.0f}"
                      + (f", {s['cpu_ms_per_bootstrap']:.1f} ms a bootstrap"
                         if "cpu_ms_per_bootstrap" in s else "") + ")" for s in steps)
            + f", idle {online['idle']:.0f}")
    say(f"wrote {out / 'synthetic.csv'} and {out / 'report.json'}")
