"""``saga-worker db prune``: a dry run unless --yes, an archive written first, stubs that refuse their id."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from saga_worker import RunPrunedError, open_journal, run_durable
from saga_worker.cli import main
from saga_worker.contrib.demo import TOOLS, order_planner
from saga_worker.settings import get_settings
from tests.reads import run_of


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in ("SAGA_JOURNAL_URL", "SAGA_BROKER_URL", "SAGA_RESULT_BACKEND", "SAGA_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SAGA_HOME", str(tmp_path / ".saga"))
    monkeypatch.setenv("SAGA_TOOLS", "saga_worker.demo:TOOLS")
    get_settings.cache_clear()
    yield tmp_path / ".saga"
    get_settings.cache_clear()


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False, env={"COLUMNS": "200"})
    return result.exit_code, result.output


def place(*run_ids: str) -> None:
    with open_journal(get_settings().resolved_journal_url(), create=True) as journal:
        for run_id in run_ids:
            run_durable(run_id, journal=journal, tools=TOOLS, planner=order_planner())


def test_prune_is_a_dry_run_without_yes_and_says_how_many(home: Path) -> None:
    place("order-1", "order-2")
    time.sleep(1.1)
    code, output = invoke("db", "prune", "--older-than", "1s")
    assert code == 0, output
    assert "dry run: 2 run(s)" in output and "order-1" in output and "add --yes to prune" in output
    code, output = invoke("db", "prune", "--older-than", "1s", "--json")
    assert json.loads(output)["would_prune"] == 2
    with open_journal(get_settings().resolved_journal_url()) as journal:
        assert not run_of(journal, "order-1").pruned


def test_prune_with_yes_archives_then_removes_and_the_id_is_refused_after(home: Path, tmp_path: Path) -> None:
    place("order-1", "order-2")
    invoke("compensate", "order-2", "--local")
    time.sleep(1.1)
    place("order-new")
    archive = tmp_path / "pruned.jsonl"
    code, output = invoke("db", "prune", "--older-than", "1s", "--yes", "--archive", str(archive), "--json")
    assert code == 0, output
    summary = json.loads(output)
    assert (summary["pruned"], summary["condemned"], summary["archive"]) == (2, 1, str(archive))
    lines = [json.loads(line) for line in archive.read_text().splitlines()]
    assert sorted(line["run"]["run_id"] for line in lines) == ["order-1", "order-2"]
    with open_journal(get_settings().resolved_journal_url()) as journal:
        assert run_of(journal, "order-1").pruned and not run_of(journal, "order-new").pruned
        with pytest.raises(RunPrunedError):
            run_durable("order-1", journal=journal, tools=TOOLS, planner=order_planner())
    code, output = invoke("compensate", "order-1", "--local")
    assert code == 1 and "was pruned from the journal" in output


def test_prune_refuses_an_age_it_cannot_read(home: Path) -> None:
    place("order-1")
    code, output = invoke("db", "prune", "--older-than", "ninety days")
    assert code == 1 and "--older-than must be an age such as 90d" in output
