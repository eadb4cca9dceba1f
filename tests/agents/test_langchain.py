"""LangChain v1 / LangGraph (real packages, offline GenericFakeChatModel): the saga middleware."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from saga_worker import (
    CompensatedRunError,
    CompensationStatus,
    Journal,
    ReplayMismatchError,
    compensate_run,
)
from saga_worker.journal.records import RecordStatus, RunStatus
from tests.ledger import Ledger

from .shop import (
    ORDER,
    TWO_TURNS,
    Crash,
    Shop,
    compensated,
    executed,
    require_framework,
    shop_hooks,
    unwound_by_turn,
)

require_framework("langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.tools import BaseTool, tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from saga_worker.integrations.langchain import SagaMiddleware  # noqa: E402
from tests.reads import record_of, run_of  # noqa: E402

pytestmark = pytest.mark.backends("sqlite")  # one journal is enough: the framework is under test

Step = list[tuple[str, dict[str, Any]]]
ONE_PER_STEP = [[call] for call in ORDER]


class ToolCallingFake(GenericFakeChatModel):
    """LangChain's fake chat model, which ignores the tools it is bound to (create_agent binds them)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def fake_model(steps: list[Step], before: Callable[[int], None] | None = None) -> ToolCallingFake:
    """Answers with the given tool calls, one AI message per step (fresh ids each time, as an LLM
    mints them), then "done". ``before(n)`` runs before the n-th answer: to crash or condemn there."""

    def answers() -> Iterator[AIMessage]:
        for n, step in enumerate([*steps, []]):
            if before is not None:
                before(n)
            calls = [{"name": name, "args": args, "id": f"lc-{uuid.uuid4().hex[:8]}"} for name, args in step]
            yield AIMessage("" if calls else "done", tool_calls=calls)

    return ToolCallingFake(messages=answers())


def shop_tools(ledger: Ledger, *, async_reserve: bool = False) -> list[BaseTool]:
    shop = Shop(ledger)

    @tool
    def charge(amount: int) -> dict[str, Any]:
        """Charge the customer."""
        return shop.charge(amount)

    @tool("reserve")
    def reserve_sync(sku: str, qty: int) -> dict[str, Any]:
        """Reserve stock."""
        return shop.reserve(sku, qty)

    @tool("reserve")
    async def reserve_async(sku: str, qty: int) -> dict[str, Any]:
        """Reserve stock."""
        return shop.reserve(sku, qty)

    @tool
    def notify(to: str) -> str:
        """Tell the customer."""
        return shop.notify(to)

    return [charge, reserve_async if async_reserve else reserve_sync, notify]


def shop_agent(model: ToolCallingFake, journal: Journal, ledger: Ledger, **options: Any) -> Any:
    checkpointer = options.pop("checkpointer", None)
    return create_agent(
        model,
        tools=shop_tools(ledger, **options),
        middleware=[SagaMiddleware(journal=journal, tools=shop_hooks(ledger))],
        checkpointer=checkpointer,
    )


