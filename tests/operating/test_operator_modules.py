"""The operator's side of the package (operating/, cli/, console/, contrib/) stays readable and
reaches no more of the journal than an operator does: no module over 600 lines, no function over 60
(as ``ast`` counts them), and every function that takes a journal takes ``OperatorJournal`` (or a
narrower part), except the modules that open the journal and hold it for the others."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.package.imports import PACKAGE

AREAS = ("operating", "cli", "console", "contrib")
MAX_MODULE, MAX_FUNCTION = 600, 60
# Each opens the journal (``open_journal``) and hands it out: the CLI to its commands, the Django
# integration to the admin and to the project's own code (``journal()``, which may run tools too).
OWNERS = {"cli/common.py", "contrib/django/__init__.py"}


def modules() -> list[Path]:
    return sorted(p for area in AREAS for p in (PACKAGE / area).rglob("*.py"))


def too_long(path: Path, root: Path = PACKAGE) -> list[str]:
    """The module, and each of its functions, that is over its limit, named with its length."""
    source = path.read_text()
    name = path.relative_to(root).as_posix()
    found = [f"{name}: {n} lines"] if (n := len(source.splitlines())) > MAX_MODULE else []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if (n := (node.end_lineno or node.lineno) - node.lineno + 1) > MAX_FUNCTION:
            found.append(f"{name}:{node.lineno} {node.name}: {n} lines")
    return found


def whole_journal_parameters(path: Path, root: Path = PACKAGE) -> list[str]:
    """Each parameter, and each function's return, annotated with the whole ``Journal``
    (``Journal``, ``x.Journal``, in a union)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = node.args
        annotated = [(a.arg, a.annotation) for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
        for what, annotation in [*annotated, ("return", node.returns)]:
            names = {
                n.id if isinstance(n, ast.Name) else n.attr
                for n in ast.walk(annotation or ast.Constant(None))
                if isinstance(n, ast.Name | ast.Attribute)
            }
            if "Journal" in names:
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {node.name}({what})")
    return found


def test_no_operator_module_is_over_600_lines_nor_a_function_over_60() -> None:
    assert [line for path in modules() for line in too_long(path)] == []


def test_the_operator_modules_take_the_operator_journal_not_the_whole_one() -> None:
    outside = [p for p in modules() if p.relative_to(PACKAGE).as_posix() not in OWNERS]
    assert [line for path in outside for line in whole_journal_parameters(path)] == []


def test_the_checks_see_a_long_module_a_long_function_and_a_whole_journal(tmp_path: Path) -> None:
    body = "\n".join(f"    x{n} = {n}" for n in range(61))
    long = tmp_path / "long.py"
    long.write_text(f"def f() -> None:\n{body}\n" + "\n" * 600)
    assert [line.split(": ", 1)[1] for line in too_long(long, tmp_path)] == ["662 lines", "62 lines"]
    typed = tmp_path / "typed.py"
    typed.write_text(
        "def f(journal: base.Journal | None, *, other: OperatorJournal) -> None: ...\n"
        "def g() -> Journal: ...\n"
    )
    found = whole_journal_parameters(typed, tmp_path)
    assert [line.split(" ", 1)[1] for line in found] == ["f(journal)", "g(return)"]
