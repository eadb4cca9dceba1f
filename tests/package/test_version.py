"""The version has one source, pyproject.toml: the package and the CLI report what it says."""

from __future__ import annotations

import tomllib
from pathlib import Path

from click.testing import CliRunner

import saga_worker
from saga_worker.cli import main

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_package_and_cli_report_the_version_pyproject_declares() -> None:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    assert saga_worker.__version__ == declared
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and declared in result.output


def test_the_changelog_has_a_section_for_the_declared_version() -> None:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    changelog = (PYPROJECT.parent / "CHANGELOG.md").read_text()
    assert f"## [{declared}]" in changelog
