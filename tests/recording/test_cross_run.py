"""The cross-run idempotency window (docs/reference/approvals.md), on every journal: identical calls of any runs
within the window share one execution, keyed ``"{tool_name}:{hash16}"``; each run holds a mirror that
no unwind touches; after the window an identical call executes anew."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from saga_worker import (
    CallOptions,
    InvalidInputError,
    Journal,
    RecoverResult,
    Tool,
    ToolCall,
    compensate_run,
    resume_run,
    run_durable,
    saga,
    scripted,
)
from saga_worker.core.keys import hash16
from saga_worker.journal.records import RecordStatus
from saga_worker.journal.roles import RunJournal
from tests.ledger import Ledger, MemoryLedger, open_ledger
from tests.reads import record_of, shared_of

INPUT = {"to": "c@example.com", "template": "welcome"}
KEY = f"notify:{hash16(INPUT)}"


def cross_tools(ledger: Ledger, window_s: float = 60.0, pause: float = 0.0, **extra: Any) -> dict[str, Tool]:
    def notify(input: Any, opts: CallOptions) -> Any:
        time.sleep(pause)
        ledger.effect(opts.idempotency_key, "execute:notify")
        return {"sent": opts.run_id}

    def unnotify(input: Any, output: Any, opts: CallOptions) -> None:
        ledger.effect(opts.idempotency_key, "compensate:notify")

    def charge(input: Any, opts: CallOptions) -> Any:
        return {"charged": True}

    def refund(input: Any, output: Any, opts: CallOptions) -> None:
        ledger.effect(opts.idempotency_key, "compensate:charge")

    return {
        "notify": Tool(notify, unnotify, idempotency="cross-run", window_s=window_s, **extra),
        "charge": Tool(charge, refund),
    }


def only_notify() -> Any:
    return scripted(ToolCall("notify", INPUT), final="sent")


def test_identical_calls_of_two_runs_in_the_window_share_one_execution(journal: Journal, run_id: str) -> None:
    ledger = MemoryLedger()
    tools = cross_tools(ledger)
    first = run_durable(run_id, journal=journal, tools=tools, planner=only_notify())
    second = run_durable(run_id + "-b", journal=journal, tools=tools, planner=only_notify())
    assert first.status == second.status == "finished"
    assert ledger.call_counts("execute:notify") == {KEY: 1}
    for rid in (run_id, run_id + "-b"):
        mirror = journal.get_record(rid, "call-1")
        assert mirror is not None and mirror.status is RecordStatus.MIRRORED
        assert mirror.shared_id == f"{KEY}:1"
    assert shared_of(journal, f"{KEY}:1").output == {"sent": run_id}


class RunRoleOnly:
    """A journal seen through ``RunJournal`` alone: any other method is out of reach, as it is for
    the modules typed against the role (mypy checks the annotations; this checks the calls)."""

    def __init__(self, journal: Journal) -> None:
        self._journal = journal
        self._role = {name for name in dir(RunJournal) if not name.startswith("_")}

    def __getattr__(self, name: str) -> Any:
        if name not in self._role:
            raise AttributeError(f"{name!r} is not a RunJournal method")
        return getattr(self._journal, name)


def test_runs_blocks_and_shared_executions_need_nothing_beyond_the_run_journal_role(
    journal: Journal, run_id: str
) -> None:
    ledger = MemoryLedger()
    tools = cross_tools(ledger)
    role: RunJournal = RunRoleOnly(journal)
    both = scripted(ToolCall("charge", {"amount": 1}), ToolCall("notify", INPUT))
    first = run_durable(run_id, journal=role, tools=tools, planner=both)
    replayed = resume_run(run_id, journal=role, tools=tools, planner=both)
    with saga(run_id + "-b", journal=role, tools=tools) as block:
        mirrored = block.call("notify", INPUT)
    assert (first.status, replayed.status, mirrored) == ("finished", "finished", {"sent": run_id})
    assert ledger.call_counts("execute:notify") == {KEY: 1}
    assert record_of(journal, run_id + "-b", "call-1").status is RecordStatus.MIRRORED


def test_mirrors_are_untouched_by_any_runs_unwind(journal: Journal, run_id: str) -> None:
    ledger = MemoryLedger()
    tools = cross_tools(ledger)
    run_durable(run_id, journal=journal, tools=tools, planner=only_notify())
    both = scripted(ToolCall("charge", {"amount": 1}), ToolCall("notify", INPUT))
    run_durable(run_id + "-b", journal=journal, tools=tools, planner=both)
    alone = compensate_run(run_id, journal=journal, tools=tools)
    assert alone.condemned and alone.entries == []
    mixed = compensate_run(run_id + "-b", journal=journal, tools=tools)
    assert [(e.suffix, e.status.value) for e in mixed.entries] == [("call-1", "compensated")]
    assert ledger.call_counts("compensate:notify") == {}
    assert ledger.call_counts("compensate:charge") == {f"{run_id}-b:comp:call-1": 1}


def test_after_the_window_an_identical_call_executes_anew(journal: Journal, run_id: str) -> None:
    ledger = MemoryLedger()
    tools = cross_tools(ledger, window_s=0.3)
    run_durable(run_id, journal=journal, tools=tools, planner=only_notify())
    time.sleep(0.4)
    run_durable(run_id + "-b", journal=journal, tools=tools, planner=only_notify())
    assert ledger.call_counts("execute:notify") == {KEY: 2}  # the key is the shared one both times
    assert record_of(journal, run_id + "-b", "call-1").shared_id == f"{KEY}:2"


def test_two_runs_racing_on_one_shared_call_execute_it_once(
    journal: Journal, journal_url: str, run_id: str
) -> None:
    ledger = open_ledger(journal_url)
    try:
        tools = cross_tools(ledger, pause=0.3)
        barrier = threading.Barrier(3)
        results: dict[str, Any] = {}

        def run(rid: str) -> None:
            barrier.wait()
            results[rid] = run_durable(rid, journal=journal, tools=tools, planner=only_notify())

        threads = [threading.Thread(target=run, args=(f"{run_id}-{n}",)) for n in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r.status for r in results.values()] == ["finished"] * 3
        assert ledger.call_counts("execute:notify") == {KEY: 1}
    finally:
        ledger.close()


class Crash(BaseException):
    pass


def test_a_shared_execution_left_running_by_a_crash_is_recovered_not_run_twice(
    journal: Journal, run_id: str
) -> None:
    ledger = MemoryLedger()
    done: list[str] = []

    def crashing(input: Any, opts: CallOptions) -> Any:
        ledger.effect(opts.idempotency_key, "execute:notify")
        done.append(opts.idempotency_key)
        raise Crash  # the process dies after the effect, before the outcome is written

    def recover(input: Any, opts: CallOptions) -> RecoverResult:
        return RecoverResult(done=opts.idempotency_key in done, output={"sent": "recovered"})

    tool = Tool(crashing, recover=recover, idempotency="cross-run", window_s=60)
    with pytest.raises(Crash):
        run_durable(run_id, journal=journal, tools={"notify": tool}, planner=only_notify())
    healthy = cross_tools(ledger, recover=recover)
    other = run_durable(run_id + "-b", journal=journal, tools=healthy, planner=only_notify())
    assert other.status == "finished"
    resumed = resume_run(run_id, journal=journal, tools=healthy, planner=only_notify())
    assert resumed.status == "finished"
    assert ledger.call_counts("execute:notify") == {KEY: 1}
    assert shared_of(journal, f"{KEY}:1").output == {"sent": "recovered"}


def test_a_cross_run_tool_needs_a_window() -> None:
    with pytest.raises(InvalidInputError, match="window_s"):
        Tool(lambda i, o: None, idempotency="cross-run")
    with pytest.raises(InvalidInputError, match="window_s"):
        Tool(lambda i, o: None, window_s=5)
