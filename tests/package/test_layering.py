"""The package's imports run one way: no module imports, directly or through others, a module that
imports it back (DEVELOPING.md, "Layers"). Every import counts, a function's own and those under
``if TYPE_CHECKING:`` too, as read from the source with ``ast``. And no test module imports another:
what tests share lives in a conftest or a helper module, so each test runs where it is defined."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.package.imports import NAME, PACKAGE, import_graph

TESTS = Path(__file__).resolve().parents[1]


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def _described(group: list[str], graph: dict[str, dict[str, int]]) -> str:
    ties = [
        f"  {a} -> {b} (line {line})" for a in group for b, line in sorted(graph[a].items()) if b in group
    ]
    return f"{len(group)} modules import each other:\n" + "\n".join(ties)


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    graph = import_graph(PACKAGE)
    assert [_described(group, graph) for group in cycles(graph)] == []


def test_the_checker_sees_a_cycle_through_a_lazy_import(tmp_path: Path) -> None:
    package = tmp_path / NAME
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from .high import g\n    return g\n")
    (package / "high.py").write_text("from . import low\n\ndef g():\n    return low\n")
    assert cycles(import_graph(package)) == [[f"{NAME}.high", f"{NAME}.low"]]


def imports_of_test_modules(tests: Path) -> list[str]:
    """Each ``path:line -> tests.x.test_y`` where a module under ``tests`` imports a test module."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        here = list(path.relative_to(tests.parent).with_suffix("").parts)[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                # ``from tests.x import test_y`` names a module; ``from tests.x.test_y import f`` its module
                wanted = [module] + [f"{module}.{alias.name}" for alias in node.names]
            else:
                continue
            named = [
                n for n in wanted if n.split(".")[0] == tests.name and n.split(".")[-1].startswith("test_")
            ]
            if named:
                found.append(f"{path.relative_to(tests.parent)}:{node.lineno} -> {named[0]}")
    return found


def test_no_test_module_imports_another() -> None:
    assert imports_of_test_modules(TESTS) == []


def test_the_checker_sees_a_test_module_imported_by_its_name_or_from(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    (tests / "area").mkdir(parents=True)
    (tests / "area" / "test_a.py").write_text("def test_a():\n    pass\n")
    (tests / "area" / "test_b.py").write_text("from .test_a import test_a\n")
    (tests / "test_c.py").write_text("from tests.area import test_a\nimport tests.area.helpers\n")
    assert imports_of_test_modules(tests) == [
        "tests/area/test_b.py:1 -> tests.area.test_a",
        "tests/test_c.py:1 -> tests.area.test_a",
    ]
