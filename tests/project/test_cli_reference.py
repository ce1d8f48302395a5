"""One command-line vocabulary, explained everywhere: every option of every command has a
help text (its own, or ``feddpsyn.vocabulary``'s for its name), the same name means the
same thing across commands, the help reads at 80 columns, and docs/cli.md is the help the
commands print today."""

from pathlib import Path

from feddpsyn.cli import command
from feddpsyn.cli_reference import commands, reference
from feddpsyn.vocabulary import VOCABULARY

ROOT = Path(__file__).resolve().parents[2]


def test_every_option_has_help():
    missing = [f"{' '.join(path)} {max(p.opts, key=len)}"
               for path, cmd in commands(command())
               for p in cmd.params if getattr(p, "param_type_name", "") == "option"
               and "--help" not in p.opts and not (p.help or "").strip()]
    assert not missing, "options without help (give one, or a VOCABULARY entry):\n" + \
        "\n".join(missing)


def test_a_shared_name_is_not_spelt_two_ways():
    names = {max(p.opts, key=len) for _, cmd in commands(command()) for p in cmd.params
             if getattr(p, "param_type_name", "") == "option"}
    # The spellings the vocabulary replaced stay gone.
    assert not names & {"--eps", "--pid", "--keyserver-ca", "--rows-bound"}
    assert set(VOCABULARY) - names == set(), "a vocabulary entry no command uses"


def test_the_reference_page_is_current_and_reads_at_80_columns():
    page = reference()
    assert (ROOT / "docs" / "cli.md").read_text() == page, (
        "docs/cli.md is not the commands' help: .venv/bin/python -m feddpsyn.cli_reference "
        "> docs/cli.md")
    in_blocks = [line for block in page.split("```text\n")[1:]
                 for line in block.split("\n```")[0].splitlines()]
    assert in_blocks and max(len(line) for line in in_blocks) <= 80
    assert "…" not in page  # nothing cut short
