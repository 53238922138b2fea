"""The package's layers point down: no module imports from a layer above its own.

Each layer may use the ones below it and its own; an import from above (even inside a function,
even under TYPE_CHECKING) is how a cycle starts and a module ends up doing two jobs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import django_ultjobs

PACKAGE = Path(django_ultjobs.__file__).parent

#: Bottom first. A module belongs to the first entry that is it or a package holding it.
LAYERS: list[tuple[str, ...]] = [
    # Plain Python: settings, errors, values and helpers that know nothing of the tables.
    ("exceptions", "conf", "core", "observability", "sql", "signals"),
    # The tables.
    ("models",),
    # The only code that writes SQL against them.
    ("store",),
    # Jobs: declaring, enqueueing and finding them.
    ("jobs",),
    # What a body sees while it runs.
    ("runtime",),
    # What runs jobs and acts on them.
    ("worker", "operations", "tasks_backend"),
    # What people and Django call: the admin, commands, middleware, checks, the app itself.
    ("admin", "management", "middleware", "checks", "templatetags", "apps", "__init__",
     "testing"),
]


def _layer(module: str) -> int:
    """The layer of ``module`` (a dotted path inside the package, "" for the package)."""
    head = module.split(".")[0] or "__init__"
    for index, names in enumerate(LAYERS):
        if head in names:
            return index
    raise AssertionError(f"django_ultjobs.{module} is in no layer: add it to LAYERS")


def _imports(path: Path) -> list[tuple[str, int]]:
    """The package modules ``path`` imports (dotted, relative to the package), with lines."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    package = parts[:-1]  # the package a relative import starts from
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif (node.module or "").startswith("django_ultjobs"):
                target = node.module.removeprefix("django_ultjobs").lstrip(".")  # type: ignore[union-attr]
            else:
                continue
            found += [(target or alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name.removeprefix("django_ultjobs").lstrip("."), node.lineno)
                      for alias in node.names if alias.name.startswith("django_ultjobs")]
    return found


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "migrations":
            continue
        module = ".".join(relative.with_suffix("").parts).removesuffix("__init__").rstrip(".")
        for target, line in _imports(path):
            if _layer(target) > _layer(module):
                upward.append(f"{relative}:{line} imports {target}")
    assert upward == []


def test_every_module_has_a_layer() -> None:
    for path in PACKAGE.rglob("*.py"):
        if "migrations" not in path.parts:
            _layer(".".join(path.relative_to(PACKAGE).with_suffix("").parts))
