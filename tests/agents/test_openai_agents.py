"""OpenAI Agents SDK (real package, offline ScriptedModel): @saga_tool under @function_tool, SagaRunner."""

from __future__ import annotations

import uuid
from collections.abc import Callable
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

require_framework("agents")

from agents import Agent, FunctionTool, RunConfig, RunContextWrapper, function_tool  # noqa: E402
from agents import Tool as AgentTool  # noqa: E402
from agents.run_state import RunState  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402

from saga_worker.integrations.openai_agents import SagaRunner, saga_tool  # noqa: E402
from tests.reads import run_of  # noqa: E402

pytestmark = pytest.mark.backends("sqlite")  # one journal is enough: the framework is under test

Step = list[tuple[str, dict[str, Any]]]
ONE_PER_STEP = [[call] for call in ORDER]
OFFLINE = RunConfig(tracing_disabled=True)


class Scripted(ScriptedModel):
    """The SDK's scripted model; ``before(n)`` runs before the n-th response (to crash or condemn)."""

    def __init__(self, steps: list[Any], before: Callable[[int], None] | None = None) -> None:
        super().__init__(steps)
        self._before = before
        self._answered = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        if self._before is not None:
            self._before(self._answered)
        self._answered += 1
        return await super().get_response(*args, **kwargs)


def scripted(steps: list[Step], before: Callable[[int], None] | None = None, *, skip: int = 0) -> Scripted:
    """Function calls with ids minted afresh (as a model does on every request), then "done";
    ``skip`` leaves out the first responses (a resumed run asks only for what comes after)."""
    answers: list[Any] = [
        [function_call(name, args, call_id=f"fc-{uuid.uuid4().hex[:8]}") for name, args in step]
        for step in steps
    ]
    answers.append([assistant_message("done")])
    return Scripted(answers[skip:], before)


def shop_tools(ledger: Ledger, *, approve_reserve: bool = False) -> list[FunctionTool]:
    shop = Shop(ledger)

    @function_tool
    @saga_tool
    def charge(amount: int) -> dict[str, Any]:  # a sync tool
        """Charge the customer."""
        return shop.charge(amount)

    @function_tool(needs_approval=approve_reserve)
    @saga_tool
    async def reserve(sku: str, qty: int) -> dict[str, Any]:  # an async tool
        """Reserve stock."""
        return shop.reserve(sku, qty)

    @function_tool
    @saga_tool
    async def notify(ctx: RunContextWrapper[Any], to: str) -> str:  # one that takes the SDK's context
        """Tell the customer."""
        assert isinstance(ctx, ToolContext) and ctx.tool_name == "notify"
        return shop.notify(to)

    return [charge, reserve, notify]


def shop_agent(model: Scripted, ledger: Ledger, **options: Any) -> Agent[Any]:
    tools: list[AgentTool] = [*shop_tools(ledger, **options)]
    return Agent(name="shop", model=model, tools=tools)


def runner(journal: Journal, ledger: Ledger) -> SagaRunner:
    return SagaRunner(journal=journal, tools=shop_hooks(ledger))


def test_the_decorated_tool_shows_the_model_only_its_own_parameters(ledger: Ledger) -> None:
    charge, _, notify = shop_tools(ledger)

    assert charge.params_json_schema["properties"] == {"amount": {"title": "Amount", "type": "integer"}}
    assert list(notify.params_json_schema["properties"]) == ["to"]


