"""The package's layers point down, and no module imports itself back through others.

Each layer may use the ones below it and its own; an import from above (even inside a function,
even under TYPE_CHECKING) is how a cycle starts and a module ends up doing two jobs. Within a
layer, modules may use each other, but never in a circle: every import counts, at module level,
under TYPE_CHECKING or inside a function (deferring an import hides a circle from Python, not
from the reader).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import django_ultjobs

PACKAGE = Path(django_ultjobs.__file__).parent

#: Bottom first. A module belongs to the first entry that is it or a package holding it.
LAYERS: list[tuple[str, ...]] = [
    # Settings, errors, signals, the named queries; plain helpers that know nothing of the
    # tables (core); what the package tells the outside (observability).
    ("exceptions", "conf", "signals", "sql", "core", "observability"),
    # The tables.
    ("models",),
    # The only code that writes SQL against them.
    ("store",),
    # Declaring jobs, enqueueing and finding them.
    ("jobs",),
    # What a body sees while it runs.
    ("runtime",),
    # What runs jobs and acts on them.
    ("worker", "operations", "tasks_backend", "queue_stats"),
    # What people and Django call: the admin, commands, middleware, checks, the app itself.
    ("admin", "management", "middleware", "checks", "templatetags", "apps", "__init__",
     "testing", "views", "urls"),
]


def _layer(module: str) -> int:
    """The layer of ``module`` (a dotted path inside the package, "" for the package)."""
    head = module.split(".")[0] or "__init__"
    for index, names in enumerate(LAYERS):
        if head in names:
            return index
    raise AssertionError(f"django_ultjobs.{module} is in no layer: add it to LAYERS")


def _modules() -> dict[str, Path]:
    """Every module of the package but its migrations, by dotted path ("" for the package)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] != "migrations":
            dotted = ".".join(relative.with_suffix("").parts)
            found[dotted.removesuffix("__init__").rstrip(".")] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> Iterator[tuple[str, int]]:
    """The package modules ``path`` imports (dotted, relative to the package), with lines: the
    module itself for ``from .pkg import module``, the package for ``from .pkg import name``."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    package = parts[:-1]  # the package a relative import starts from
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("django_ultjobs"):
                target = node.module.removeprefix("django_ultjobs").lstrip(".")  # type: ignore[union-attr]
            else:
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}".lstrip(".")
                yield (submodule if submodule in MODULES else target), node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("django_ultjobs"):
                    yield alias.name.removeprefix("django_ultjobs").lstrip("."), node.lineno


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    upward = []
    for module, path in MODULES.items():
        for target, line in _imports(path):
            if _layer(target) > _layer(module):
                upward.append(f"{path.relative_to(PACKAGE)}:{line} imports {target}")
    assert upward == []


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        _layer(module)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected components of more than one
    module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_among_the_modules() -> None:
    graph = {module: {target for target, _ in _imports(path) if target != module}
             for module, path in MODULES.items()}
    assert _cycles(graph) == []


def test_the_cycle_check_counts_every_kind_of_import() -> None:
    # A circle closed by a deferred import is still a circle.
    graph = {"jobs.spec": {"jobs.enqueue", "core"}, "jobs.enqueue": {"jobs.spec"}, "core": set()}
    assert _cycles(graph) == [["jobs.enqueue", "jobs.spec"]]
    # apps imports checks inside ready(), the package imports the registry under TYPE_CHECKING.
    assert "checks" in {target for target, _ in _imports(MODULES["apps"])}
    assert "jobs.registry" in {target for target, _ in _imports(MODULES[""])}


#: A module a reader takes in at once; past this, it is doing two jobs.
MAX_MODULE_LINES = 600
#: The modules beside the subpackages at the package root, ``__init__`` included.
MAX_ROOT_MODULES = 12


def test_no_module_is_over_600_lines() -> None:
    long = {str(path.relative_to(PACKAGE)): lines for path in MODULES.values()
            if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_at_most_12_modules_at_the_package_root() -> None:
    root = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, root


def _private_imports(source: str, where: str) -> Iterator[str]:
    """The private names (``_x``) ``source`` imports from other modules of the package."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (
                node.level or (node.module or "").startswith("django_ultjobs")):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    yield f"{where}:{node.lineno} imports {alias.name}"


def test_no_private_name_is_imported_across_modules() -> None:
    found = [line for path in MODULES.values()
             for line in _private_imports(path.read_text(), str(path.relative_to(PACKAGE)))]
    assert found == []


def test_the_private_import_check_sees_one_under_type_checking() -> None:
    source = ("from typing import TYPE_CHECKING\nfrom os import _exit\n"
              "from .runs import Public\nif TYPE_CHECKING:\n"
              "    from django_ultjobs.worker.runs import _Private\n")
    assert list(_private_imports(source, "x.py")) == ["x.py:5 imports _Private"]
