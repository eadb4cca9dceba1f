"""The OpenAI Agents SDK under saga-worker, offline (the SDK's ScriptedModel; no API key, no network).

    python examples/agents/openai_agents_order.py

``@saga_tool`` goes under ``@function_tool``; ``SagaRunner`` runs the agent under a run id. The
model asks charge, then reserve and notify together; reserve needs a person's approval
(``needs_approval``), so the run stops with charge and notify done. Approved, the saved state is
resumed and the process "dies" right after reserve executes; the same saved state is resumed again:
reserve is replayed from the journal, not executed a second time. Then the run is unwound, and a
new agent run on the condemned run id is refused before it starts.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
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
from agents import Agent, RunConfig, function_tool  # noqa: E402
from agents.run_state import RunState  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

from saga_worker import CompensatedRunError, compensate_run  # noqa: E402
from saga_worker.integrations.openai_agents import SagaRunner, saga_tool  # noqa: E402

OFFLINE = RunConfig(tracing_disabled=True)
STEPS = [[ORDER[0]], [ORDER[1], ORDER[2]]]  # charge; then reserve and notify in one response


class Model(ScriptedModel):
    """The SDK's scripted model: one scripted response per model call; ``crash`` dies instead."""

    def __init__(self, skip: int = 0, crash: bool = False) -> None:
        answers: list[Any] = [
            [function_call(name, args, call_id=f"fc-{uuid.uuid4().hex[:8]}") for name, args in step]
            for step in STEPS
        ]
        super().__init__([*answers, [assistant_message("order placed")]][skip:])
        self.crash = crash

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        if self.crash:
            raise Crash()
        return await super().get_response(*args, **kwargs)


@function_tool(name_override="charge")
@saga_tool
def charge_tool(amount: int) -> dict[str, Any]:  # a sync tool
    """Charge the customer."""
    return charge(amount)


@function_tool(name_override="reserve", needs_approval=True)
@saga_tool
async def reserve_tool(sku: str, qty: int) -> dict[str, Any]:  # an async tool, approved by a person
    """Reserve stock."""
    return reserve(sku, qty)


@function_tool(name_override="notify")
@saga_tool
def notify_tool(to: str) -> str:
    """Tell the customer."""
    return notify(to)


def shop(model: Model) -> Agent[Any]:
    return Agent(name="shop", model=model, tools=[charge_tool, reserve_tool, notify_tool])


async def main() -> None:
    journal = temporary_journal()
    runner = SagaRunner(journal=journal, tools=HOOKS)
    run_id = "order-7"

    first = await runner.run(shop(Model()), "place order 7", run_id=run_id, run_config=OFFLINE)
    print("waiting for approval:", [i.tool_name for i in first.interruptions])
    show_journal(journal, run_id)
    state = first.to_state()
    state.approve(first.interruptions[0])
    saved = state.to_json()  # what an app stores while a person decides

    async def resume(model: Model) -> Any:
        agent = shop(model)
        return await runner.run(
            agent, await RunState.from_json(agent, saved), run_id=run_id, run_config=OFFLINE
        )

    try:
        await resume(Model(skip=2, crash=True))
    except Crash:
        print("approved and resumed: the process died right after reserve executed")
    result = await resume(Model(skip=2))  # the same saved state, resumed again
    print(f"resumed again: {result.final_output!r}")
    show_journal(journal, run_id)
    show_counts("executed", executions)

    show_report(await asyncio.to_thread(compensate_run, run_id, journal=journal, tools=HOOKS))
    show_counts("compensated", compensations)
    try:
        await runner.run(shop(Model()), "place order 7", run_id=run_id, run_config=OFFLINE)
    except CompensatedRunError as exc:
        print(f"a new agent run on the unwound run id is refused: {exc}")
    journal.close()


if __name__ == "__main__":
    asyncio.run(main())
