"""A run that has ended (finished or failed) accepts no new call (issue 21, item 4), on every journal:
checked in the same atomic step as the claim, so a call racing the run's end is either the run's
(claimed before the end) or refused with ``RunEndedError`` naming the run and its status, with
nothing executed, no record and no decision written after the end.

The three ways in: a ``saga()`` handle used after its block ended, a nested block on the same run
that ends it while the outer one goes on, and another process ending the run while a block is
still inside; plus the end landing inside the window between a call's checks and its claim."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from saga_worker import (
    Journal,
    RunEndedError,
    ToolCall,
    compensate_run,
    open_journal,
    run_durable,
    saga,
    scripted,
)
from saga_worker.core import faults
from saga_worker.journal.records import RunStatus
from tests.ledger import Ledger, order_tools
from tests.reads import run_of


@pytest.fixture
def other_process_journal(journal: Journal, journal_url: str) -> Iterator[Journal]:
    """The journal as another process sees it: its own connections (the same object for memory://)."""
    if journal_url.startswith("memory"):
        yield journal
        return
    other = open_journal(journal_url)
    yield other
    other.close()


def refused(error: pytest.ExceptionInfo[RunEndedError], run_id: str, status: str) -> None:
    assert error.value.detail == {"run_id": run_id, "status": status}
    assert run_id in str(error.value) and f"({status})" in str(error.value)


def ended_with_nothing_after(journal: Journal, ledger: Ledger, run_id: str, executed: list[str]) -> None:
    """The run still reads as it ended, no decision follows its finish, and its unwind holds
    exactly the calls that executed before the end."""
    run = journal.get_run(run_id)
    assert run is not None and run.status is RunStatus.FINISHED
    kinds = [d["kind"] for d in journal.list_decisions(run_id)]
    assert kinds[-1] == "finish" and kinds.count("finish") == 1, kinds
    assert sorted(ledger.call_counts("execute")) == sorted(f"{run_id}:{c}" for c in executed)
    report = compensate_run(run_id, journal=journal, tools=order_tools(ledger))
    assert sorted(e.tool_call_id for e in report.entries) == sorted(executed)


def test_a_saga_handle_used_after_its_block_ended_is_refused_and_executes_nothing(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    tools = order_tools(ledger)
    with saga(run_id, journal=journal, tools=tools) as run:
        run.call("charge", {"amount": 10})
    with pytest.raises(RunEndedError) as error:
        run.call("reserve", {"sku": "A1"})
    refused(error, run_id, "finished")
    assert journal.get_record(run_id, "call-2") is None
    ended_with_nothing_after(journal, ledger, run_id, ["call-1"])


def test_a_nested_block_that_ends_the_run_stops_the_outer_block_from_calling(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    tools = order_tools(ledger)
    with saga(run_id, journal=journal, tools=tools) as outer:
        outer.call("charge", {"amount": 10}, id="charge")
        with saga(run_id, journal=journal, tools=tools) as inner:
            inner.call("reserve", {"sku": "A1"}, id="reserve")
        with pytest.raises(RunEndedError) as error:
            outer.call("notify", {"to": "c@example.com"}, id="notify")
    refused(error, run_id, "finished")
    assert outer.result is not None and outer.result.status == "finished"
    ended_with_nothing_after(journal, ledger, run_id, ["charge", "reserve"])


def test_a_run_ended_by_another_process_while_a_block_is_inside_takes_no_new_call(
    journal: Journal, other_process_journal: Journal, ledger: Ledger, run_id: str
) -> None:
    tools = order_tools(ledger)
    with saga(run_id, journal=journal, tools=tools) as b:
        b.call("charge", {"amount": 10}, id="charge")
        with saga(run_id, journal=other_process_journal, tools=tools) as a:  # process A: a forward task
            a.call("reserve", {"sku": "A1"}, id="reserve")
        with pytest.raises(RunEndedError) as error:
            b.call("notify", {"to": "c@example.com"}, id="notify")
    refused(error, run_id, "finished")
    ended_with_nothing_after(journal, ledger, run_id, ["charge", "reserve"])


@pytest.fixture
def end_inside_the_window(journal: Journal) -> Iterator[Any]:
    """Arms ``before_gate`` (between a call's checks and its claim) to end the run there."""
    was_enabled = faults.enabled()
    faults.enable()

    def arm(run_id: str, status: RunStatus) -> Any:
        return faults.calling(
            "before_gate", lambda name, key: journal.end_run(run_id, status, "", None), times=1
        )

    yield arm
    if not was_enabled:
        faults.disable()


@pytest.mark.parametrize("status", [RunStatus.FINISHED, RunStatus.FAILED])
def test_a_run_that_ends_between_a_calls_checks_and_its_claim_refuses_the_call(
    journal: Journal, ledger: Ledger, run_id: str, end_inside_the_window: Any, status: RunStatus
) -> None:
    tools = order_tools(ledger)
    with saga(run_id, journal=journal, tools=tools) as run:
        run.call("charge", {"amount": 10})
        with end_inside_the_window(run_id, status), pytest.raises(RunEndedError) as error:
            run.call("reserve", {"sku": "A1"})
    refused(error, run_id, status.value)
    assert journal.get_record(run_id, "call-2") is None
    assert ledger.call_counts("execute") == {f"{run_id}:call-1": 1}
    assert run_of(journal, run_id).status is status


def test_a_scripted_run_ended_inside_the_window_executes_nothing_more(
    journal: Journal, ledger: Ledger, run_id: str, end_inside_the_window: Any
) -> None:
    tools = order_tools(ledger)
    planner = scripted(ToolCall("charge", {"amount": 10}))
    with end_inside_the_window(run_id, RunStatus.FAILED), pytest.raises(RunEndedError) as error:
        run_durable(run_id, journal=journal, tools=tools, planner=planner)
    refused(error, run_id, "failed")
    assert ledger.call_counts("execute") == {}
    assert journal.list_records(run_id) == []
