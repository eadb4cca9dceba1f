"""Bulk ``compensate``, ``redrive`` and ``approve-compensation``: filters combined, a dry run first,
``--yes`` to act, and a run again that resumes a bulk action killed midway, doing nothing twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from saga_worker import ToolCall, compensate_run, open_journal, run_durable, scripted
from saga_worker.cli import main
from saga_worker.journal.records import UnwindState
from saga_worker.settings import get_settings
from tests.cli import bulk_tools
from tests.ledger import Call, open_ledger
from tests.reads import run_of

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    for name in ("SAGA_BROKER_URL", "SAGA_RESULT_BACKEND", "SAGA_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    values = {
        "SAGA_HOME": str(tmp_path / ".saga"),
        "SAGA_JOURNAL_URL": f"sqlite:///{tmp_path / 'journal.db'}",
        "SAGA_TOOLS": "tests.cli.bulk_tools:TOOLS",
        "SAGA_TEST_LEDGER_SCOPE": uuid.uuid4().hex[:12],
        "SAGA_CLAIM_TTL": "1",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    bulk_tools.ledger.cache_clear()
    yield values
    get_settings.cache_clear()
    bulk_tools.ledger.cache_clear()


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False, env={"COLUMNS": "200"})
    return result.exit_code, result.output


def place(run_id: str, *tools: str) -> None:
    with open_journal(get_settings().resolved_journal_url(), create=True) as journal:
        script = scripted(*(ToolCall(t, {"n": n}) for n, t in enumerate(tools)), final="done")
        run_durable(run_id, journal=journal, tools=bulk_tools.TOOLS, planner=script)


def condemned(*run_ids: str) -> list[bool]:
    with open_journal(get_settings().resolved_journal_url()) as journal:
        return [run_of(journal, r).condemned for r in run_ids]


def test_filters_combine_and_the_dry_run_says_what_would_be_done_and_does_nothing(
    env: dict[str, str],
) -> None:
    place("eu-1", "charge", "ship")
    place("eu-2", "charge")
    place("us-1", "charge", "ship")
    place("eu-old", "charge", "ship")
    code, output = invoke("compensate", "--run-prefix", "eu-", "--tool", "ship", "--json")
    assert code == 0, output
    plan = json.loads(output)
    assert plan["dry_run"] is True and plan["would_do"] == 2
    assert sorted(r["run_id"] for r in plan["runs"]) == ["eu-1", "eu-old"]
    code, output = invoke("compensate", "--run-prefix", "eu-", "--older-than", "1h")
    assert code == 0 and "would act on 0 run(s)" in output
    code, output = invoke("compensate", "--status", "finished", "--run-prefix", "us-")
    assert "would act on 1 run(s)" in output and "us-1" in output and "add --yes to act" in output
    assert condemned("eu-1", "eu-2", "us-1", "eu-old") == [False] * 4
    code, output = invoke("compensate", "--status", "sideways")
    assert code == 1 and "neither a run status nor an unwind state" in output
    code, output = invoke("compensate")
    assert code == 2 and "name a run, or give filters" in output


def test_compensate_in_bulk_here_acts_with_yes_and_a_second_time_skips_what_was_done(
    env: dict[str, str],
) -> None:
    for n in range(3):
        place(f"batch-{n}", "charge", "ship")
    place("other-0", "charge")
    code, output = invoke("compensate", "--run-prefix", "batch-", "--local", "--yes", "--json")
    assert code == 0, output
    summary = json.loads(output)
    assert (summary["done"], summary["skipped"], summary["failed"]) == (3, 0, 0)
    assert condemned("batch-0", "batch-1", "batch-2", "other-0") == [True, True, True, False]
    code, output = invoke("compensate", "--run-prefix", "batch-", "--local", "--yes")
    assert code == 0 and "would" not in output and "0 done" in output
    code, output = invoke("compensate", "--run-prefix", "batch-", "--local")
    assert "would act on 0 run(s)" in output and "skipped 3: already condemned" in output


def test_a_bulk_compensate_killed_midway_resumes_and_does_nothing_twice(env: dict[str, str]) -> None:
    runs = [f"order-{n:02d}" for n in range(12)]
    for run_id in runs:
        place(run_id, "charge", "ship")
    command = [
        sys.executable,
        "-m",
        "saga_worker.cli",
        "compensate",
        "--run-prefix",
        "order-",
        "--local",
        "--yes",
    ]
    child_env = {**os.environ, **env, "SAGA_TEST_UNDO_S": "0.05", "PYTHONPATH": str(REPO)}
    ledger = open_ledger(env["SAGA_JOURNAL_URL"], env["SAGA_TEST_LEDGER_SCOPE"])

    def undone() -> list[Call]:
        return [c for c in ledger.effects() if c.what.startswith("compensate")]

    child = subprocess.Popen(command, cwd=REPO, env=child_env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while len(undone()) < 5 and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.01)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    assert 5 <= len(undone()) < 24, "the kill landed midway"

    time.sleep(1.1)  # a claim the killed process held runs out (SAGA_CLAIM_TTL=1)
    resumed = subprocess.run(
        [*command, "--json"], cwd=REPO, env=child_env, capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["done"] + summary["skipped"] <= 12 and summary["failed"] == 0

    assert condemned(*runs) == [True] * 12
    with open_journal(env["SAGA_JOURNAL_URL"]) as journal:
        assert {run_of(journal, r).unwind_state for r in runs} == {UnwindState.COMPLETE}
    executed = {c.key for c in ledger.effects() if c.what.startswith("execute")}
    assert len(executed) == 24 and len(undone()) == 24, (
        "every effect undone once (the provider dedupes by key)"
    )
    # A hook runs again only for the step the kill interrupted (same key: the provider refused it).
    calls = ledger.call_counts("compensate")
    assert set(calls) == {c.key for c in undone()}
    assert sum(n - 1 for n in calls.values()) <= 1, calls
    ledger.close()


def test_redrive_and_approve_compensation_in_bulk_act_on_what_waits_and_resume(env: dict[str, str]) -> None:
    for n in range(2):
        place(f"gated-{n}", "charge", "refund")
    place("plain-0", "charge")
    with open_journal(env["SAGA_JOURNAL_URL"]) as journal:
        for n in range(2):
            compensate_run(f"gated-{n}", journal=journal, tools=bulk_tools.TOOLS)
            assert run_of(journal, f"gated-{n}").unwind_state is UnwindState.AWAITING
    code, output = invoke("approve-compensation", "--status", "awaiting", "--tool", "refund", "--json")
    plan = json.loads(output)
    assert plan["would_do"] == 2 and all(len(r["steps"]) == 1 for r in plan["runs"])
    code, output = invoke("approve-compensation", "--status", "awaiting", "--yes", "--reason", "refunds ok")
    assert code == 0 and "2 done" in output, output
    code, output = invoke("approve-compensation", "--run-prefix", "gated-", "--json")
    assert json.loads(output)["would_do"] == 0
    with open_journal(env["SAGA_JOURNAL_URL"]) as journal:
        assert [a.action.value for a in journal.read_audit("gated-0")][-1] == "compensation-approved"
        assert run_of(journal, "gated-0").unwind_state is UnwindState.PENDING  # the sweeper goes on
    code, output = invoke("redrive", "--run-prefix", "gated-", "--json")
    assert json.loads(output)["would_do"] == 0 and json.loads(output)["skipped"]
