"""A module as it was at an older commit, imported under another name, so that a benchmark
can time the old construction against the current one in the same run."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _source_at(rev: str, path: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"],
                          check=True, capture_output=True, text=True).stdout


def _load(source: str, name: str):
    file = Path(tempfile.mkdtemp()) / f"{name}.py"
    file.write_text(source)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def module_at(rev: str, path: str, name: str, dependencies: tuple[str, ...] = ()):
    """``path`` (from the repository's root) at ``rev``, imported as module ``name``.

    ``dependencies`` are other project files the old module imports whose names or contents
    have changed since ``rev`` (``crypto/aggregation.py``, say): each is loaded at ``rev`` too
    and stands under its own dotted name only while the old module loads, so the old code
    sees the project as it was and the current modules are left as they are."""
    saved = {}
    try:
        for dependency in dependencies:
            dotted = dependency.removesuffix(".py").replace("/", ".")
            saved[dotted] = sys.modules.get(dotted)
            sys.modules[dotted] = _load(_source_at(rev, dependency),
                                        f"{name}__{dotted.replace('.', '_')}")
        return _load(_source_at(rev, path), name)
    finally:
        for dotted, module in saved.items():
            if module is None:
                sys.modules.pop(dotted, None)
            else:
                sys.modules[dotted] = module
