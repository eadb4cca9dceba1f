"""The library stands alone: nothing under saga_worker/ imports the checkout's top-level ``tasks`` or
``config`` shims (the wheel installs only saga_worker, docs/reference/integration.md), by an import statement or by name."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "saga_worker"
SHIMS = ("tasks", "config")


def _imported_names(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names.append(node.args[0].value)
    return names


def test_no_library_module_imports_the_top_level_tasks_or_config_package() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}: {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name in _imported_names(ast.parse(path.read_text(), str(path)))
        if name.split(".")[0] in SHIMS
    ]
    assert offenders == []
