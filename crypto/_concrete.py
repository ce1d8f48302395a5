"""concrete-python's quirks, worked around in one place for every circuit this package
compiles.

concrete keeps its tracing tag stack in a thread-local that it initialises only in the
thread that imported it; the servers compile in worker threads (their background jobs, the
request thread pool), where tracing would fail on the missing attribute. Every compile entry
point calls :func:`ensure_tag_stack` first.

concrete sizes an encrypted value from the ranges its input set reaches; a bit-level
circuit's intermediates cannot be trusted to reach their maxima there, and a too narrow
encoding wraps silently, so every lookup declares its index as wide as its table
(:func:`lookup`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from concrete import fhe

__all__ = ["ensure_tag_stack", "table", "lookup"]

# The module, not the same-named function that concrete.fhe.extensions re-exports.
_fhe_tag = importlib.import_module("concrete.fhe.extensions.tag")


def ensure_tag_stack() -> None:
    """Give the calling thread concrete's tag stack if it has none yet."""
    if not hasattr(_fhe_tag.tag_context, "stack"):
        _fhe_tag.tag_context.stack = []


def table(fn: Callable[[int], int], width: int) -> fhe.LookupTable:
    """The lookup table of ``fn`` over every ``width``-bit index."""
    return fhe.LookupTable([fn(i) for i in range(1 << width)])


def lookup(lut: fhe.LookupTable, index: Any) -> Any:
    """``lut[index]`` with the index declared wide enough for the whole table (module
    docstring)."""
    return lut[fhe.hint(index, can_store=len(lut.table) - 1)]
