"""Installs by role: which extra of ``pip install 'feddpsyn[...]'`` brings what a command
imports, and the one line a command prints when its extra is missing.

A bare ``pip install feddpsyn`` is a data owner's install: the client agent, the schema tools
and ``feddpsyn synthesize`` (numpy, pydantic, httpx, typer, rich); an owner who keeps a
lifetime cap adds the ``accounting`` extra (Google's dp-accounting). Every other role is an
extra of pyproject.toml; :data:`PROVIDES` lists, for each, the modules it brings
(tests/project/test_install_roles.py checks it against pyproject.toml). Two packages of the
``server`` and ``synthesis`` extras are installed with ``--no-deps`` after the extra
(:data:`NO_DEPS`, requirements-nodeps.txt; pyproject.toml says why).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["PROVIDES", "NO_DEPS", "COMMAND_EXTRA", "extra_for", "missing_extra_message"]

# Extra -> {top-level module: the distribution that installs it}. The bench extra includes
# the server, distaim and synthesis extras (pyproject.toml), so it brings their modules too.
PROVIDES: dict[str, dict[str, str]] = {
    "server": {
        "concrete": "concrete-python", "torch": "torch", "setuptools": "setuptools",
        "pkg_resources": "setuptools",
        "scipy": "scipy", "networkx": "networkx", "attr": "attrs", "fastapi": "fastapi",
        "starlette": "starlette", "uvicorn": "uvicorn", "distributed": "distributed",
        "absl": "absl-py", "tree": "dm-tree", "mpmath": "mpmath",
        "dp_accounting": "dp-accounting",
    },
    # An owner's lifetime budget (`client upload --lifetime-epsilon`, `client budget`):
    # Google's dp-accounting composes the sessions' records.
    "accounting": {
        "scipy": "scipy", "attr": "attrs", "absl": "absl-py", "tree": "dm-tree",
        "mpmath": "mpmath", "dp_accounting": "dp-accounting",
    },
    "distaim": {
        "mpyc": "mpyc", "gmpy2": "gmpy2", "fastapi": "fastapi", "starlette": "starlette",
        "uvicorn": "uvicorn",
    },
    "synthesis": {
        "jax": "jax", "jaxlib": "jaxlib", "chex": "chex", "optax": "optax", "scipy": "scipy",
        "networkx": "networkx", "attr": "attrs", "mbi": "mbi",
    },
    "bench": {
        "sklearn": "scikit-learn", "matplotlib": "matplotlib", "pandas": "pandas",
        "umap": "umap-learn",
    },
}
INCLUDES: dict[str, tuple[str, ...]] = {"bench": ("server", "distaim", "synthesis")}

# Distributions installed with --no-deps after their extra (requirements-nodeps.txt).
NO_DEPS: dict[str, str] = {"dp-accounting": "dp-accounting==0.6.0", "mbi": "mbi==2.0.0"}

# A command whose own extra is named first when a module it misses is in several extras.
COMMAND_EXTRA: dict[str, str] = {"distaim": "distaim", "bench": "bench",
                                  "client": "accounting", "audit": "accounting"}

# The order in which extras are tried for a command not in COMMAND_EXTRA.
_ORDER = ("server", "accounting", "distaim", "synthesis", "bench")


def _modules(extra: str) -> dict[str, str]:
    found = dict(PROVIDES[extra])
    for inner in INCLUDES.get(extra, ()):
        found.update(_modules(inner))
    return found


def extra_for(module: str, command: str | None = None) -> str | None:
    """The extra that installs top-level ``module``: the command's own extra if it does,
    else the first of server, distaim, synthesis, bench that does; None if none does."""
    top = module.split(".")[0]
    preferred = COMMAND_EXTRA.get(command or "")
    for extra in ((preferred,) if preferred else ()) + _ORDER:
        if top in _modules(extra):
            return extra
    return None


def _command(argv: Sequence[str]) -> str | None:
    """The first word of a command line that is not an option."""
    return next((word for word in argv if not word.startswith("-")), None)


def missing_extra_message(exc: ModuleNotFoundError, argv: Sequence[str] = ()) -> str | None:
    """One line naming the extra to install for the module ``exc`` misses, or None when no
    extra brings it (a broken install: the traceback says more then)."""
    module = (exc.name or "").split(".")[0]
    command = _command(argv)
    extra = extra_for(module, command)
    if extra is None:
        return None
    install = f"pip install 'feddpsyn[{extra}]'"
    no_deps = sorted(NO_DEPS[d] for d in set(_modules(extra).values()) if d in NO_DEPS)
    if no_deps:
        install += f" && pip install --no-deps {' '.join(no_deps)}"
    what = f"feddpsyn {command}" if command else "this command"
    return f"{what} needs the {extra} extra (no module named {module!r}): {install}"