def test_a_three_tool_agent_run_is_journaled_by_position_with_stable_keys(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    result = runner(journal, ledger).run_sync(
        shop_agent(scripted(ONE_PER_STEP), ledger), "place order 7", run_id=run_id, run_config=OFFLINE
    )

    assert result.final_output == "done"
    assert [(r.suffix, r.tool_name, r.input, r.status) for r in journal.list_records(run_id)] == [
        ("call-1", "charge", {"amount": 10}, RecordStatus.SUCCEEDED),
        ("call-2", "reserve", {"sku": "A1", "qty": 2}, RecordStatus.SUCCEEDED),
        ("call-3", "notify", {"to": "c@example.com"}, RecordStatus.SUCCEEDED),
    ]
    assert executed(ledger) == {f"{run_id}:call-{n}": 1 for n in (1, 2, 3)}
    run = journal.get_run(run_id)
    assert run is not None and run.status is RunStatus.FINISHED and run.prompt == "place order 7"


def test_a_run_crashed_after_the_second_tool_replays_both_and_executes_only_the_third(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    def crash_before_third(n: int) -> None:
        if n == 2:
            raise Crash()

    with pytest.raises(Crash):
        runner(journal, ledger).run_sync(
            shop_agent(scripted(ONE_PER_STEP, crash_before_third), ledger),
            "go",
            run_id=run_id,
            run_config=OFFLINE,
        )
    assert executed(ledger) == {f"{run_id}:call-1": 1, f"{run_id}:call-2": 1}

    result = runner(journal, ledger).run_sync(
        shop_agent(scripted(ONE_PER_STEP), ledger), "go", run_id=run_id, run_config=OFFLINE
    )

    assert result.final_output == "done"
    assert executed(ledger) == {f"{run_id}:call-{n}": 1 for n in (1, 2, 3)}


def test_an_approved_call_executes_once_even_when_its_saved_state_is_resumed_twice(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    steps = [[ORDER[0]], [ORDER[1], ORDER[2]]]  # reserve waits for a person; notify, beside it, does not
    first = runner(journal, ledger).run_sync(
        shop_agent(scripted(steps), ledger, approve_reserve=True), "go", run_id=run_id, run_config=OFFLINE
    )
    assert [i.tool_name for i in first.interruptions] == ["reserve"]
    assert executed(ledger) == {f"{run_id}:call-1": 1, f"{run_id}:call-3": 1}
    assert run_of(journal, run_id).status is RunStatus.RUNNING  # open for the resume
    state = first.to_state()
    state.approve(first.interruptions[0])
    saved = state.to_json()

    def crash_after_the_tool(n: int) -> None:
        raise Crash()  # the resumed run executes reserve, then dies before its next model response

    async def resume(before: Callable[[int], None] | None) -> Any:
        agent = shop_agent(scripted(steps, before, skip=2), ledger, approve_reserve=True)
        return await runner(journal, ledger).run(
            agent, await RunState.from_json(agent, saved), run_id=run_id, run_config=OFFLINE
        )

    import asyncio

    with pytest.raises(Crash):
        asyncio.run(resume(crash_after_the_tool))
    result = asyncio.run(resume(None))  # the same saved state, resumed again

    assert result.final_output == "done"
    assert executed(ledger) == {f"{run_id}:call-{n}": 1 for n in (1, 2, 3)}
    assert [r.suffix for r in journal.list_records(run_id)] == ["call-1", "call-3", "call-2"]


def test_unwinding_the_agent_run_compensates_in_reverse_execution_order_each_step_once(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    runner(journal, ledger).run_sync(
        shop_agent(scripted(ONE_PER_STEP), ledger), "go", run_id=run_id, run_config=OFFLINE
    )

    report = compensate_run(run_id, journal=journal, tools=shop_hooks(ledger))
    again = compensate_run(run_id, journal=journal, tools=shop_hooks(ledger))

    assert [(e.tool_name, e.status) for e in report.entries] == [
        ("notify", CompensationStatus.COMPENSATED),
        ("reserve", CompensationStatus.COMPENSATED),
        ("charge", CompensationStatus.COMPENSATED),
    ]
    assert compensated(ledger) == [f"{run_id}:comp:call-3", f"{run_id}:comp:call-2", f"{run_id}:comp:call-1"]
    assert {e.status for e in again.entries} == {CompensationStatus.ALREADY_COMPENSATED}


def test_a_run_condemned_mid_run_is_stopped_at_its_next_call_which_leaves_no_record(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    def condemn_before_second(n: int) -> None:
        if n == 1:
            compensate_run(run_id, journal=journal, tools=shop_hooks(ledger))

    model = scripted(ONE_PER_STEP, condemn_before_second)
    with pytest.raises(CompensatedRunError):
        runner(journal, ledger).run_sync(shop_agent(model, ledger), "go", run_id=run_id, run_config=OFFLINE)

    assert [r.suffix for r in journal.list_records(run_id)] == ["call-1"]
    assert executed(ledger) == {f"{run_id}:call-1": 1}
    assert len(model.calls) == 2  # the refusal stopped the run: the model was not asked a third time
    with pytest.raises(CompensatedRunError):
        runner(journal, ledger).run_sync(
            shop_agent(scripted(ONE_PER_STEP), ledger), "go", run_id=run_id, run_config=OFFLINE
        )


def test_a_rerun_whose_model_asks_other_arguments_at_a_journaled_position_is_refused(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    def crash_before_second(n: int) -> None:
        if n == 1:
            raise Crash()

    with pytest.raises(Crash):
        runner(journal, ledger).run_sync(
            shop_agent(scripted(ONE_PER_STEP, crash_before_second), ledger),
            "go",
            run_id=run_id,
            run_config=OFFLINE,
        )
    changed = [[("charge", {"amount": 99})]]
    with pytest.raises(ReplayMismatchError, match="call-1.*10.*99"):
        runner(journal, ledger).run_sync(
            shop_agent(scripted(changed), ledger), "go", run_id=run_id, run_config=OFFLINE
        )

    assert executed(ledger) == {f"{run_id}:call-1": 1}


def test_a_saga_tool_called_outside_the_saga_runner_refuses_rather_than_run_unjournaled(
    ledger: Ledger, run_id: str
) -> None:
    from agents import Runner

    result = Runner.run_sync(shop_agent(scripted(ONE_PER_STEP[:1]), ledger), "go", run_config=OFFLINE)

    assert executed(ledger) == {}
    assert result.final_output == "done"  # the SDK told the model its tool failed


def test_the_calls_of_one_model_response_are_one_group_undone_side_by_side_after_the_later_ones(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    runner(journal, ledger).run_sync(
        shop_agent(scripted(TWO_TURNS), ledger), "go", run_id=run_id, run_config=OFFLINE
    )

    assert unwound_by_turn(journal, ledger, run_id) == [(2, "notify"), (2, "reserve"), (1, "charge")]
