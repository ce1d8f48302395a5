"""The top-level packages form floors: a package imports only packages on floors below it.

Every import counts, including those deferred inside functions (``ast.walk`` sees them all),
so a loop cannot hide in a function body. The floors, bottom to top (docs/architecture.md):
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FLOORS: list[tuple[str, ...]] = [
    ("common",),                                  # wire models, serving, credentials
    ("dp",),                                      # exact samplers, accounting, mechanisms
    ("crypto",),                                  # FHE primitives (P1, P2, P3, TFHE-EXP)
    ("params",),                                  # schema, codec, layout, parameter sets, plans
    ("clients", "synthesis"),                     # the data owner's agent; post-processing
    ("keyserver", "computeserver", "distaim"),    # the servers
    ("fedbench",),                                # research harness: methods, metrics, runner
    ("feddpsyn",),                                # the CLI, the demos, the load tool
    ("bench",),                                   # research scripts
]
FLOOR = {package: level for level, packages in enumerate(FLOORS) for package in packages}


def _packages() -> list[str]:
    """Every top-level folder of Python source except the tests."""
    return sorted(p.name for p in ROOT.iterdir()
                  if p.is_dir() and not p.name.startswith(".") and p.name != "tests"
                  and any(p.glob("*.py")))


def _sources(package: str) -> list[Path]:
    """The package's own files: feddpsyn/'s links to the layers are not its files."""
    return sorted(path for path in (ROOT / package).rglob("*.py")
                  if not any((ROOT / parent).is_symlink()
                             for parent in path.relative_to(ROOT).parents))


def _package_of(module: str) -> str:
    """The floor's package a module name belongs to: the layers are installed as
    ``feddpsyn.<layer>`` and the rest of ``feddpsyn`` is the CLI's floor."""
    parts = module.split(".")
    if parts[0] == "feddpsyn" and len(parts) > 1 and parts[1] in FLOOR and parts[1] != "bench":
        return parts[1]
    return parts[0]


def _imports(package: str) -> list[tuple[str, str, int]]:
    """(importing file, imported top-level package, line) for every absolute import of
    another top-level package of this project in ``package``."""
    known = set(_packages())
    found = []
    for path in _sources(package):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = _package_of(module)
                if top in known and top != package:
                    found.append((str(path.relative_to(ROOT)), top, node.lineno))
    return found


def test_every_import_names_the_installed_package():
    """A layer is installed as ``feddpsyn.<layer>`` only: ``import crypto`` would work in a
    checkout (the folder is on the path) and fail in every install."""
    bare = []
    for package in _packages():
        for path in _sources(package):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                bare += [f"{path.relative_to(ROOT)}:{node.lineno} imports {module}"
                         for module in modules
                         if module.split(".")[0] in FLOOR
                         and module.split(".")[0] not in ("feddpsyn", "bench")]
    assert not bare, "import the layers as feddpsyn.<layer>:\n" + "\n".join(bare)


def test_every_package_has_a_floor():
    assert set(_packages()) == set(FLOOR), (
        "place each top-level package on a floor in FLOORS (and in the README's module map)")


@pytest.mark.parametrize("package", sorted(FLOOR))
def test_no_import_reaches_up_or_sideways(package):
    wrong = [f"{path}:{line} imports {top} (floor {FLOOR[top]}, {package} is on {FLOOR[package]})"
             for path, top, line in _imports(package) if FLOOR[top] >= FLOOR[package]]
    assert not wrong, "\n".join(wrong)


def test_package_graph_has_no_cycle():
    edges = {p: {top for _, top, _ in _imports(p)} for p in _packages()}
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                raise AssertionError("import cycle: " + " -> ".join(path + [node, nxt]))
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = "done"

    for package in sorted(edges):
        if package not in state:
            visit(package, [])


def test_the_top_floor_is_imported_by_no_package():
    users = sorted({package for package in _packages() for _, top, _ in _imports(package)
                    if top == "feddpsyn" and package != "bench"})
    assert not users, f"the CLI and demos are the top floor; imported by {users}"


# ------------------------------------------------------------------ modules within a package
def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts if parts[0] == "feddpsyn" else ["feddpsyn", *parts])


def _runtime_imports(tree: ast.AST, known: set[str]) -> set[str]:
    """The project's modules a module imports when it runs: every import, deferred ones
    included, but not those under ``if TYPE_CHECKING:`` (annotations only). ``from pkg
    import sub`` names the submodule, not the package."""
    found: set[str] = set()

    class Imports(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            if getattr(test, "id", None) == "TYPE_CHECKING" \
                    or getattr(test, "attr", None) == "TYPE_CHECKING":
                for child in node.orelse:
                    self.visit(child)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(alias.name for alias in node.names if alias.name in known)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.level or not node.module:
                return
            subs = {f"{node.module}.{alias.name}" for alias in node.names} & known
            if subs:
                found.update(subs)
            elif node.module in known:
                found.add(node.module)

    Imports().visit(tree)
    return found


def test_no_module_imports_another_of_its_package_in_a_circle():
    """Within a package the modules read bottom-up too: no circle of run-time imports (a
    module that needs another's type only for annotations imports it under
    ``TYPE_CHECKING``)."""
    modules = {_module_name(path): path for package in _packages() if package != "bench"
               for path in _sources(package)}
    known = set(modules)
    edges = {name: _runtime_imports(ast.parse(path.read_text()), known) - {name}
             for name, path in modules.items()}
    state: dict[str, str] = {}
    circles: list[str] = []

    def visit(node: str, trail: list[str]) -> None:  # bounded: each module is opened once
        state[node] = "open"
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                circles.append(" -> ".join(trail[trail.index(nxt):] + [node, nxt])
                               if nxt in trail else f"{node} -> {nxt}")
            elif nxt not in state:
                visit(nxt, trail + [node])
        state[node] = "done"

    for name in sorted(edges):
        if name not in state:
            visit(name, [])
    assert not circles, "import circles:\n" + "\n".join(circles)
