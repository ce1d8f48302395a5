"""``feddpsyn audit``: re-account a published privacy record with dp-accounting."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from feddpsyn.terminal import fail


def audit(document: Path = typer.Argument(
              ..., help="a demo's report.json, a session's public record (GET /sessions/ID) "
                        "or a privacy record, as JSON"),
          as_json: bool = typer.Option(False, "--json", help="the audit as JSON")) -> None:
    """Re-account a session's published privacy record: its eps at the record's delta (less
    the reserved failure terms), by Google's dp-accounting, and each mechanism's share."""
    from feddpsyn.dp.audit import audit_record, record_of

    try:
        record = record_of(json.loads(document.read_text()))
        result = audit_record(record)
    except OSError as exc:
        fail(f"{document}: {exc.strerror}")
    except ValueError as exc:  # not JSON, no record, an rdp record
        fail(f"{document}: {str(exc).splitlines()[0]}")
    if as_json:
        typer.echo(json.dumps({
            "epsilon": result.epsilon, "delta": result.delta,
            "delta_reserved": result.delta_reserved, "epsilon_asked": result.epsilon_asked,
            "epsilon_accounted": result.epsilon_accounted, "run_time": result.run_time,
            "mechanisms": [{"name": n, "noise": k, "epsilon_alone": e}
                           for n, k, e in result.mechanisms]}, indent=1))
        return
    typer.echo(f"eps {result.epsilon:.6f} at delta {result.delta:g} (the mechanisms composed "
               f"at delta {result.delta - result.delta_reserved:.6g}, after "
               f"{result.delta_reserved:.3g} reserved); asked {result.epsilon_asked:g}, "
               f"record states {result.epsilon_accounted}")
    if result.run_time:
        typer.echo(f"decided at run time, each within its Gaussian bound: "
                   f"{', '.join(result.run_time)}")
    total = sum(e for _, _, e in result.mechanisms) or 1.0
    typer.echo(f"{'mechanism':<28} {'noise':<18} {'eps alone':>10} {'share':>6}")
    for name, noise, eps in result.mechanisms:
        typer.echo(f"{name[:28]:<28} {noise:<18} {eps:>10.4f} {eps / total:>6.1%}")
