"""Every import goes down: a module imports, outside its own area, only areas on a lower floor of
DEVELOPING.md's "Layers" table (read from the page, so the table and this check cannot drift apart).
An area is a module at the package's root, a subpackage, or a folder inside one the table names
(``contrib/django/management/``); ``saga_worker/__init__.py`` is its own."""

from __future__ import annotations

import re
from pathlib import Path

from tests.package.imports import NAME, PACKAGE, import_graph

DEVELOPING = PACKAGE.parent / "DEVELOPING.md"
ROW = re.compile(r"^\| (\d+) \| (.+) \|$")


def floors(page: Path) -> dict[str, int]:
    """The "Layers" table: each area (``journal``, ``errors``, ``__init__``) -> its floor."""
    layers = page.read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    found: dict[str, int] = {}
    for line in layers.splitlines():
        row = ROW.match(line)
        if row is None:
            continue
        for cell in re.findall(r"`([A-Za-z_][\w/]*|[\w]+/__init__\.py)`", row.group(2)):
            name = "__init__" if cell == f"{NAME}/__init__.py" else cell.rstrip("/").replace("/", ".")
            found[name] = int(row.group(1))
    return found


def area(module: str, floor: dict[str, int] | None = None) -> str:
    """The module's area: the longest of the table's areas it is in (``contrib.django.management``
    before ``contrib``), else its first name under the package."""
    parts = module.split(".")[1:]
    if not parts:
        return "__init__"
    for cut in range(len(parts), 1, -1):
        if floor is not None and ".".join(parts[:cut]) in floor:
            return ".".join(parts[:cut])
    return parts[0]


def upward(graph: dict[str, dict[str, int]], floor: dict[str, int]) -> list[str]:
    """Each import from one area to another on the same or a higher floor, or from or to an area the
    table does not list."""
    found = []
    for module, targets in sorted(graph.items()):
        for target, line in sorted(targets.items()):
            here, there = area(module, floor), area(target, floor)
            if here == there:
                continue
            if here not in floor or there not in floor:
                found.append(
                    f"{module}:{line} -> {target}: {here if here not in floor else there} is in no row"
                )
            elif floor[there] >= floor[here]:
                found.append(f"{module}:{line} -> {target}: floor {floor[here]} imports floor {floor[there]}")
    return found


def test_the_table_lists_every_area_of_the_package_once() -> None:
    table = floors(DEVELOPING)
    assert {area(m, table) for m in import_graph(PACKAGE)} == set(table)


def test_every_import_goes_to_a_lower_floor() -> None:
    assert upward(import_graph(PACKAGE), floors(DEVELOPING)) == []


def test_the_checker_sees_an_import_on_the_same_floor_and_one_upward(tmp_path: Path) -> None:
    graph = {f"{NAME}.low": {f"{NAME}.high.x": 3}, f"{NAME}.high.x": {f"{NAME}.side": 5, f"{NAME}.low": 1}}
    floor = {"low": 1, "side": 2, "high": 2}
    assert upward(graph, floor) == [
        f"{NAME}.high.x:5 -> {NAME}.side: floor 2 imports floor 2",
        f"{NAME}.low:3 -> {NAME}.high.x: floor 1 imports floor 2",
    ]
    page = tmp_path / "DEVELOPING.md"
    page.write_text(
        f"## Layers\n\n| floor | areas |\n|---|---|\n| 1 | `low`, `{NAME}/__init__.py` |\n| 2 | `high/` |\n"
    )
    assert floors(page) == {"low": 1, "__init__": 1, "high": 2}
