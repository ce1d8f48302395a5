"""The ``feddpsyn`` command line: this module builds the command tree and dispatches; each
audience's commands live in their own module.

=================================  ==========================================================
``feddpsyn.cli_servers``           ``keyserver``, ``computeserver``: run a server
``feddpsyn.cli_client``            ``client``: the data owner's agent
``feddpsyn.cli_operator``          ``session``: the operator, over the key server's HTTP API
``feddpsyn.cli_schema``            ``schema``: draft and check a table's schema
``feddpsyn.cli_synthesize``        ``synthesize``: a release to a synthetic CSV
``feddpsyn.cli_parameters``        ``params``, ``numerics``: parameter sets and their cost
``feddpsyn.cli_bench``             ``bench``: the utility benchmark, for researchers
``feddpsyn.cli_demo``              ``demo``: the whole protocol on loopback
``feddpsyn.distaim_cli``           ``distaim``: the three-server path
=================================  ==========================================================
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import typer

from feddpsyn import (
    __version__,
    cli_audit,
    cli_bench,
    cli_client,
    cli_demo,
    cli_operator,
    cli_parameters,
    cli_schema,
    cli_servers,
    cli_synthesize,
)
from feddpsyn.distaim_cli import app as distaim_app
from feddpsyn.extras import missing_extra_message
from feddpsyn.vocabulary import explain

warnings.filterwarnings("ignore", message="pkg_resources is deprecated")

# Plain help (click's formatter, rich_markup_mode=None): it wraps at any width, where the
# boxed help cut long option names at 80 columns.
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Federated DP synthetic tables with two non-colluding servers.")
client_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                         help="The data owner's agent.")
app.add_typer(client_app, name="client")
session_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                          help="The operator's view of the key server.")
app.add_typer(session_app, name="session")
schema_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                         help="Write and check a table's schema.")
app.add_typer(schema_app, name="schema")
bench_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                        help="Benchmarks for researchers.")
app.add_typer(bench_app, name="bench")
app.add_typer(distaim_app, name="distaim")  # the three-server path: serve, party, upload, share


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"feddpsyn {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True,
        help="Print the version and exit.")) -> None:
    """Federated DP synthetic tables with two non-colluding servers."""

# The order of registration is the order of `feddpsyn --help`.
app.command()(cli_servers.keyserver)
app.command()(cli_servers.computeserver)
client_app.command("check")(cli_client.client_check)
client_app.command("counts")(cli_client.client_counts)
client_app.command("upload")(cli_client.client_upload)
client_app.command("release")(cli_client.client_release)
client_app.command("budget")(cli_client.client_budget)
session_app.command("create")(cli_operator.session_create)
session_app.command("status")(cli_operator.session_status)
session_app.command("close")(cli_operator.session_close)
schema_app.command("draft")(cli_schema.schema_draft)
schema_app.command("check")(cli_schema.schema_check)
app.command()(cli_synthesize.synthesize)
app.command("params")(cli_parameters.params_command)
app.command()(cli_parameters.numerics)
app.command()(cli_audit.audit)
bench_app.command("utility")(cli_bench.bench_utility)
bench_app.command("summary")(cli_bench.bench_summary)
app.command()(cli_demo.demo)


def command() -> Any:
    """The command tree as click runs it, every option explained (``feddpsyn.vocabulary``)."""
    root = typer.main.get_command(app)

    def walk(node: Any, path: str) -> None:  # bounded: the tree
        explain(node, path)
        if hasattr(node, "list_commands"):
            ctx = node.context_class(node)
            for name in node.list_commands(ctx):
                walk(node.get_command(ctx, name), f"{path} {name}")

    walk(root, "feddpsyn")
    return root


def main() -> None:
    """The ``feddpsyn`` command. A command whose role's extra is not installed (a data
    owner's bare install has no server) says which one to install, in one line."""
    try:
        command()(prog_name="feddpsyn")
    except ModuleNotFoundError as exc:
        message = missing_extra_message(exc, sys.argv[1:])
        if message is None:
            raise
        typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
