"""docs/cli.md, generated from the command tree itself: every command's ``--help`` as the
command prints it at 80 columns, in the order of ``feddpsyn --help``.

    .venv/bin/python -m feddpsyn.cli_reference > docs/cli.md

``tests/project/test_cli_reference.py`` checks the page is current and that every option
has its help.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

__all__ = ["commands", "reference"]

HEADER = """# Command line reference

Every `feddpsyn` command's `--help`, as it prints at 80 columns. Generated from the
commands themselves: `.venv/bin/python -m feddpsyn.cli_reference > docs/cli.md`
(`tests/project/test_cli_reference.py` checks it is current).
"""


def commands(group: Any = None,
             path: tuple[str, ...] = ("feddpsyn",)) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command of the tree (typer's click commands) with its path, depth first in
    registration order."""
    if group is None:
        from feddpsyn.cli import command

        group = command()
    yield path, group
    if hasattr(group, "list_commands"):
        ctx = group.context_class(group)
        for name in group.list_commands(ctx):  # bounded: the tree
            sub = group.get_command(ctx, name)
            if sub is not None and not getattr(sub, "hidden", False):
                yield from commands(sub, (*path, name))


def _help(path: tuple[str, ...], command: Any) -> str:
    parent = None
    for part in path[:-1]:  # bounded: the path's depth
        parent = command.context_class(command, info_name=part, parent=parent)
    ctx = command.context_class(command, info_name=path[-1], parent=parent,
                                terminal_width=80, max_content_width=80)
    return str(command.get_help(ctx))


def reference() -> str:
    os.environ["COLUMNS"] = "80"
    parts = [HEADER]
    for path, command in commands():
        parts.append(f"## `{' '.join(path)}`\n\n```text\n{_help(path, command)}\n```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    print(reference(), end="")
