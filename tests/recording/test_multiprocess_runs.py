"""Real OS processes on one SQLite file and one PostgreSQL database (docs/reference/tools-and-runs.md).

Children are ``tests/procs/run_child.py``. Their tools apply effects to a ledger shared by every process
(tests/ledger.py) whose effect key is UNIQUE, as a provider deduplicates on the idempotency key; the
ledger's raw call log shows any second execution.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from saga_worker import (
    CallOptions,
    Journal,
    SideEffectRetryBlockedError,
    Tool,
    resume_run,
    run_durable,
    scripted,
)
from saga_worker.journal.records import RecordStatus, RunStatus
from tests.leases import lapse_execute_lease
from tests.ledger import Ledger, order_script
from tests.procs.run_child import EXIT_CODE, finish, run_tools, spawn

PLANNER = scripted(*order_script(), final="ok")

pytestmark = pytest.mark.backends("sqlite", "postgres")  # journals several processes share


def test_a_run_written_here_is_read_by_another_process(
    journal: Journal, journal_url: str, ledger: Ledger, run_id: str
) -> None:
    run_durable(run_id, journal=journal, tools=run_tools(ledger), planner=PLANNER, prompt="from the test")
    seen = finish(spawn(journal_url, ledger.scope, run_id, mode="show"))
    assert seen["run"] == {"status": "finished", "prompt": "from the test", "text": "ok"}
    assert seen["decisions"] == journal.list_decisions(run_id)
    assert [(r["suffix"], r["status"], r["seq"]) for r in seen["records"]] == [
        (r.suffix, r.status.value, r.seq) for r in journal.list_records(run_id)
    ]


def test_a_run_written_by_another_process_is_read_here(
    journal: Journal, journal_url: str, ledger: Ledger, run_id: str
) -> None:
    assert finish(spawn(journal_url, ledger.scope, run_id))["status"] == "finished"
    run = journal.get_run(run_id)
    assert run is not None and run.status is RunStatus.FINISHED and run.prompt == "sample order"
    assert [r.suffix for r in journal.list_records(run_id, [RecordStatus.SUCCEEDED])] == [
        "call-1",
        "call-2",
        "call-3",
    ]
    assert ledger.effect_counts() == {f"{run_id}:call-{n}": 1 for n in (1, 2, 3)}


@pytest.mark.parametrize("flavour", ["plain", "recover", "idempotent"])
def test_processes_running_the_same_run_at_once_execute_each_call_once(
    journal: Journal, journal_url: str, ledger: Ledger, run_id: str, tmp_path: Path, flavour: str
) -> None:
    start = tmp_path / "go"
    children = [
        spawn(journal_url, ledger.scope, run_id, pause=0.05, start_file=start, flavour=flavour)
        for _ in range(3)
    ]
    start.touch()
    statuses = sorted(finish(child)["status"] for child in children)
    # A process that meets a call a live rival is executing waits for it and replays its outcome: the
    # record's execution guard tells a live rival from a dead one, so recover is never asked mid-flight.
    assert statuses == ["finished"] * 3
    keys = [f"{run_id}:call-{n}" for n in (1, 2, 3)]
    assert ledger.call_counts() == {k: 1 for k in keys}  # every execute ran exactly once, in one process
    assert ledger.effect_counts() == {k: 1 for k in keys}
    run = journal.get_run(run_id)
    assert run is not None and run.status is RunStatus.FINISHED
    assert [r.status for r in journal.list_records(run_id)] == [RecordStatus.SUCCEEDED] * 3
    assert len(journal.list_decisions(run_id)) == 4


def crash_child(journal: Journal, url: str, ledger: Ledger, run_id: str, when: str) -> None:
    """A child killed with os._exit inside the execute of ``reserve`` (call-2)."""
    assert finish(spawn(url, ledger.scope, run_id, mode="crash", crash_when=when), expect=EXIT_CODE) == {}
    records = {r.suffix: r for r in journal.list_records(run_id)}
    assert records["call-1"].status is RecordStatus.SUCCEEDED
    assert records["call-2"].status is RecordStatus.RUNNING and "call-3" not in records
    run = journal.get_run(run_id)
    assert run is not None and run.status is RunStatus.RUNNING
    with journal.execution_guard(run_id, "call-2", wait=5.0) as free:
        assert free  # the dead process's guard went with it
    lapse_execute_lease(journal, run_id, "call-2")  # and its lease with it, as SAGA_CLAIM_TTL would


def test_a_process_killed_inside_execute_leaves_a_running_record_that_resume_refuses_to_repeat(
    journal: Journal, journal_url: str, ledger: Ledger, run_id: str
) -> None:
    crash_child(journal, journal_url, ledger, run_id, "after")
    before = journal.get_record(run_id, "call-2")
    with pytest.raises(SideEffectRetryBlockedError, match="call-2"):
        resume_run(run_id, journal=journal, tools=run_tools(ledger), planner=PLANNER)
    assert journal.get_record(run_id, "call-2") == before
    assert ledger.call_counts("execute:reserve") == {f"{run_id}:call-2": 1}


@pytest.mark.parametrize("when, executed_again", [("before", True), ("after", False)])
def test_resume_asks_recover_about_the_call_a_killed_process_left_running(
    journal: Journal, journal_url: str, ledger: Ledger, run_id: str, when: str, executed_again: bool
) -> None:
    crash_child(journal, journal_url, ledger, run_id, when)
    result = resume_run(run_id, journal=journal, tools=run_tools(ledger, recover=True), planner=PLANNER)
    assert result.status == "finished"
    key = f"{run_id}:call-2"
    assert ledger.call_counts("recover:reserve") == {key: 1}
    [execution] = ledger.calls("execute:reserve")  # once in all: in this process or in the killed one
    assert execution.key == key and (execution.pid == os.getpid()) is executed_again
    assert ledger.effect_counts() == {f"{run_id}:call-{n}": 1 for n in (1, 2, 3)}
    record = journal.get_record(run_id, "call-2")
    assert record is not None and record.status is RecordStatus.SUCCEEDED
    if executed_again:  # the effect never reached the provider: executed now, with the same key
        assert record.attempts == 2 and record.output == {"id": "reserve-call-2"}
    else:  # it did: recorded as succeeded from recover, not executed
        assert record.attempts == 1 and record.output == {"id": "reserve-call-2", "recovered": True}


def test_resume_executes_an_idempotent_tool_a_killed_process_left_running_again_with_the_same_key(
    journal: Journal, journal_url: str, ledger: Ledger, run_id: str
) -> None:
    crash_child(journal, journal_url, ledger, run_id, "after")
    seen: list[str] = []
    tools = run_tools(ledger, idempotent=True)
    inner = tools["reserve"].execute

    def reserve(input: object, opts: CallOptions) -> object:
        seen.append(opts.idempotency_key)
        return inner(input, opts)

    tools["reserve"] = Tool(reserve, idempotent=True)
    assert resume_run(run_id, journal=journal, tools=tools, planner=PLANNER).status == "finished"
    assert seen == [f"{run_id}:call-2"]
    # The provider saw the key twice and kept one effect: that is what idempotent=True promises.
    assert ledger.call_counts("execute:reserve") == {f"{run_id}:call-2": 2}
    assert ledger.effect_counts()[f"{run_id}:call-2"] == 1
