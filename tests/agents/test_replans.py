"""A re-run whose model plans differently, on every adapter and every journal (issue 21, item 1).

The probe: the first run's model asks the charge with bad arguments, the framework rejects that call
before the tool runs (nothing journaled), and the corrected charge executes. A re-run of the same run
id whose model asks the good charge first must replay it, never charge again under a new key. And a
journal whose positions cannot line up with the re-run's (a call journaled past a free slot, as an
earlier numbering left it) refuses the call rather than executing it in the gap.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from saga_worker import Journal, ReplayMismatchError, saga
from saga_worker.journal.records import RecordStatus
from tests.ledger import Ledger

from .orders import FRAMEWORKS
from .shop import Crash, Shop, executed, require_framework, shop_hooks

Step = list[tuple[str, dict[str, Any]]]
BAD = ("charge", {"amount": "a lot"})  # not an int: every framework rejects it before the tool runs
GOOD = ("charge", {"amount": 10})
Agent = Callable[..., None]


# -- one agent run per framework: the shop's tools, a model answering the given steps, then "done" ---
def _pydantic_ai(
    journal: Journal, ledger: Ledger, run_id: str, steps: list[Step], crash: bool = False
) -> None:
    require_framework("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from saga_worker.integrations.pydantic_ai import SagaCapability

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n < len(steps):
            return ModelResponse(parts=[ToolCallPart(name, args) for name, args in steps[n]])
        if crash:
            raise Crash()
        return ModelResponse(parts=[TextPart("done")])

    shop = Shop(ledger)
    agent = Agent(
        FunctionModel(respond), capabilities=[SagaCapability(journal=journal, tools=shop_hooks(ledger))]
    )
    agent.tool_plain(shop.charge)
    agent.tool_plain(shop.reserve)
    assert agent.run_sync("place order 7", run_id=run_id).output == "done"


def _langchain(journal: Journal, ledger: Ledger, run_id: str, steps: list[Step], crash: bool = False) -> None:
    require_framework("langchain")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    from saga_worker.integrations.langchain import SagaMiddleware

    class ToolCallingFake(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    def answers() -> Iterator[AIMessage]:
        for step in steps:
            calls = [{"name": n, "args": a, "id": f"lc-{uuid.uuid4().hex[:8]}"} for n, a in step]
            yield AIMessage("", tool_calls=calls)
        if crash:
            raise Crash()
        yield AIMessage("done")

    shop = Shop(ledger)
    agent = create_agent(
        ToolCallingFake(messages=answers()),
        tools=[tool(shop.charge), tool(shop.reserve)],
        middleware=[SagaMiddleware(journal=journal, tools=shop_hooks(ledger))],
    )
    result = agent.invoke(
        {"messages": [{"role": "user", "content": "place order 7"}]}, {"configurable": {"thread_id": run_id}}
    )
    assert result["messages"][-1].content == "done"


def _openai_agents(
    journal: Journal, ledger: Ledger, run_id: str, steps: list[Step], crash: bool = False
) -> None:
    require_framework("agents")
    from agents import Agent, RunConfig, function_tool
    from agents import Tool as AgentTool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from saga_worker.integrations.openai_agents import SagaRunner, saga_tool

    answered = [0]

    class Scripted(ScriptedModel):
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            if crash and answered[0] == len(steps):
                raise Crash()
            answered[0] += 1
            return await super().get_response(*args, **kwargs)

    shop = Shop(ledger)
    model = Scripted(
        [[function_call(n, a, call_id=f"fc-{uuid.uuid4().hex[:8]}") for n, a in step] for step in steps]
        + [[assistant_message("done")]]
    )
    tools: list[AgentTool] = [function_tool(saga_tool(f)) for f in (shop.charge, shop.reserve)]
    result = SagaRunner(journal=journal, tools=shop_hooks(ledger)).run_sync(
        Agent(name="shop", model=model, tools=tools),
        "place order 7",
        run_id=run_id,
        run_config=RunConfig(tracing_disabled=True),
    )
    assert result.final_output == "done"


AGENTS: dict[str, Agent] = {
    "pydantic-ai": _pydantic_ai,
    "langchain": _langchain,
    "openai-agents": _openai_agents,
}


@pytest.fixture(params=FRAMEWORKS)
def run_agent(request: pytest.FixtureRequest) -> Agent:
    return AGENTS[str(request.param)]


# -- the probe -----------------------------------------------------------------------------------
def test_a_call_the_framework_rejected_takes_no_position_and_is_not_journaled(
    run_agent: Agent, journal: Journal, ledger: Ledger, run_id: str
) -> None:
    run_agent(journal, ledger, run_id, [[BAD], [GOOD]])

    assert [(r.suffix, r.tool_name, r.input, r.status) for r in journal.list_records(run_id)] == [
        ("call-1", "charge", {"amount": 10}, RecordStatus.SUCCEEDED)
    ]
    assert executed(ledger) == {f"{run_id}:call-1": 1}


def test_a_rerun_whose_model_no_longer_makes_the_rejected_call_replays_the_charge_not_charges_again(
    run_agent: Agent, journal: Journal, ledger: Ledger, run_id: str
) -> None:
    with pytest.raises(Crash):  # the process dies before the run finishes: it is run again
        run_agent(journal, ledger, run_id, [[BAD], [GOOD]], crash=True)
    run_agent(journal, ledger, run_id, [[GOOD]])

    assert ledger.effect_counts("execute") == {f"{run_id}:call-1": 1}
    assert executed(ledger) == {f"{run_id}:call-1": 1}


def test_a_rerun_whose_model_makes_a_rejected_call_first_replays_the_charge_not_charges_again(
    run_agent: Agent, journal: Journal, ledger: Ledger, run_id: str
) -> None:
    with pytest.raises(Crash):
        run_agent(journal, ledger, run_id, [[GOOD]], crash=True)
    run_agent(journal, ledger, run_id, [[BAD], [GOOD]])

    assert executed(ledger) == {f"{run_id}:call-1": 1}
    assert [r.suffix for r in journal.list_records(run_id)] == ["call-1"]


def test_a_rejected_call_beside_a_good_one_in_one_response_takes_no_position(
    run_agent: Agent, journal: Journal, ledger: Ledger, run_id: str
) -> None:
    reserve = ("reserve", {"sku": "A1", "qty": 2})
    run_agent(journal, ledger, run_id, [[BAD, reserve], [GOOD]])

    assert [(r.suffix, r.tool_name) for r in journal.list_records(run_id)] == [
        ("call-1", "reserve"),
        ("call-2", "charge"),
    ]
    assert executed(ledger) == {f"{run_id}:call-1": 1, f"{run_id}:call-2": 1}


def test_a_call_that_would_execute_in_a_free_slot_below_a_journaled_call_is_refused(
    run_agent: Agent, journal: Journal, ledger: Ledger, run_id: str
) -> None:
    # The journal an earlier numbering left: the rejected call took position 1, the charge ran as call-2.
    with saga(run_id, journal=journal, tools={"charge": _charge_tool(ledger)}, finish=False) as run:
        run.call("charge", GOOD[1], id="call-2")

    with pytest.raises(ReplayMismatchError, match="call-1.*call-2"):
        run_agent(journal, ledger, run_id, [[GOOD]])

    assert executed(ledger) == {f"{run_id}:call-2": 1}
    assert [r.suffix for r in journal.list_records(run_id)] == ["call-2"]


def _charge_tool(ledger: Ledger) -> Any:
    from saga_worker import Tool

    def charge(input: Any, opts: Any) -> dict[str, Any]:
        ledger.effect(opts.idempotency_key, "execute:charge")
        return {"charge_id": f"ch-{opts.idempotency_key}", "amount": input["amount"]}

    return Tool(charge, shop_hooks(ledger)["charge"].compensate)
