"""A condemned run refuses everything that would move it forward (docs/reference/compensation.md "A condemned run")."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from saga_worker import (
    CallOptions,
    CompensatedRunError,
    Finish,
    Journal,
    RecoverResult,
    RunState,
    Tool,
    ToolCall,
    assert_not_compensated,
    compensate_run,
    fork_run,
    resume_run,
    run_compensated,
    run_durable,
    scripted,
    stream_durable,
)


class Crash(BaseException):
    """The process dying mid-execute: the run stops with its record ``running``, never ended."""


class Shop:
    def __init__(self) -> None:
        self.executed: list[str] = []
        self.crash: set[str] = set()

    def tool(self, name: str, **kw: Any) -> Tool:
        def execute(input: Any, opts: CallOptions) -> Any:
            if name in self.crash:
                raise Crash()
            self.executed.append(name)
            return {"done": name}

        return Tool(execute, lambda input, output, opts: None, **kw)

    def tools(self) -> dict[str, Tool]:
        return {
            "charge": self.tool("charge"),
            "reserve": self.tool("reserve"),
            "lookup": self.tool("lookup", side_effect=False),
        }


def snapshot(journal: Journal, *run_ids: str) -> Any:
    return [
        (
            journal.get_run(r),
            journal.list_decisions(r),
            journal.list_records(r),
            journal.get_claims([(r, f"call-{n}") for n in range(1, 5)]),
        )
        for r in run_ids
    ]


# -- mid-flight --------------------------------------------------------------------------------------------


def test_live_run_condemned_between_two_calls_is_refused_at_its_next_side_effecting_call(
    journal: Journal, run_id: str
) -> None:
    shop = Shop()
    tools = shop.tools()
    reports = []

    def planner(state: RunState) -> Any:
        if state.step == 0:
            return [ToolCall("charge", {"amount": 10})]
        if state.step == 1:  # an operator unwinds the run while it is live, between its decisions
            reports.append(compensate_run(run_id, journal=journal, tools=tools))
            return [ToolCall("lookup", {"sku": "A1"}), ToolCall("reserve", {"sku": "A1"})]
        return Finish("unreachable")

    with pytest.raises(CompensatedRunError) as refused:
        run_durable(run_id, journal=journal, tools=tools, planner=planner)

    assert refused.value.detail == {"run_id": run_id}
    assert shop.executed == ["charge", "lookup"]  # the read-only lookup is not gated; reserve never ran
    assert [(r.tool_name, r.status.value) for r in journal.list_records(run_id)] == [
        ("charge", "succeeded"),
        ("lookup", "succeeded"),
    ]
    assert journal.get_record(run_id, "call-3") is None
    assert [e.status.value for e in reports[0].entries] == ["compensated"]


def test_streamed_run_condemned_between_events_gets_compensated_run_error_at_its_next_call(
    journal: Journal, run_id: str
) -> None:
    shop = Shop()
    tools = shop.tools()
    events = stream_durable(
        run_id,
        journal=journal,
        tools=tools,
        planner=scripted(ToolCall("charge", {}), [ToolCall("lookup", {}), ToolCall("reserve", {})]),
    )
    seen = []
    with pytest.raises(CompensatedRunError):
        for event in events:
            seen.append((event.kind, event.tool))
            if event.kind == "tool" and event.tool == "charge":
                compensate_run(run_id, journal=journal, tools=tools)

    assert ("tool", "lookup") in seen and ("tool", "reserve") not in seen
    assert shop.executed == ["charge", "lookup"]
    assert journal.get_record(run_id, "call-3") is None


def test_run_condemned_during_its_first_planner_call_never_starts(journal: Journal, run_id: str) -> None:
    shop = Shop()
    tools = shop.tools()

    def planner(state: RunState) -> Any:
        compensate_run(run_id, journal=journal, tools=tools)
        return [ToolCall("charge", {})]

    with pytest.raises(CompensatedRunError):
        run_durable(run_id, journal=journal, tools=tools, planner=planner)

    assert shop.executed == []
    assert journal.list_decisions(run_id) == [] and journal.list_records(run_id) == []


def test_side_effect_free_tool_still_runs_on_a_condemned_live_run(journal: Journal, run_id: str) -> None:
    shop = Shop()
    tools = shop.tools()

    def planner(state: RunState) -> Any:
        if state.step == 0:
            return [ToolCall("lookup", {"sku": "B2"})]
        if state.step == 1:
            compensate_run(run_id, journal=journal, tools=tools)
            return [ToolCall("lookup", {"sku": "A1"})]
        return Finish("looked up twice")

    result = run_durable(run_id, journal=journal, tools=tools, planner=planner)

    assert shop.executed == ["lookup", "lookup"]
    assert result.status == "finished"
    assert [r.status.value for r in journal.list_records(run_id)] == ["succeeded", "succeeded"]
    assert run_compensated(journal, run_id)


# -- refusals before anything is written ------------------------------------------------------------------


def _refusals(journal: Journal, tools: dict[str, Tool], run_id: str) -> dict[str, Callable[[], Any]]:
    planner = scripted(ToolCall("charge", {}), ToolCall("reserve", {}))
    return {
        "run_durable": lambda: run_durable(run_id, journal=journal, tools=tools, planner=planner),
        "stream_durable": lambda: stream_durable(run_id, journal=journal, tools=tools, planner=planner),
        "resume_run": lambda: resume_run(run_id, journal=journal, tools=tools, planner=planner),
        "fork_run": lambda: fork_run(journal, run_id, 1, f"{run_id}-fork"),
    }


@pytest.mark.parametrize("entry_point", ["run_durable", "stream_durable", "resume_run", "fork_run"])
def test_condemned_run_refuses_to_move_forward_before_writing_anything(
    journal: Journal, run_id: str, entry_point: str
) -> None:
    shop = Shop()
    tools = shop.tools()
    shop.crash.add("reserve")  # the run stops mid-flight: resumable, forkable, not ended
    with pytest.raises(Crash):
        run_durable(
            run_id,
            journal=journal,
            tools=tools,
            planner=scripted(ToolCall("charge", {}), ToolCall("reserve", {})),
        )
    shop.crash.clear()
    compensate_run(run_id, journal=journal, tools=tools)
    before = snapshot(journal, run_id, f"{run_id}-fork")
    executed = list(shop.executed)

    with pytest.raises(CompensatedRunError) as refused:
        _refusals(journal, tools, run_id)[
            entry_point
        ]()  # stream_durable raises at the call, not on iteration

    assert refused.value.detail == {"run_id": run_id}
    assert snapshot(journal, run_id, f"{run_id}-fork") == before
    assert shop.executed == executed


@pytest.mark.parametrize("entry_point", ["run_durable", "stream_durable", "resume_run", "fork_run"])
def test_run_condemned_before_it_ever_started_can_never_start(
    journal: Journal, run_id: str, entry_point: str
) -> None:
    shop = Shop()
    compensate_run(run_id, journal=journal, tools=shop.tools())
    before = snapshot(journal, run_id, f"{run_id}-fork")

    with pytest.raises(CompensatedRunError):
        _refusals(journal, shop.tools(), run_id)[entry_point]()

    assert snapshot(journal, run_id, f"{run_id}-fork") == before
    assert shop.executed == []


def test_fork_into_a_condemned_run_id_is_refused(journal: Journal, run_id: str) -> None:
    shop = Shop()
    run_durable(run_id, journal=journal, tools=shop.tools(), planner=scripted(ToolCall("charge", {})))
    compensate_run(f"{run_id}-fork", journal=journal, tools=None)

    with pytest.raises(CompensatedRunError):
        fork_run(journal, run_id, 1, f"{run_id}-fork")

    assert journal.list_records(f"{run_id}-fork") == []


# -- the guards ---------------------------------------------------------------------------------------------


def test_assert_not_compensated_passes_until_the_tombstone_then_raises_with_the_run_id(
    journal: Journal, run_id: str
) -> None:
    run_durable(run_id, journal=journal, tools=Shop().tools(), planner=scripted(ToolCall("charge", {})))
    assert not run_compensated(journal, run_id)
    assert_not_compensated(journal, run_id)
    assert_not_compensated(journal, "never-seen")

    compensate_run(run_id, journal=journal, tools=None)

    assert run_compensated(journal, run_id)
    with pytest.raises(CompensatedRunError) as refused:
        assert_not_compensated(journal, run_id)
    assert refused.value.detail == {"run_id": run_id}
    assert run_id in str(refused.value)


def test_call_still_executing_when_its_run_is_condemned_is_uncertain_then_compensated_once_it_settles(
    journal: Journal, run_id: str
) -> None:
    entered, release = threading.Event(), threading.Event()
    probed: list[str] = []
    undone: list[Any] = []

    def slow_reserve(input: Any, opts: CallOptions) -> Any:
        entered.set()
        release.wait(timeout=60)
        return {"reservation": "r-1"}

    def never_done(input: Any, opts: CallOptions) -> RecoverResult:
        probed.append(opts.idempotency_key)
        return RecoverResult(done=False)  # it has not landed yet: trusting this would lose the reservation

    tools = {
        "charge": Tool(lambda i, o: {"charge": 1}, lambda i, o, opts: undone.append(("charge", o))),
        "reserve": Tool(slow_reserve, lambda i, o, opts: undone.append(("reserve", o)), never_done),
    }
    outcome: list[Any] = []

    def live_run() -> None:
        try:
            run_durable(
                run_id,
                journal=journal,
                tools=tools,
                planner=scripted(ToolCall("charge", {}), ToolCall("reserve", {}), ToolCall("charge", {})),
            )
        except BaseException as exc:  # checked below
            outcome.append(exc)

    runner = threading.Thread(target=live_run)
    runner.start()
    try:
        assert entered.wait(timeout=30)
        first = compensate_run(run_id, journal=journal, tools=tools)
    finally:
        release.set()
        runner.join(timeout=60)

    assert [(e.tool_name, e.status.value) for e in first.entries] == [
        ("reserve", "uncertain"),
        ("charge", "compensated"),
    ]
    assert first.entries[0].error is not None and "executing" in first.entries[0].error
    assert probed == []  # a call in flight is not probed: its answer could be stale a moment later
    assert len(outcome) == 1 and isinstance(outcome[0], CompensatedRunError)  # the third call was refused
    assert journal.get_record(run_id, "call-3") is None

    second = compensate_run(run_id, journal=journal, tools=tools)

    assert [(e.tool_name, e.status.value) for e in second.entries] == [
        ("reserve", "compensated"),
        ("charge", "already-compensated"),
    ]
    assert undone == [("charge", {"charge": 1}), ("reserve", {"reservation": "r-1"})]
