"""Where a benchmark's numbers came from: the checkout's commit, as results files record it.

Light on purpose (the standard library only): a bench that spawns worker processes imports
it in each of them."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["commit"]

ROOT = Path(__file__).resolve().parents[1]


def commit(root: Path = ROOT) -> str:
    """HEAD, marked ``-dirty`` when the tree has uncommitted changes to tracked files."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                          capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                           capture_output=True, text=True).stdout.strip()
    return head + ("-dirty" if dirty else "")
