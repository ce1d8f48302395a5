"""Installs by role: a bare install runs the data owner's commands, and a command whose extra
is missing says which one to install.

The data owner's path runs in a subprocess in which importing any package of an extra fails
as if it were not installed (a ``sys.meta_path`` finder), so the test holds in the full
development environment too. Fast: no server, no circuit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from feddpsyn.extras import INCLUDES, NO_DEPS, PROVIDES, extra_for, missing_extra_message

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Every module an extra brings: none of them may be imported on the data owner's path.
HEAVY = sorted({module for modules in PROVIDES.values() for module in modules})

BLOCKER = textwrap.dedent("""
    import importlib.abc, sys, traceback
    BLOCKED = set(sys.argv[1].split(","))
    TRIED = []  # (module, the file whose import statement asked for it)

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                frames = [f for f in traceback.extract_stack()[:-1]
                          if not f.filename.startswith("<frozen")]
                TRIED.append((name, frames[-1].filename if frames else "?"))
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    sys.argv = sys.argv[:1] + sys.argv[2:]
""")

CLIENT_SCRIPT = BLOCKER + textwrap.dedent("""
    import json
    from pathlib import Path

    from feddpsyn.cli import main

    def run(*args):
        sys.argv = ["feddpsyn", *args]
        try:
            main()
        except SystemExit as exc:
            return exc.code or 0
        return 0

    work = Path(sys.argv[1])
    csv, schema = work / "t.csv", work / "t.schema.json"
    codes = {
        "client --help": run("client", "--help"),
        "schema --help": run("schema", "--help"),
        "schema draft": run("schema", "draft", "--csv", str(csv), "--out", str(schema)),
        "schema check": run("schema", "check", "--schema", str(schema), "--csv", str(csv)),
        "client check": run("client", "check", "--csv", str(csv), "--schema", str(schema)),
        "client counts": run("client", "counts", "--csv", str(csv), "--schema", str(schema),
                             "--out", str(work / "counts.json")),
    }

    # The client's CSV-to-counts path itself, as ClientAgent.encode runs it, and a synthetic
    # table from those counts (feddpsyn synthesize's numpy methods).
    import numpy as np
    from feddpsyn.clients.agent import ClientAgent  # noqa: F401  (the agent imports cleanly)
    from feddpsyn.params.layout import MarginalLayout
    from feddpsyn.params.schema import Schema
    from feddpsyn.params.table_codec import encode_csv
    from feddpsyn.synthesis import NoisyMarginal, synthesize

    s = Schema.load(schema)
    table = encode_csv(csv, s)
    layout = MarginalLayout.build(s.domain_sizes)
    counts = layout.counts(table.records)
    noisy = [NoisyMarginal(m.attrs, counts[m.offset:m.offset + m.size].reshape(m.shape)
                           .astype(float), 1.0) for m in layout.marginals]
    _, rows = synthesize(s, noisy, "gum", 20, seed=0)
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    print("RESULT " + json.dumps({"codes": codes, "counts": counts.tolist(), "rows": len(rows),
                                  "tried": TRIED, "imported": heavy}))
