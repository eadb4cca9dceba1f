"""A ``saga()`` block in real OS processes on one SQLite file and one PostgreSQL database: the process
dies mid-block, the same code runs again in a new process, and the ledger (UNIQUE effect key, raw
call log) shows nothing happened twice."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from saga_worker import CompensationStatus, Journal, compensate_run
from saga_worker.journal.records import RecordStatus, RunStatus
from tests.leases import lapse_execute_lease
from tests.ledger import Ledger
from tests.procs.run_child import EXIT_CODE, ROOT, finish
from tests.reads import run_of

pytestmark = pytest.mark.backends("sqlite", "postgres")  # journals several processes share


def block(url: str, scope: str, run_id: str, *extra: str) -> subprocess.Popen[str]:
    argv = [
        sys.executable,
        "-m",
        "tests.procs.block_child",
        "--journal",
        url,
        "--scope",
        scope,
        "--run",
        run_id,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGA_FAULTS")}
    return subprocess.Popen(
        [*argv, *extra], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_a_block_killed_after_an_effect_runs_again_and_recovers_it_instead_of_executing_twice(
    journal: Journal, journal_url: str, ledger: Ledger, run_id: str
) -> None:
    crash = ["--crash-at", "reserve", "--crash-when", "after", "--flavour", "recover"]
    finish(block(journal_url, ledger.scope, run_id, *crash), expect=EXIT_CODE)
    assert [r.status for r in journal.list_records(run_id)] == [RecordStatus.SUCCEEDED, RecordStatus.RUNNING]
    lapse_execute_lease(journal, run_id, "call-2")  # the killed process renews it no more
    again: dict[str, Any] = finish(block(journal_url, ledger.scope, run_id, "--flavour", "recover"))
    assert again["status"] == "finished"
    assert again["outputs"][1] == {"id": "reserve-call-2", "recovered": True}
    keys = [f"{run_id}:call-{n}" for n in (1, 2, 3)]
    assert ledger.effect_counts("execute") == dict.fromkeys(keys, 1)
    assert ledger.call_counts("execute") == dict.fromkeys(keys, 1)  # raw: no second attempt anywhere
    assert run_of(journal, run_id).status is RunStatus.FINISHED


def test_a_block_killed_mid_call_without_recover_is_blocked_on_rerun_and_its_unwind_says_uncertain(
    journal: Journal, journal_url: str, ledger: Ledger, run_id: str
) -> None:
    finish(block(journal_url, ledger.scope, run_id, "--crash-at", "reserve"), expect=EXIT_CODE)
    lapse_execute_lease(journal, run_id, "call-2")  # the killed process renews it no more
    again = finish(block(journal_url, ledger.scope, run_id))
    assert again["status"] == "blocked"
    assert ledger.call_counts("entered:reserve") == {f"{run_id}:call-2": 1}
    report = compensate_run(run_id, journal=journal)
    assert [(e.tool_name, e.status) for e in report.entries] == [
        ("reserve", CompensationStatus.UNCERTAIN),
        ("charge", CompensationStatus.SKIPPED_NO_HOOK),
    ]
