"""The package's imports as read from its source with ``ast`` (every import: a function's own and
those under ``if TYPE_CHECKING:`` too), for the layering checks (test_layering.py, test_areas.py)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "saga_worker"
NAME = PACKAGE.name


def _modules(package: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` is, or the package it is a name of."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(package: Path) -> dict[str, dict[str, int]]:
    """Each module -> the package's modules it imports, with the line of the first import seen."""
    modules = _modules(package)
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                wanted = [f"{module}.{alias.name}" for alias in node.names]
            else:
                continue
            for each in wanted:
                target = _owner(each, modules) if each.split(".")[0] == NAME else None
                if target is not None and target != name:
                    targets.setdefault(target, node.lineno)
        graph[name] = targets
    return graph
