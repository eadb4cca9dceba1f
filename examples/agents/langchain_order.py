"""LangChain v1 / LangGraph under saga-worker, offline (LangChain's GenericFakeChatModel).

    python examples/agents/langchain_order.py

The thread id is the saga run id. An agent places an order (charge, reserve, notify); the process
"dies" after the second tool call; the same thread is invoked again from the start: the model asks
the same calls (with new call ids), the first two are replayed from the journal and only notify
executes. A second thread, run with ``ainvoke`` and an async tool, is unwound by an operator between
two model calls: its next tool call is refused and leaves no record. Both runs are unwound.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _shop import (  # noqa: E402
    HOOKS,
    ORDER,
    Crash,
    charge,
    compensations,
    executions,
    notify,
    reserve,
    show_counts,
    show_journal,
    show_report,
    temporary_journal,
)
from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

from saga_worker import CompensatedRunError, Journal, compensate_run  # noqa: E402
from saga_worker.integrations.langchain import SagaMiddleware  # noqa: E402


class ScriptedChat(GenericFakeChatModel):
    """LangChain's fake chat model; it ignores the tools create_agent binds to it."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def model(calls: list[tuple[str, dict[str, Any]]], before: Any = None) -> ScriptedChat:
    """One AI message per call (fresh call ids, as an LLM mints them), then a text answer;
    ``before(n)`` runs before the n-th message (to crash or unwind there)."""

    def messages() -> Iterator[AIMessage]:
        for n, (name, args) in enumerate([*calls, ("", {})]):
            if before is not None:
                before(n)
            if not name:
                yield AIMessage("order placed")
            else:
                yield AIMessage(
                    "", tool_calls=[{"name": name, "args": args, "id": f"lc-{uuid.uuid4().hex[:8]}"}]
                )

    return ScriptedChat(messages=messages())


@tool("reserve")
async def reserve_async(sku: str, qty: int) -> dict[str, Any]:  # an async tool (under ainvoke)
    """Reserve stock."""
    return reserve(sku, qty)


def agent(journal: Journal, chat: ScriptedChat, *, async_reserve: bool = False) -> Any:
    return create_agent(
        chat,
        tools=[tool(charge), reserve_async if async_reserve else tool(reserve), tool(notify)],
        middleware=[SagaMiddleware(journal=journal, tools=HOOKS)],
    )


def thread(run_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": run_id}}


def main() -> None:
    journal = temporary_journal()
    order = {"messages": [{"role": "user", "content": "place order 7"}]}

    def crash_before_third(n: int) -> None:
        if n == 2:
            raise Crash()

    try:
        agent(journal, model(ORDER, crash_before_third)).invoke(order, thread("order-7"))
    except Crash:
        print("thread order-7: the process died after the second tool call")
    show_journal(journal, "order-7")
    result = agent(journal, model(ORDER)).invoke(order, thread("order-7"))
    print(f"thread order-7 invoked again: {result['messages'][-1].content!r}")
    show_journal(journal, "order-7")
    show_counts("executed", executions)

    def unwind_before_second(n: int) -> None:
        if n == 1:  # an operator unwinds the run while the agent waits for the model
            show_report(compensate_run("order-8", journal=journal, tools=HOOKS))

    try:
        chat = model(ORDER, unwind_before_second)
        asyncio.run(agent(journal, chat, async_reserve=True).ainvoke(order, thread("order-8")))
    except CompensatedRunError as exc:
        print(f"thread order-8: its next tool call was refused: {exc}")
    show_journal(journal, "order-8")

    show_report(compensate_run("order-7", journal=journal, tools=HOOKS))
    show_counts("compensated", compensations)
    journal.close()


if __name__ == "__main__":
    main()
