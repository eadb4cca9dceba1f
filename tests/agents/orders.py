"""The shop's three-tool order placed by a real agent of each framework, on its own offline model.

For the tests that need an agent-recorded run but are about something else (the unwind on a real
Celery worker): ``place_order(framework, journal, ledger, run_id)`` runs charge, reserve, notify,
one model response each, journaled as ``call-1``..``call-3``. Each framework is imported only when
asked for (a missing extra skips, or fails under CI=true, through ``require_framework``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from saga_worker import Journal
from tests.ledger import Ledger

from .shop import ORDER, Shop, require_framework, shop_hooks

FRAMEWORKS = ["pydantic-ai", "langchain", "openai-agents"]


def place_order(framework: str, journal: Journal, ledger: Ledger, run_id: str) -> None:
    places: dict[str, Callable[[Journal, Ledger, str], None]] = {
        "pydantic-ai": _pydantic_ai,
        "langchain": _langchain,
        "openai-agents": _openai_agents,
    }
    places[framework](journal, ledger, run_id)


def _pydantic_ai(journal: Journal, ledger: Ledger, run_id: str) -> None:
    require_framework("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from saga_worker.integrations.pydantic_ai import SagaCapability

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n < len(ORDER):
            return ModelResponse(parts=[ToolCallPart(*ORDER[n])])
        return ModelResponse(parts=[TextPart("done")])

    shop = Shop(ledger)
    agent = Agent(
        FunctionModel(respond), capabilities=[SagaCapability(journal=journal, tools=shop_hooks(ledger))]
    )
    agent.tool_plain(shop.charge)
    agent.tool_plain(shop.reserve)
    agent.tool_plain(shop.notify)
    assert agent.run_sync("place order 7", run_id=run_id).output == "done"


def _langchain(journal: Journal, ledger: Ledger, run_id: str) -> None:
    require_framework("langchain")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    from saga_worker.integrations.langchain import SagaMiddleware

    class ToolCallingFake(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    answers = [
        AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"lc-{uuid.uuid4().hex[:8]}"}])
        for name, args in ORDER
    ]
    shop = Shop(ledger)
    tools = [tool(shop.charge), tool(shop.reserve), tool(shop.notify)]
    agent = create_agent(
        ToolCallingFake(messages=iter([*answers, AIMessage("done")])),
        tools=tools,
        middleware=[SagaMiddleware(journal=journal, tools=shop_hooks(ledger))],
    )
    result = agent.invoke(
        {"messages": [{"role": "user", "content": "place order 7"}]}, {"configurable": {"thread_id": run_id}}
    )
    assert result["messages"][-1].content == "done"


def _openai_agents(journal: Journal, ledger: Ledger, run_id: str) -> None:
    require_framework("agents")
    from agents import Agent, RunConfig, function_tool
    from agents import Tool as AgentTool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from saga_worker.integrations.openai_agents import SagaRunner, saga_tool

    shop = Shop(ledger)
    model = ScriptedModel(
        [[function_call(name, args, call_id=f"fc-{uuid.uuid4().hex[:8]}")] for name, args in ORDER]
        + [[assistant_message("done")]]
    )
    tools: list[AgentTool] = [function_tool(saga_tool(f)) for f in (shop.charge, shop.reserve, shop.notify)]
    result = SagaRunner(journal=journal, tools=shop_hooks(ledger)).run_sync(
        Agent(name="shop", model=model, tools=tools),
        "place order 7",
        run_id=run_id,
        run_config=RunConfig(tracing_disabled=True),
    )
    assert result.final_output == "done"
