"""pydantic-ai (real package, offline FunctionModel): the saga capability journals every tool call."""

from __future__ import annotations

import asyncio
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
from saga_worker.integrations import hooks
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

require_framework("pydantic_ai")

from pydantic_ai import Agent, RunContext  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from saga_worker.integrations.pydantic_ai import SagaCapability  # noqa: E402
from tests.reads import record_of  # noqa: E402

pytestmark = pytest.mark.backends("sqlite")  # one journal is enough: the framework is under test

Step = list[tuple[str, dict[str, Any]]]


def scripted_model(steps: list[Step], before: Callable[[int], None] | None = None) -> FunctionModel:
    """A model that asks the given calls, one model response per step, then answers "done".
    ``before(n)`` runs before the n-th response (0-based): to crash or condemn there."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if before is not None:
            before(n)
        if n < len(steps):
            return ModelResponse(parts=[ToolCallPart(name, args) for name, args in steps[n]])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def shop_agent(
    model: FunctionModel,
    journal: Journal,
    ledger: Ledger,
    *,
    die_in_notify: bool = False,
    **tool_overrides: Any,
) -> Agent[None, str]:
    """The shop's three tools; ``die_in_notify``: notify's effect happens, then the process dies."""
    shop = Shop(ledger)
    agent = Agent(
        model, capabilities=[SagaCapability(journal=journal, tools=shop_hooks(ledger, **tool_overrides))]
    )

    @agent.tool_plain
    def charge(amount: int) -> dict[str, Any]:  # a sync tool
        return shop.charge(amount)

    @agent.tool_plain
    async def reserve(sku: str, qty: int) -> dict[str, Any]:  # an async tool
        return shop.reserve(sku, qty)

    @agent.tool
    def notify(ctx: RunContext[None], to: str) -> str:  # a sync tool taking the run context
        sent = shop.notify(to)
        if die_in_notify:
            raise Crash()
        return sent

    return agent


ONE_PER_STEP = [[call] for call in ORDER]


def test_a_three_tool_agent_run_is_journaled_by_position_with_stable_keys(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    result = shop_agent(scripted_model(ONE_PER_STEP), journal, ledger).run_sync(
        "place order 7", run_id=run_id
    )

    assert result.output == "done"
    records = journal.list_records(run_id)
    assert [(r.suffix, r.tool_name, r.input, r.status) for r in records] == [
        ("call-1", "charge", {"amount": 10}, RecordStatus.SUCCEEDED),
        ("call-2", "reserve", {"sku": "A1", "qty": 2}, RecordStatus.SUCCEEDED),
        ("call-3", "notify", {"to": "c@example.com"}, RecordStatus.SUCCEEDED),
    ]
    assert records[0].output == {"charge_id": f"ch-{run_id}:call-1", "amount": 10}
    assert executed(ledger) == {f"{run_id}:call-1": 1, f"{run_id}:call-2": 1, f"{run_id}:call-3": 1}
    run = journal.get_run(run_id)
    assert run is not None and run.status is RunStatus.FINISHED and run.prompt == "place order 7"


def test_the_capability_works_from_an_async_agent_run(journal: Journal, ledger: Ledger, run_id: str) -> None:
    agent = shop_agent(scripted_model(ONE_PER_STEP), journal, ledger)
    result = asyncio.run(agent.run("go", run_id=run_id))

    assert result.output == "done"
    assert [r.status for r in journal.list_records(run_id)] == [RecordStatus.SUCCEEDED] * 3


def test_a_run_crashed_after_the_second_tool_replays_both_and_executes_only_the_third(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    def crash_before_third(n: int) -> None:
        if n == 2:
            raise Crash()

    with pytest.raises(Crash):
        shop_agent(scripted_model(ONE_PER_STEP, crash_before_third), journal, ledger).run_sync(
            "go", run_id=run_id
        )
    assert executed(ledger) == {f"{run_id}:call-1": 1, f"{run_id}:call-2": 1}

    # The re-run's model mints new tool-call ids for the same calls: replay does not key on them.
    result = shop_agent(scripted_model(ONE_PER_STEP), journal, ledger).run_sync("go", run_id=run_id)

    assert result.output == "done"
    assert executed(ledger) == {f"{run_id}:call-1": 1, f"{run_id}:call-2": 1, f"{run_id}:call-3": 1}
    # The model saw the journaled outputs of the replayed calls, as JSON.
    tool_returns = [
        p.content
        for m in result.all_messages()
        for p in getattr(m, "parts", [])
        if p.part_kind == "tool-return"
    ]
    assert tool_returns[0] == {"charge_id": f"ch-{run_id}:call-1", "amount": 10}


def test_a_call_interrupted_mid_execute_is_settled_by_recover_not_run_again(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    agent = shop_agent(scripted_model(ONE_PER_STEP), journal, ledger, die_in_notify=True)
    with pytest.raises(Crash):
        agent.run_sync("go", run_id=run_id)
    assert record_of(journal, run_id, "call-3").status is RecordStatus.RUNNING

    shop_agent(scripted_model(ONE_PER_STEP), journal, ledger).run_sync("go", run_id=run_id)

    assert executed(ledger)[f"{run_id}:call-3"] == 1
    assert record_of(journal, run_id, "call-3").output == {"recovered": "notify"}


def test_unwinding_the_agent_run_compensates_in_reverse_order_each_step_once(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    tools = shop_hooks(ledger)
    shop_agent(scripted_model(ONE_PER_STEP), journal, ledger).run_sync("go", run_id=run_id)

    report = compensate_run(run_id, journal=journal, tools=tools)
    again = compensate_run(run_id, journal=journal, tools=tools)

    assert [(e.tool_name, e.status) for e in report.entries] == [
        ("notify", CompensationStatus.COMPENSATED),
        ("reserve", CompensationStatus.COMPENSATED),
        ("charge", CompensationStatus.COMPENSATED),
    ]
    assert compensated(ledger) == [f"{run_id}:comp:call-3", f"{run_id}:comp:call-2", f"{run_id}:comp:call-1"]
    assert {e.status for e in again.entries} == {CompensationStatus.ALREADY_COMPENSATED}
    assert dict(ledger.call_counts("compensate")) == {k: 1 for k in compensated(ledger)}


def test_a_run_condemned_mid_run_has_its_next_call_refused_and_unrecorded(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    tools = shop_hooks(ledger)

    def condemn_before_second(n: int) -> None:
        if n == 1:
            compensate_run(run_id, journal=journal, tools=tools)

    agent = shop_agent(scripted_model(ONE_PER_STEP, condemn_before_second), journal, ledger)
    with pytest.raises(CompensatedRunError):
        agent.run_sync("go", run_id=run_id)

    assert [r.suffix for r in journal.list_records(run_id)] == ["call-1"]
    assert executed(ledger) == {f"{run_id}:call-1": 1}
    assert compensated(ledger) == [f"{run_id}:comp:call-1"]
    with pytest.raises(CompensatedRunError):  # and the run id can never start an agent run again
        shop_agent(scripted_model(ONE_PER_STEP), journal, ledger).run_sync("go", run_id=run_id)


def test_a_rerun_whose_model_asks_another_call_at_a_journaled_position_is_refused(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    def crash_before_third(n: int) -> None:
        if n == 2:
            raise Crash()

    with pytest.raises(Crash):
        shop_agent(scripted_model(ONE_PER_STEP, crash_before_third), journal, ledger).run_sync(
            "go", run_id=run_id
        )

    changed = [[ORDER[0]], [("reserve", {"sku": "B2", "qty": 1})], [ORDER[2]]]
    with pytest.raises(ReplayMismatchError, match="call-2.*reserve.*A1.*reserve.*B2"):
        shop_agent(scripted_model(changed), journal, ledger).run_sync("go", run_id=run_id)

    assert executed(ledger) == {f"{run_id}:call-1": 1, f"{run_id}:call-2": 1}
    assert [r.input for r in journal.list_records(run_id)] == [ORDER[0][1], ORDER[1][1]]


def test_parallel_calls_of_one_model_response_are_numbered_in_the_order_the_model_listed_them(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    shop_agent(scripted_model([ORDER]), journal, ledger).run_sync("go", run_id=run_id)
    first = {r.suffix: r.tool_name for r in journal.list_records(run_id)}
    shop_agent(scripted_model([ORDER]), journal, ledger).run_sync("go", run_id=run_id)

    assert first == {"call-1": "charge", "call-2": "reserve", "call-3": "notify"}
    assert set(executed(ledger).values()) == {1}


def test_an_args_mode_tool_asked_twice_with_the_same_input_executes_once(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    charge_once = hooks(
        compensate=lambda i, o, opts: ledger.effect(opts.idempotency_key, "compensate:charge"),
        idempotency="args",
    )
    steps = [[ORDER[0]], [ORDER[0]]]  # the model re-asks the same charge (say, after a retried request)
    shop_agent(scripted_model(steps), journal, ledger, charge=charge_once).run_sync("go", run_id=run_id)

    (record,) = journal.list_records(run_id)
    assert record.suffix.startswith("args-charge-")
    assert list(executed(ledger)) == [f"{run_id}:charge:{record.suffix.rsplit('-', 1)[1]}"]
    report = compensate_run(run_id, journal=journal, tools=shop_hooks(ledger, charge=charge_once))
    assert [e.status for e in report.entries] == [CompensationStatus.COMPENSATED]


def test_a_tool_without_hooks_is_journaled_and_read_as_nothing_to_undo(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    agent = shop_agent(scripted_model([[("lookup", {"sku": "A1"})]]), journal, ledger)

    @agent.tool_plain
    def lookup(sku: str) -> int:
        return 3

    agent.run_sync("go", run_id=run_id)

    assert [(r.suffix, r.tool_name, r.output) for r in journal.list_records(run_id)] == [
        ("call-1", "lookup", 3)
    ]
    report = compensate_run(run_id, journal=journal, tools=shop_hooks(ledger))
    assert [e.status for e in report.entries] == [CompensationStatus.SKIPPED_NO_HOOK]


def test_a_call_that_requires_approval_executes_once_approved_even_when_the_approval_is_resumed_twice(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    from pydantic_ai import DeferredToolRequests, DeferredToolResults

    def agent_needing_approval(model: FunctionModel) -> Agent[None, str | DeferredToolRequests]:
        agent = Agent(
            model,
            output_type=[str, DeferredToolRequests],
            # pydantic-ai refuses a run_id already in message_history: a resume is a new agent run,
            # so the saga run id is the capability's.
            capabilities=[SagaCapability(journal=journal, tools=shop_hooks(ledger), run_id=run_id)],
        )
        shop = Shop(ledger)
        agent.tool_plain(shop.charge)
        agent.tool_plain(requires_approval=True)(shop.reserve)
        return agent

    steps = [[ORDER[0]], [ORDER[1]]]
    first = agent_needing_approval(scripted_model(steps)).run_sync("go")
    assert isinstance(first.output, DeferredToolRequests)
    assert [call.tool_name for call in first.output.approvals] == ["reserve"]
    assert [r.suffix for r in journal.list_records(run_id)] == ["call-1"]  # reserve waits, unjournaled
    approved = DeferredToolResults(approvals={first.output.approvals[0].tool_call_id: True})

    for _ in range(2):  # the same approval handed in twice (say, a retried request)
        again = agent_needing_approval(scripted_model(steps)).run_sync(
            message_history=first.all_messages(), deferred_tool_results=approved
        )
        assert again.output == "done"

    assert executed(ledger) == {f"{run_id}:call-1": 1, f"{run_id}:call-2": 1}
    assert [(r.suffix, r.tool_name) for r in journal.list_records(run_id)] == [
        ("call-1", "charge"),
        ("call-2", "reserve"),
    ]


def test_the_calls_of_one_model_response_are_one_group_undone_side_by_side_after_the_later_ones(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    shop_agent(scripted_model(TWO_TURNS), journal, ledger).run_sync("go", run_id=run_id)

    assert unwound_by_turn(journal, ledger, run_id) == [(2, "notify"), (2, "reserve"), (1, "charge")]
