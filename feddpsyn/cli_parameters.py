"""``feddpsyn params`` and ``feddpsyn numerics``: what a parameter set costs a session,
and TFHE-EXP's extra privacy loss (for auditors choosing parameters)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import typer

from feddpsyn.terminal import fail


def params_command(schema: Optional[Path] = typer.Option(
                       None, help="schema file (default: the bundled Fed-Heart-Disease)"),
                   max_rows: int | None = typer.Option(
                       None, min=1, help="a public upper bound on the rows of the owners' "
                                         "tables together (required with --schema; "
                                         "default: the bundled table's 740 rows)"),
                   epsilon: float = 1.0, delta: float = 1e-5,
                   selection: str = typer.Option(
                       "noisy-greedy",
                       help="noisy-greedy (the default, as a session's) | em | none"),
                   rounds: Optional[int] = typer.Option(
                       None, help="em rounds (default: half the pairs)"),
                   noise: str = typer.Option("auto", help="auto | joint | two-server"),
                   as_json: bool = typer.Option(False, "--json")) -> None:
    """The named selection parameter sets and what each costs for one session: the widths
    derived from the budget, epsilon per round with its numerical part, rho, fhe_delta."""
    from feddpsyn.params.modes import SelectionMode
    from feddpsyn.params.parameter_sets import DEFAULT_SELECTION_SET, SELECTION_SETS
    from feddpsyn.params.plan_request import PlanRequest
    from feddpsyn.params.schema import Schema, SchemaError
    from feddpsyn.params.session_plan import SessionPlan
    from feddpsyn.params.shape_record import public_shape

    if schema is not None and max_rows is None:
        fail("--max-rows is required with --schema: a public bound on the rows of the "
             "owners' tables together, which only the operator can state")
    try:
        # The bundled schema is package data (feddpsyn.params), in a checkout and installed.
        s = Schema.load(schema or Path(__file__).resolve().parent / "params" / "schemas"
                        / "fed_heart_disease.schema.json")
    except SchemaError as exc:
        fail(str(exc))
    max_rows = 740 if max_rows is None else max_rows  # the bundled table's rows
    if selection not in {m.value for m in SelectionMode}:
        fail(f"selection {selection!r}: choose one of "
             f"{', '.join(m.value for m in SelectionMode)}")
    rows = []
    for name in SELECTION_SETS:
        try:
            plan = SessionPlan.build(PlanRequest(s, epsilon, delta, max_rows,
                                                 selection=selection, rounds=rounds,
                                                 selection_set=name, noise=noise))
        except ValueError as exc:
            fail(f"set {name}: {exc}")
        report = plan.selection.report(plan.pair_cells())
        record = plan.to_public("params", ["owner"]).privacy
        report.update(default=name == DEFAULT_SELECTION_SET,
                      accounting=record.accounting,
                      epsilon_accounted=record.epsilon_accounted,
                      rho_total=float(plan.rho_total),
                      bootstraps=plan.selection.bootstraps(plan.pair_cells()),
                      chunk_sizes_used=list(plan.used_chunk_sizes()),
                      delta_conversion=plan.delta_conversion, delta_terms=plan.delta_terms(),
                      delta_total=plan.delta_total(),
                      releases={r.name: {"noise": r.noise_kind,
                                         "joint": None if r.joint is None else
                                         public_shape(r.joint).model_dump(),
                                         "per_count_variance": float(r.per_count_variance),
                                         "two_server_variance": float(2 * r.sigma2),
                                         "split": r.split_pending}
                                for r in plan.releases})
        rows.append(report)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    # The sets differ in em's permute-and-flip only: where the rest of two sets' reports is
    # the same, one block says so instead of printing the same lines twice.
    def plan_of(report: dict) -> dict:
        return {k: v for k, v in report.items() if k not in ("parameter_set", "default")}

    if len(rows) > 1 and all(plan_of(r) == plan_of(rows[0]) for r in rows[1:]):
        names = ", ".join(r["parameter_set"]["name"] for r in rows)
        typer.echo(f"selection parameter sets {names}: the same plan for --selection "
                   f"{selection} (the sets differ only in em's rounds)")
        rows = [next(r for r in rows if r["default"])]
    for r in rows:
        ps = r["parameter_set"]
        typer.echo(f"{ps['name']} v{ps['version']}{' (default)' if r['default'] else ''}: "
                   f"lambda {ps['lam']}, 4 eta <= {ps['relative_loss']} eps, clamp below "
                   f"e^-{ps['clamp_exponent']}, p_error 2^{math.log2(ps['p_error']):g}, "
                   f"P2 chunks of {ps['chunk_sizes']} cells "
                   f"(this schema uses {r['chunk_sizes_used']})")
        if r["mode"] == SelectionMode.EM:
            typer.echo(f"  {r['rounds']} rounds: n_b {r['nb']}, kappa' {r['kappa_prime']}; "
                       f"eps/round {r['step_epsilon']:.6f} + numerical "
                       f"{r['step_epsilon_total'] - r['step_epsilon']:.2e} = "
                       f"{r['step_epsilon_total']:.6f}")
        typer.echo(f"  rho charged {r['rho_charged']:.6g} of {r['rho_budget']:.6g}; "
                   f"fhe_delta {r['fhe_delta']:.2e} ({r['bootstraps']:,} bootstraps x p_error, "
                   "an upper bound; the session counts the compiled module's)")
        terms = ", ".join(f"{k} {v:.2e}" for k, v in r["delta_terms"].items())
        typer.echo(f"  delta {delta:g} = conversion {r['delta_conversion']:.4e} + reserved "
                   f"terms (the selection's failures x (1 + e^eps); the joint noise's "
                   f"conditioning mass as is): {terms}")
        typer.echo(
            f"  privacy: eps {r['epsilon_accounted']:.4f} of {epsilon:g} by the exact PLD of "
            f"every noise (rho {r['rho_total']:.6g} calibrated on it)"
            if r["accounting"] == "pld" else
            f"  privacy: eps {epsilon:g} by the Renyi bound (a release decided at run time); "
            f"rho {r['rho_total']:.6g}")
        for name, rel in r["releases"].items():
            shape = ("" if rel["joint"] is None else
                     f" ({rel['joint']['uniforms']} uniforms of {rel['joint']['bits']} bits)")
            if rel.get("split"):
                typer.echo(f"  release {name}: split at run time over the kept pairs (PrivSyn's "
                           f"c^(2/3) shares), one joint noise per pair size; its envelope"
                           f"{shape} is the smallest pair's with every pair kept")
                continue
            typer.echo(f"  release {name}: {rel['noise']} noise{shape}, variance per count "
                       f"{rel['per_count_variance']:.4g} (two servers' Gaussians: "
                       f"{rel['two_server_variance']:.4g})")


def numerics(epsilon: str = typer.Option("0.1,0.3,1,3,10", help="comma-separated epsilons"),
             nb: int = typer.Option(17, help="bits of the fixed-point score (n_b)"),
             kappa: int = typer.Option(13, help="scale of the result, 2^kappa"),
             kappa_prime: Optional[str] = typer.Option(
                 None, help="kappa'_j: one value for every j, or n_b comma-separated values "
                            "(default: kappa)"),
             lam: int = typer.Option(17, "--lambda", help="fraction bits of the score"),
             e_prev: float = typer.Option(0.0, help="error of the input score, |2^-lambda U - u|"),
             as_json: bool = typer.Option(False, "--json", help="print rows as JSON")) -> None:
    """Extra privacy loss of TFHE-EXP: Theorem C.1's bound and the exact worst case."""
    from feddpsyn.crypto.exp_privacy import numerics_row
    from feddpsyn.crypto.tfhe_exp import ExpParams

    try:
        eps_values = [float(e) for e in epsilon.split(",") if e.strip()]
        if kappa_prime is None:
            kp = (kappa,) * nb
        else:
            parts = [int(k) for k in kappa_prime.split(",")]
            kp = tuple(parts * nb if len(parts) == 1 else parts)
        rows = [numerics_row(ExpParams(eps=e, nb=nb, kappa=kappa, kappa_prime=kp, lam=lam),
                             e_prev) for e in eps_values]
    except ValueError as exc:
        fail(str(exc))
    if as_json:
        # Strict JSON has no infinity: an unbounded loss (a weight rounds to 0) is null.
        def finite(v):
            return None if isinstance(v, float) and math.isinf(v) else v

        typer.echo(json.dumps([{k: finite(r[k]) for k in ("eps", "nb", "kappa", "lambda",
                                                          "bound", "exact", "total",
                                                          "exact_bernoulli", "total_bernoulli")}
                               for r in rows]))
        return
    typer.echo("exact: SubRoutine 1's integer arithmetic; ours: the exact product of Bernoulli "
               "trials the encrypted selection samples (crypto/tfhe_permute_and_flip.py)")
    typer.echo(f"{'eps':>8} {'bound e_prime':>14} {'exact e_prime':>14} {'eps+4*exact':>12} "
               f"{'ours e_prime':>13} {'eps+4*ours':>11}")
    for r in rows:
        typer.echo(f"{r['eps']:>8g} {r['bound']:>14.6f} {r['exact']:>14.6f} {r['total']:>12.6f} "
                   f"{r['exact_bernoulli']:>13.6f} {r['total_bernoulli']:>11.6f}")
