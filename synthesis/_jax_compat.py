"""Import ``mbi`` (Private-PGM 2.0.0) beside concrete-python 2.11.0 in one environment.

Why this exists: concrete-python 2.11.0 requires numpy < 2; jax >= 0.7.2 requires
numpy >= 2; mbi 2.0.0 declares jax >= 0.9 but uses only two jax APIs newer than jax 0.7.0:
``jax.tree.static()`` (a dataclass field marked static) and ``jax.jit(**options)`` used as a
decorator factory. We install jax 0.7.0 and mbi without its declared dependency, and add
exactly those two forms here, each equivalent to what jax 0.7.0 already supports
(``dataclasses.field(metadata={"static": True})`` and ``functools.partial(jax.jit, ...)``).
Both additions apply only when missing, so a newer jax is used untouched.
``tests/synthesis/test_synthesis.py`` runs mbi's estimator end to end through this import.
"""

from __future__ import annotations

import dataclasses
import functools

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_enable_compilation_cache", False)

if not hasattr(jax.tree, "static"):
    def _static(**kwargs):
        metadata = dict(kwargs.pop("metadata", None) or {})
        metadata["static"] = True
        return dataclasses.field(metadata=metadata, **kwargs)

    jax.tree.static = _static

try:
    jax.jit(static_argnames=["x"])
except TypeError:
    _jit = jax.jit

    @functools.wraps(_jit)
    def _jit_or_factory(fun=None, **options):
        if fun is None:
            return functools.partial(_jit_or_factory, **options)
        return _jit(fun, **options)

    jax.jit = _jit_or_factory

import warnings  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import mbi  # noqa: E402,F401
