"""The documentation is the project's own (issue 24): every page a file in the repository cites exists,
nothing cites the old out-of-tree contract, and every command and setting has its page."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from saga_worker.cli import main
from saga_worker.settings import SagaSettings

REPO = Path(__file__).resolve().parents[2]
CITED = re.compile(r"\bdocs/[\w./-]+?\.md\b")


def tracked_text_files() -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [REPO / n for n in names if n.endswith((".py", ".md", ".toml", ".yml", ".txt", ".cfg"))]


def test_every_docs_page_cited_in_code_tests_and_docs_exists() -> None:
    missing = []
    for path in tracked_text_files():
        if not path.exists():
            continue
        for cited in set(CITED.findall(path.read_text(errors="replace"))):
            if not (REPO / cited).is_file():
                missing.append(f"{path.relative_to(REPO)} cites {cited}")
    assert not missing, "\n".join(missing)


def test_nothing_cites_the_contract_outside_the_repository() -> None:
    outside = [
        str(p.relative_to(REPO))
        for p in tracked_text_files()
        if p.exists() and p.name != "test_docs_site.py" and "DESIGN.md" in p.read_text(errors="replace")
    ]
    assert not outside, f"these still cite DESIGN.md instead of docs/reference/: {outside}"


def test_every_command_has_a_page_generated_from_it() -> None:
    pages = {p.stem: p.read_text() for p in (REPO / "docs" / "cli").glob("*.md")}
    every = "\n".join(pages.values())
    nav = (REPO / "mkdocs.yml").read_text()
    for name in main.commands:
        assert f":prog_name: saga-worker {name}\n" in every, f"no page renders `saga-worker {name}`"
        page = next(stem for stem, text in pages.items() if f":prog_name: saga-worker {name}\n" in text)
        assert f"cli/{page}.md" in nav, f"docs/cli/{page}.md is not in mkdocs.yml's nav"


def test_every_setting_is_on_the_configuration_page() -> None:
    page = (REPO / "docs" / "reference" / "configuration.md").read_text()
    for field in SagaSettings.model_fields:
        assert f"SAGA_{field.upper()}" in page, (
            f"SAGA_{field.upper()} is not in docs/reference/configuration.md"
        )


def test_lists_in_the_docs_render_as_lists() -> None:
    """Python-Markdown (the site's renderer) reads a list only after a blank line, and a nested list
    only when it is indented by four spaces: GitHub is laxer, so text moved from the README breaks."""
    item = re.compile(r"^\s*([-*]|\d+\.) ")
    broken = []
    for page in sorted((REPO / "docs").rglob("*.md")):
        fenced = False
        previous = ""
        for number, line in enumerate(page.read_text().splitlines(), start=1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced and item.match(line):
                after_paragraph = previous.strip() and not item.match(previous) and previous[0] not in " |#<:"
                if after_paragraph or re.match(r"^ {1,3}([-*]|\d+\.) ", line):
                    broken.append(f"{page.relative_to(REPO)}:{number}: {line.strip()[:60]}")
            previous = line
    assert not broken, (
        "lists that will render as text (a blank line before, nest by 4 spaces):\n" + "\n".join(broken)
    )


def test_every_relative_link_of_the_markdown_outside_the_site_resolves_in_a_clone() -> None:
    """The site's own links are checked by `mkdocs build --strict`; these are the rest (README and co.)."""
    link = re.compile(r"\]\(([^)\s]+)\)")
    broken = []
    for path in tracked_text_files():
        if path.suffix != ".md" or not path.exists() or (REPO / "docs") in path.parents:
            continue
        for target in link.findall(path.read_text(errors="replace")):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a web address or an anchor on the same page
            if not (path.parent / target.split("#")[0]).exists():
                broken.append(f"{path.relative_to(REPO)} -> {target}")
    assert not broken, "links that do not resolve inside the repository:\n" + "\n".join(broken)
