"""The public API (``feddpsyn/__init__.py``): every name it lists resolves, importing it stays
cheap, and docs/api.md's examples run as written (its ```python blocks, in order, in one
namespace; its ```py blocks need servers and are only parsed). Fast: no server, no circuit."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import feddpsyn

ROOT = Path(__file__).resolve().parents[2]
API_PAGE = ROOT / "docs" / "api.md"
HEAVY = ("concrete", "jax", "torch")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", API_PAGE.read_text(), re.M | re.S)


@pytest.mark.parametrize("name", feddpsyn.__all__)
def test_every_public_name_resolves_to_where_it_lives(name):
    value = getattr(feddpsyn, name)
    assert value.__name__ == name
    # re-exported from its layer, not redefined in feddpsyn/__init__.py
    assert value.__module__ == feddpsyn._LAZY[name] != "feddpsyn"


def test_all_lists_exactly_the_lazy_names():
    assert sorted(feddpsyn.__all__) == sorted(feddpsyn._LAZY)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = feddpsyn.no_such_name


def test_importing_feddpsyn_loads_no_heavy_dependency():
    code = (f"import sys, feddpsyn, feddpsyn.cli; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.strip()
    assert loaded == "[]"


def test_the_api_pages_examples_run_in_order(capsys):
    blocks = _blocks("python")
    assert len(blocks) >= 4
    namespace: dict = {}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"docs/api.md, python block {number}", "exec"), namespace)
    assert "mechanisms: eps" in capsys.readouterr().out
    for block in _blocks("py"):  # the blocks that need servers: they parse
        compile(block, "docs/api.md", "exec")
