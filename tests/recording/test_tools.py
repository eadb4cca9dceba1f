"""Tools: validation up front, and hooks that may be plain functions or ``async def`` anywhere."""

from __future__ import annotations

import asyncio
import threading
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
    scripted,
)
from saga_worker.journal.records import RecordStatus
from saga_worker.recording.tools import call_hook, check_tools
from tests.leases import lapse_execute_lease
from tests.reads import record_of


class Crash(BaseException):
    """Stands for the process dying inside ``execute``: nothing in the library catches it."""


def test_tool_defaults_match_the_contract() -> None:
    tool = Tool(lambda i, o: None)
    assert (tool.idempotency, tool.side_effect, tool.idempotent, tool.description) == (
        "call",
        True,
        False,
        "",
    )
    assert tool.compensate is None and tool.recover is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"execute": 3}, "execute"),
        ({"execute": print, "compensate": "no"}, "compensate"),
        ({"execute": print, "recover": 1}, "recover"),
        ({"execute": print, "idempotency": "key"}, "idempotency"),
    ],
)
def test_a_tool_with_a_bad_hook_or_mode_is_refused_naming_it(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        Tool(**kwargs)


def test_a_tools_mapping_with_a_bad_name_or_value_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="tool name"):
        check_tools({"bad:name": Tool(print)})
    with pytest.raises(InvalidInputError, match="must be a Tool"):
        check_tools({"fine": print})  # type: ignore[dict-item]  # the wrong type is the point


def test_call_hook_drives_sync_and_async_hooks_from_plain_code() -> None:
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    assert call_hook(lambda x: x + 1, 1) == 2
    assert call_hook(double, 4) == 8


def test_call_hook_drives_an_async_hook_from_inside_a_running_event_loop() -> None:
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    async def app() -> int:
        return int(call_hook(double, 21))  # the sync API called from async code

    assert asyncio.run(app()) == 42


def test_call_hook_hands_back_the_error_of_an_async_hook_in_a_running_loop() -> None:
    async def boom() -> None:
        raise KeyError("nope")

    async def app() -> None:
        call_hook(boom)

    with pytest.raises(KeyError, match="nope"):
        asyncio.run(app())


def async_tools(log: list[str]) -> dict[str, Tool]:
    async def execute(input: Any, opts: CallOptions) -> dict[str, Any]:
        await asyncio.sleep(0)
        log.append(f"execute {opts.idempotency_key} on {threading.current_thread().name}")
        return {"charged": input["amount"]}

    async def compensate(input: Any, output: Any, opts: CallOptions) -> None:
        await asyncio.sleep(0)
        log.append(f"compensate {opts.idempotency_key} {output}")

    async def recover(input: Any, opts: CallOptions) -> RecoverResult:
        await asyncio.sleep(0)
        log.append(f"recover {opts.idempotency_key}")
        return RecoverResult(done=True, output={"charged": "recovered"})

    return {"charge": Tool(execute, compensate, recover)}


def test_async_execute_and_compensate_hooks_work_in_a_run_and_its_unwind(
    journal: Journal, run_id: str
) -> None:
    log: list[str] = []
    tools = async_tools(log)
    result = run_durable(
        run_id, journal=journal, tools=tools, planner=scripted(ToolCall("charge", {"amount": 3}))
    )
    assert result.status == "finished"
    assert record_of(journal, run_id, "call-1").output == {"charged": 3}
    report = compensate_run(run_id, journal=journal, tools=tools)
    assert [e.status.value for e in report.entries] == ["compensated"]
    assert log[0].startswith(f"execute {run_id}:call-1")
    assert log[1] == f"compensate {run_id}:comp:call-1 {{'charged': 3}}"


def test_async_hooks_work_when_a_run_and_its_unwind_are_driven_from_inside_an_event_loop(
    journal: Journal, run_id: str
) -> None:
    log: list[str] = []
    tools = async_tools(log)

    async def app() -> tuple[str, list[str]]:
        status = run_durable(
            run_id, journal=journal, tools=tools, planner=scripted(ToolCall("charge", {"amount": 5}))
        ).status
        report = compensate_run(run_id, journal=journal, tools=tools)
        return status, [e.status.value for e in report.entries]

    assert asyncio.run(app()) == ("finished", ["compensated"])
    assert record_of(journal, run_id, "call-1").output == {"charged": 5}
    assert log[0].endswith("on saga-async-hook")  # driven on the private thread, not the blocked loop
    assert log[1] == f"compensate {run_id}:comp:call-1 {{'charged': 5}}"


def test_an_async_recover_hook_decides_a_resumed_interrupted_call(journal: Journal, run_id: str) -> None:
    def crash(input: Any, opts: CallOptions) -> None:
        raise Crash

    planner = scripted(ToolCall("charge", {"amount": 1}))
    with pytest.raises(Crash):
        run_durable(run_id, journal=journal, tools={"charge": Tool(crash)}, planner=planner)
    assert record_of(journal, run_id, "call-1").status is RecordStatus.RUNNING
    lapse_execute_lease(journal, run_id, "call-1")  # the dead process renews it no more

    log: list[str] = []

    async def app() -> str:
        return resume_run(run_id, journal=journal, tools=async_tools(log), planner=planner).status

    assert asyncio.run(app()) == "finished"
    assert log == [f"recover {run_id}:call-1"]  # recovered, never executed again
    record = journal.get_record(run_id, "call-1")
    assert record is not None and record.status is RecordStatus.SUCCEEDED
    assert record.output == {"charged": "recovered"}
