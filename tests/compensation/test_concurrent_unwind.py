"""Two unwinders of one run at the same time, as threads (every journal) and as OS processes (SQLite,
PostgreSQL): each step is compensated exactly once, and each report tells the truth about its part."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from saga_worker import CompensationReport, Journal, compensate_run, open_journal, run_durable, scripted
from tests.ledger import Ledger, open_ledger, order_script, order_tools
from tests.procs.unwind_child import result_of, spawn

STEPS = {"charge": "call-1", "reserve": "call-2", "notify": "call-3"}
HONEST = {"compensated", "already-compensated", "busy", "not-attempted"}


def comp_keys(run_id: str) -> set[str]:
    return {f"{run_id}:comp:{call_id}" for call_id in STEPS.values()}


def assert_each_step_compensated_exactly_once(
    reports: list[dict[str, Any]], ledger: Ledger, run_id: str
) -> None:
    keys = comp_keys(run_id)
    assert ledger.effect_counts("compensate") == dict.fromkeys(keys, 1)
    assert ledger.call_counts("compensate") == dict.fromkeys(keys, 1)
    for report in reports:
        assert [e["tool_name"] for e in report["entries"]] == ["notify", "reserve", "charge"]
        assert {e["status"] for e in report["entries"]} <= HONEST, report
        statuses = [e["status"] for e in report["entries"]]
        if "busy" in statuses:  # a busy step halts the unwind: nothing after it was attempted
            after = statuses[statuses.index("busy") + 1 :]
            assert set(after) <= {"not-attempted"}, statuses
    for suffix in STEPS.values():
        done = [
            r for r in reports for e in r["entries"] if e["suffix"] == suffix and e["status"] == "compensated"
        ]
        assert len(done) == 1, f"{suffix} reported compensated by {len(done)} unwinders"


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def test_two_threads_unwinding_one_run_compensate_each_step_exactly_once(
    journal: Journal, run_id: str, stack: ExitStack
) -> None:
    ledger = stack.enter_context(open_ledger(journal.url))
    tools = order_tools(ledger, before_compensate=lambda *_: time.sleep(0.05))
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order_script()))
    start = threading.Barrier(2)
    reports: list[CompensationReport] = []
    errors: list[BaseException] = []

    def unwinder() -> None:
        try:
            start.wait(timeout=30)
            reports.append(compensate_run(run_id, journal=journal, tools=tools))
        except BaseException as exc:  # handed to the test's thread below
            errors.append(exc)

    threads = [threading.Thread(target=unwinder) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert errors == [] and len(reports) == 2
    assert_each_step_compensated_exactly_once([r.model_dump(mode="json") for r in reports], ledger, run_id)
    final = compensate_run(run_id, journal=journal, tools=tools)
    assert [e.status.value for e in final.entries] == ["already-compensated"] * 3


def test_two_processes_unwinding_one_run_compensate_each_step_exactly_once(
    shared_journal_url: str, run_id: str, tmp_path: Path, stack: ExitStack
) -> None:
    journal_ = stack.enter_context(open_journal(shared_journal_url, migrate=True))
    ledger = stack.enter_context(open_ledger(shared_journal_url))
    run_durable(run_id, journal=journal_, tools=order_tools(ledger), planner=scripted(*order_script()))
    go = tmp_path / "go"
    children = [spawn(shared_journal_url, ledger.scope, run_id, pause=0.1, start_file=go) for _ in range(2)]
    time.sleep(0.5)  # let both import and open the journal; the unwind itself starts on the file
    go.touch()
    results = [result_of(c) for c in children]

    reports = [r["report"] for r in results]
    assert_each_step_compensated_exactly_once(reports, ledger, run_id)
    by_pid = {c.key: c.pid for c in ledger.effects()}
    for result in results:  # a step a process reports compensated was undone by that very process
        for e in result["report"]["entries"]:
            if e["status"] == "compensated":
                assert by_pid[e["idempotency_key"]] == result["pid"]
    final = compensate_run(run_id, journal=journal_, tools=order_tools(ledger))
    assert [e.status.value for e in final.entries] == ["already-compensated"] * 3