def ask(thread: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return {"messages": [{"role": "user", "content": "place order 7"}]}, {
        "configurable": {"thread_id": thread}
    }


def tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def test_a_three_tool_agent_run_is_journaled_under_the_thread_id_by_position(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    result = shop_agent(fake_model(ONE_PER_STEP), journal, ledger).invoke(*ask(run_id))

    assert result["messages"][-1].content == "done"
    assert [(r.suffix, r.tool_name, r.input, r.status) for r in journal.list_records(run_id)] == [
        ("call-1", "charge", {"amount": 10}, RecordStatus.SUCCEEDED),
        ("call-2", "reserve", {"sku": "A1", "qty": 2}, RecordStatus.SUCCEEDED),
        ("call-3", "notify", {"to": "c@example.com"}, RecordStatus.SUCCEEDED),
    ]
    assert executed(ledger) == {f"{run_id}:call-{n}": 1 for n in (1, 2, 3)}
    # A thread's turns are one run: the middleware leaves it open for the next turn.
    assert run_of(journal, run_id).status is RunStatus.RUNNING


def test_async_tools_under_ainvoke_are_journaled_alike(journal: Journal, ledger: Ledger, run_id: str) -> None:
    agent = shop_agent(fake_model(ONE_PER_STEP), journal, ledger, async_reserve=True)
    result = asyncio.run(agent.ainvoke(*ask(run_id)))

    assert result["messages"][-1].content == "done"
    assert [r.status for r in journal.list_records(run_id)] == [RecordStatus.SUCCEEDED] * 3
    assert executed(ledger) == {f"{run_id}:call-{n}": 1 for n in (1, 2, 3)}


def test_a_run_crashed_after_the_second_tool_replays_both_when_invoked_again(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    def crash_before_third(n: int) -> None:
        if n == 2:
            raise Crash()

    with pytest.raises(Crash):
        shop_agent(fake_model(ONE_PER_STEP, crash_before_third), journal, ledger).invoke(*ask(run_id))
    assert executed(ledger) == {f"{run_id}:call-1": 1, f"{run_id}:call-2": 1}

    result = shop_agent(fake_model(ONE_PER_STEP), journal, ledger).invoke(*ask(run_id))

    assert executed(ledger) == {f"{run_id}:call-{n}": 1 for n in (1, 2, 3)}
    replayed = tool_messages(result)[0]
    assert replayed.content == record_of(journal, run_id, "call-1").output["content"]
    # The replayed answer is addressed to the new model response's call, not the journaled one.
    assert replayed.tool_call_id == result["messages"][1].tool_calls[0]["id"]


def test_a_run_resumed_from_its_checkpoint_keeps_its_positions(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    saver = InMemorySaver()

    def crash_before_third(n: int) -> None:
        if n == 2:
            raise Crash()

    with pytest.raises(Crash):
        shop_agent(fake_model(ONE_PER_STEP, crash_before_third), journal, ledger, checkpointer=saver).invoke(
            *ask(run_id)
        )
    # Resuming from the checkpoint: the model is asked again only for what comes after call 2.
    resumed = shop_agent(fake_model([[ORDER[2]]]), journal, ledger, checkpointer=saver)
    resumed.invoke(None, ask(run_id)[1])

    assert [(r.suffix, r.tool_name) for r in journal.list_records(run_id)] == [
        ("call-1", "charge"),
        ("call-2", "reserve"),
        ("call-3", "notify"),
    ]
    assert executed(ledger) == {f"{run_id}:call-{n}": 1 for n in (1, 2, 3)}


def test_unwinding_the_thread_compensates_in_reverse_order_each_step_once(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    shop_agent(fake_model(ONE_PER_STEP), journal, ledger).invoke(*ask(run_id))

    report = compensate_run(run_id, journal=journal, tools=shop_hooks(ledger))
    again = compensate_run(run_id, journal=journal, tools=shop_hooks(ledger))

    assert [(e.tool_name, e.status) for e in report.entries] == [
        ("notify", CompensationStatus.COMPENSATED),
        ("reserve", CompensationStatus.COMPENSATED),
        ("charge", CompensationStatus.COMPENSATED),
    ]
    assert compensated(ledger) == [f"{run_id}:comp:call-3", f"{run_id}:comp:call-2", f"{run_id}:comp:call-1"]
    assert {e.status for e in again.entries} == {CompensationStatus.ALREADY_COMPENSATED}


def test_a_thread_condemned_mid_run_has_its_next_call_refused_and_unrecorded(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    def condemn_before_second(n: int) -> None:
        if n == 1:
            compensate_run(run_id, journal=journal, tools=shop_hooks(ledger))

    with pytest.raises(CompensatedRunError):
        shop_agent(fake_model(ONE_PER_STEP, condemn_before_second), journal, ledger).invoke(*ask(run_id))

    assert [r.suffix for r in journal.list_records(run_id)] == ["call-1"]
    assert executed(ledger) == {f"{run_id}:call-1": 1}
    with pytest.raises(CompensatedRunError):  # the thread can never run again
        shop_agent(fake_model(ONE_PER_STEP), journal, ledger).invoke(*ask(run_id))
    assert executed(ledger) == {f"{run_id}:call-1": 1}


def test_a_rerun_whose_model_asks_another_tool_at_a_journaled_position_is_refused(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    shop_agent(fake_model(ONE_PER_STEP[:1]), journal, ledger).invoke(*ask(run_id))

    with pytest.raises(ReplayMismatchError, match="call-1.*charge.*notify"):
        shop_agent(fake_model([[ORDER[2]]]), journal, ledger).invoke(*ask(run_id))

    assert executed(ledger) == {f"{run_id}:call-1": 1}
    assert [r.tool_name for r in journal.list_records(run_id)] == ["charge"]


def test_parallel_tool_calls_of_one_message_are_numbered_in_the_order_the_model_listed_them(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    shop_agent(fake_model([ORDER]), journal, ledger).invoke(*ask(run_id))
    shop_agent(fake_model([ORDER]), journal, ledger).invoke(*ask(run_id))

    assert {r.suffix: r.tool_name for r in journal.list_records(run_id)} == {
        "call-1": "charge",
        "call-2": "reserve",
        "call-3": "notify",
    }
    assert set(executed(ledger).values()) == {1}


def test_the_calls_of_one_model_response_are_one_group_undone_side_by_side_after_the_later_ones(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    shop_agent(fake_model(TWO_TURNS), journal, ledger).invoke(*ask(run_id))

    assert unwound_by_turn(journal, ledger, run_id) == [(2, "notify"), (2, "reserve"), (1, "charge")]
