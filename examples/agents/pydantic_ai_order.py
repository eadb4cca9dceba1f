"""pydantic-ai under saga-worker, offline (pydantic-ai's FunctionModel scripts the tool calls).

    python examples/agents/pydantic_ai_order.py

An agent places an order (charge, reserve, notify); the process "dies" after the second tool call;
the same run id is run again: the first two calls are replayed from the journal, only notify
executes. Then the run is unwound (notify, reserve, charge undone once each) and a further agent
run on the condemned run id is refused before it starts.
"""

from __future__ import annotations

import sys
from pathlib import Path

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
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from saga_worker import CompensatedRunError, compensate_run  # noqa: E402
from saga_worker.integrations.pydantic_ai import SagaCapability  # noqa: E402


def model(crash_before: int | None = None) -> FunctionModel:
    """Asks one tool call per response, in ORDER, then answers; dies before response ``crash_before``."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n == crash_before:
            raise Crash()
        if n < len(ORDER):
            return ModelResponse(parts=[ToolCallPart(*ORDER[n])])  # a fresh tool-call id every time
        return ModelResponse(parts=[TextPart("order placed")])

    return FunctionModel(respond)


def main() -> None:
    journal = temporary_journal()
    run_id = "order-7"

    def agent(crash_before: int | None = None) -> Agent[None, str]:
        shop = Agent(model(crash_before), capabilities=[SagaCapability(journal=journal, tools=HOOKS)])
        shop.tool_plain(charge)  # a sync tool
        shop.tool_plain(reserve)

        @shop.tool_plain(name="notify")
        async def notify_async(to: str) -> str:  # an async tool
            return notify(to)

        return shop

    try:
        agent(crash_before=2).run_sync("place order 7", run_id=run_id)
    except Crash:
        print("first attempt: the process died after the second tool call")
    show_journal(journal, run_id)

    result = agent().run_sync("place order 7", run_id=run_id)
    print(f"re-run with the same run id: {result.output!r}")
    show_journal(journal, run_id)
    show_counts("executed", executions)

    show_report(compensate_run(run_id, journal=journal, tools=HOOKS))
    show_counts("compensated", compensations)
    try:
        agent().run_sync("place order 7", run_id=run_id)
    except CompensatedRunError as exc:
        print(f"a new agent run on the unwound run id is refused: {exc}")
    journal.close()


if __name__ == "__main__":
    main()
