"""Functions for ``common.jobs.run_in_child`` in the tests: top-level (a spawned child
imports them by name) and in a module that imports nothing heavy, so a child starts in a
second."""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def phases_then_sum(values: list[int], *, report: Callable[[str], None]) -> int:
    for n in range(3):
        report(f"phase {n}")
    return sum(values)


def refuse(message: str, *, report: Callable[[str], None]) -> None:
    report("about to refuse")
    raise ValueError(message)


def vanish(code: int, *, report: Callable[[str], None]) -> None:
    report("about to exit")
    os._exit(code)


def sleep_long(seconds: float, *, report: Callable[[str], None]) -> None:
    report("sleeping")
    time.sleep(seconds)
