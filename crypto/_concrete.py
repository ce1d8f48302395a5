"""concrete-python's quirks, worked around in one place for every circuit this package
compiles.

concrete keeps its tracing tag stack in a thread-local that it initialises only in the
thread that imported it; the servers compile in worker threads (their background jobs, the
request thread pool), where tracing would fail on the missing attribute. Every compile entry
point calls :func:`ensure_tag_stack` first.
"""

from __future__ import annotations

import importlib

__all__ = ["ensure_tag_stack"]

# The module, not the same-named function that concrete.fhe.extensions re-exports.
_fhe_tag = importlib.import_module("concrete.fhe.extensions.tag")


def ensure_tag_stack() -> None:
    """Give the calling thread concrete's tag stack if it has none yet."""
    if not hasattr(_fhe_tag.tag_context, "stack"):
        _fhe_tag.tag_context.stack = []