""")


def _run(script: str, blocked: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-c", script, ",".join(blocked), *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)


def test_the_data_owners_commands_import_no_package_of_an_extra(tmp_path):
    (tmp_path / "t.csv").write_text("sex,smoker,region\nf,yes,north\nm,no,south\n"
                                    "f,no,south\nm,no,north\nf,yes,south\n")
    done = _run(CLIENT_SCRIPT, HEAVY, str(tmp_path))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result["codes"] == dict.fromkeys(result["codes"], 0), done.stdout + done.stderr
    assert result["imported"] == []
    # Not even tried by the project's code (a library may probe an optional one: rich, attr).
    ours = [(m, f) for m, f in result["tried"]
            if f.startswith(str(ROOT)) and "-packages" not in f]
    assert ours == []
    assert "Usage: feddpsyn client" in done.stdout and "counts" in done.stdout
    assert "ok: " in done.stdout and "fits the schema" in done.stdout
    # 1-ways sex (f 3, m 2), smoker (no 3, yes 2), region (north 2, south 3), then the 2-ways
    assert result["counts"] == [3, 2, 3, 2, 2, 3, 1, 2, 2, 0, 1, 2, 1, 1, 1, 2, 1, 1]
    written = json.loads((tmp_path / "counts.json").read_text())
    assert written["0,1"] == {"attrs": ["sex", "smoker"], "shape": [2, 2],
                              "counts": [1, 2, 2, 0]}
    assert result["rows"] == 20


@pytest.mark.parametrize(("args", "blocked", "extra"), [
    (["keyserver", "--state-dir", "{tmp}/ks", "--port", "9"], ["fastapi"], "server"),
    (["params", "--schema", "{tmp}/none.json"], ["concrete"], "server"),
    (["distaim", "serve", "--state-dir", "{tmp}/d", "--party", "1", "--port", "9",
      "--mpc-address", "127.0.0.1:9"], ["fastapi", "mpyc"], "distaim"),
])
def test_a_command_without_its_extra_says_which_to_install_in_one_line(tmp_path, args,
                                                                       blocked, extra):
    script = BLOCKER + "from feddpsyn.cli import main\nsys.argv[0] = 'feddpsyn'\nmain()\n"
    done = _run(script, blocked, *[a.format(tmp=tmp_path) for a in args])
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: feddpsyn {args[0]} needs the {extra} extra")
    assert f"pip install 'feddpsyn[{extra}]'" in lines[0]


def test_missing_extra_message_names_the_commands_extra_and_the_no_deps_step():
    def message(module: str, *argv: str) -> str | None:
        return missing_extra_message(ModuleNotFoundError(module, name=module), argv)

    assert message("concrete.fhe", "keyserver", "--port", "1") == (
        "feddpsyn keyserver needs the server extra (no module named 'concrete'): "
        "pip install 'feddpsyn[server]' && pip install --no-deps dp-accounting==0.6.0")
    assert message("fastapi", "--verbose", "distaim", "serve").startswith(
        "feddpsyn distaim needs the distaim extra")
    assert extra_for("jax") == "synthesis" and extra_for("umap") == "bench"
    assert "mbi==2.0.0" in message("mbi", "bench", "utility")
    assert message("not_a_dependency", "client") is None
    assert message("numpy", "client") is None  # the bare install's: not an extra's


def _name(requirement: str) -> str:
    return re.split(r"[<>=!\[; ]", requirement, maxsplit=1)[0].lower()


def test_extras_module_agrees_with_pyproject_and_requirements_nodeps():
    extras = PYPROJECT["project"]["optional-dependencies"]
    for extra, modules in PROVIDES.items():
        declared = [r for r in extras[extra] if not r.startswith("feddpsyn[")]
        installed = {d for d in modules.values() if d not in NO_DEPS}
        assert {_name(r) for r in declared} == installed, extra
        inner = [r for r in extras[extra] if r.startswith("feddpsyn[")]
        assert inner == ([f"feddpsyn[{','.join(INCLUDES[extra])}]"] if extra in INCLUDES
                         else []), extra
    assert extras["all"] == [f"feddpsyn[{','.join(PROVIDES)}]"]
    nodeps = [line.strip() for line in (ROOT / "requirements-nodeps.txt").read_text()
              .splitlines() if line.strip() and not line.startswith("#")]
    assert sorted(nodeps) == sorted(NO_DEPS.values())
    # The bare install: nothing an extra brings.
    base = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert base == {"numpy", "pydantic", "httpx", "typer", "rich", "numba"}
    assert not base & {d for modules in PROVIDES.values() for d in modules.values()}


def test_a_wheel_holds_every_package_of_the_tree():
    # pip install . (not -e) copies only the packages listed: a subpackage left out is
    # missing from every install but a development one. Each layer's folder is installed as
    # feddpsyn.<folder> (package-dir), and feddpsyn/<folder> is the checkout's link to it.
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    package_dir = PYPROJECT["tool"]["setuptools"]["package-dir"]
    found = {"feddpsyn"}
    for name, folder in package_dir.items():
        assert name == f"feddpsyn.{folder}"
        assert (ROOT / "feddpsyn" / folder).resolve() == (ROOT / folder).resolve(), folder
        found |= {".".join(["feddpsyn", *init.parent.relative_to(ROOT).parts])
                  for init in (ROOT / folder).rglob("__init__.py")}
    assert found == listed


def test_a_wheel_installs_one_top_level_package_and_runs_the_owners_commands(tmp_path):
    """Build the wheel, install it into a clean venv, and list what lands in site-packages.
    The owner's commands then run from that install alone (its dependencies read from the
    development venv's site-packages, which holds no feddpsyn), with the server extra's
    modules blocked."""
    # Built from a copy of what the wheel reads: a build in the checkout would leave build/
    # there, whose stale files a later build would package.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "LICENSE", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ["feddpsyn", *PYPROJECT["tool"]["setuptools"]["package-dir"].values()]:
        shutil.copytree(ROOT / folder, source / folder, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(wheels), str(source)], check=True, capture_output=True,
                   timeout=300, cwd=tmp_path)
    (wheel,) = wheels.glob("feddpsyn-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True,
                   timeout=300)
    (site,) = venv.glob("lib/python*/site-packages")
    top = sorted(p.name for p in site.iterdir() if not p.name.startswith(("_", ".")))
    assert [n for n in top if not n.endswith(".dist-info")] == ["feddpsyn"], top
    installed = site / "feddpsyn"
    assert {p.name for p in installed.iterdir() if p.is_dir() and p.name != "__pycache__"} == {
        "common", "dp", "crypto", "params", "clients", "synthesis", "keyserver",
        "computeserver", "distaim", "fedbench"}
    assert not any(p.is_symlink() for p in installed.rglob("*"))
    assert (installed / "params" / "schemas").is_dir()
    (dist,) = site.glob("feddpsyn-*.dist-info")
    meta = (dist / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in meta
    assert (dist / "licenses" / "LICENSE").is_file()

    dev_site = next(Path(p) for p in sys.path if p.endswith("site-packages")
                    and (Path(p) / "numpy").is_dir())
    script = BLOCKER + textwrap.dedent("""
        import feddpsyn
        from feddpsyn.cli import main
        print("FROM", feddpsyn.__file__)
        sys.argv = ["feddpsyn", *sys.argv[1:]]
        main()
    """)
    env = {**os.environ, "PYTHONPATH": str(dev_site), "COLUMNS": "80"}
    for args in (["--version"], ["client", "--help"]):
        done = subprocess.run([str(python), "-c", script, "concrete,fastapi,mpyc,jax", *args],
                              capture_output=True, text=True, cwd=tmp_path, env=env,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert f"FROM {installed / '__init__.py'}" in done.stdout
    assert "Usage: feddpsyn client" in done.stdout
