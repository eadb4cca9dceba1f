"""Every Python snippet in README.md and docs/ runs (issue 24).

A page's ```python blocks run in order, as one script, in a fresh folder, in a process of their own
(so a page's snippets see each other's names, as a reader pasting them would, and nothing leaks from
one page to the next). A block is marked on the line right before its fence:

- ``<!-- snippet: not-run (why) -->`` is not run: a signature, or code that needs what a test cannot
  have (an LLM). Kept few: the test counts them.
- ``<!-- snippet: celery-worker -->`` runs with a real embedded Celery worker (SQLite files in the
  page's folder, the same ``.saga/`` the snippets open) loading ``tests.package.docs_tools:TOOLS``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.conftest import Setup, Workers, make_setup

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)\s*$")
MARK = re.compile(r"^\s*<!-- snippet: (?P<kind>not-run|celery-worker)\b.*-->\s*$")
MAX_NOT_RUN = 13  # non-runnable fragments stay few; raise only with a reason (13: the Django ORM tool)


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    code: str
    mark: str | None


def blocks(page: Path) -> list[Block]:
    """The page's python blocks, with the mark on the line before each (if any)."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group("lang"):
            i += 1
            continue
        indent, lang, start = len(m.group("indent")), m.group("lang"), i
        body: list[str] = []
        i += 1
        while i < len(lines) and not FENCE.match(lines[i]):
            body.append(lines[i][indent:])
            i += 1
        i += 1
        if lang == "python":
            mark = MARK.match(lines[start - 1]) if start else None
            found.append(Block(page, start + 1, "\n".join(body) + "\n", mark and mark.group("kind")))
    return found


def runnable_pages() -> list[object]:
    """A page whose snippets need a worker is marked as the worker tests are (``-m "not celery"``)."""
    pages: list[object] = []
    for page in PAGES:
        marks = {b.mark for b in blocks(page)}
        if marks - {"not-run"}:
            worker = [pytest.mark.celery, pytest.mark.slow] if "celery-worker" in marks else []
            pages.append(pytest.param(page, marks=worker, id=str(page.relative_to(REPO))))
    return pages


def script(page: Path) -> str:
    parts = []
    for block in blocks(page):
        if block.mark == "not-run":
            continue
        rel = block.page.relative_to(REPO)
        # A line per block that names it, so a failure's traceback says which snippet broke.
        parts.append(f"# --- {rel}:{block.line}\n{block.code}")
    return "\n".join(parts)


def test_every_page_with_python_is_found_and_few_blocks_are_marked_not_runnable() -> None:
    every = [b for p in PAGES for b in blocks(p)]
    not_run = [f"{b.page.relative_to(REPO)}:{b.line}" for b in every if b.mark == "not-run"]
    assert len(every) > 20, "the snippet parser found almost nothing: has the fence syntax changed?"
    assert len(not_run) <= MAX_NOT_RUN, f"too many snippets marked not-run: {not_run}"


@pytest.mark.parametrize("page", runnable_pages())
def test_the_python_snippets_of_the_page_run(page: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGA_")}
    workers = Workers(tmp_path)
    try:
        if any(b.mark == "celery-worker" for b in blocks(page)):
            setup: Setup = make_setup(
                tmp_path, home=str(tmp_path / ".saga"), tools="tests.package.docs_tools:TOOLS"
            )
            workers.start(setup, beat=False, concurrency=1)
            env = setup.env()
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        source = tmp_path / "snippets.py"
        source.write_text(script(page))
        done = subprocess.run(
            [sys.executable, str(source)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=110
        )
    finally:
        workers.stop_all()
    assert done.returncode == 0, f"{page.relative_to(REPO)}'s snippets failed:\n{done.stdout}\n{done.stderr}"
