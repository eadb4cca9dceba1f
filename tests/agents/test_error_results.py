"""Error results are failed calls, and a tool can say its failure had no effect (issue 21, item 2).

LangChain hands a tool's caught failure to the model as a ``ToolMessage`` with ``status="error"``
(bad arguments, or a ``ToolException`` under ``handle_tool_error=True``): journaled ``succeeded``,
the unwind would refund a charge that never happened. pydantic-ai's ``ModelRetry`` and the OpenAI
Agents SDK's caught exceptions are failed calls too; ``no_effect(...)`` lets the tool say nothing
happened, so the unwind reads the step ``skipped-not-executed`` rather than ``uncertain``.
On every journal, with the frameworks' own offline models.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from contextlib import suppress
from typing import Any, NoReturn

import pytest

from saga_worker import CompensationStatus, Journal, compensate_run
from saga_worker.integrations import call_options, hooks, no_effect
from saga_worker.journal.records import RecordStatus
from tests.ledger import Ledger

from .shop import require_framework, shop_hooks

S = CompensationStatus


def refund_only(ledger: Ledger) -> dict[str, Any]:
    """The charge's undo side with no recover hook: a failed call is only known by what it said."""
    return {
        "charge": hooks(
            compensate=lambda i, o, opts: ledger.effect(opts.idempotency_key, "compensate:charge")
        )
    }


def refunds(ledger: Ledger) -> list[str]:
    return [c.key for c in ledger.effects() if c.what.startswith("compensate")]


# -- a marked error the tool caught is not its failure (issue 42) -----------------------------------
def validate(amount: int) -> None:
    """The tool's own check, written to be raised straight out of the tool: nothing happened yet."""
    if amount < 100:
        raise no_effect(ValueError(f"{amount} is below the minimum"))


def charged_anyway(ledger: Ledger, key: str, failure: BaseException) -> NoReturn:
    """A tool that catches its check's marked error, charges the card after all, then fails."""
    with suppress(ValueError):  # a lenient mode: the tool goes on
        validate(10)
    ledger.effect(key, "execute:charge")
    raise failure


def assert_the_charge_is_asked_about_and_refunded(journal: Journal, ledger: Ledger, run_id: str) -> None:
    """The call failed after charging: journaled without the no-effect mark, so the unwind asks
    ``recover``, which finds the charge, and refunds it once."""
    (record,) = journal.list_records(run_id)
    assert record.status is RecordStatus.FAILED and not record.had_no_effect
    report = compensate_run(run_id, journal=journal, tools=shop_hooks(ledger))
    assert [e.status for e in report.entries] == [S.COMPENSATED]
    assert refunds(ledger) == [f"{run_id}:comp:call-1"]


# -- LangChain --------------------------------------------------------------------------------------
def langchain_run(
    journal: Journal,
    ledger: Ledger,
    run_id: str,
    steps: list[list[tuple[str, dict[str, Any]]]],
    *,
    tools: Any,
    declined: Any = None,
    body: Callable[[str], Any] | None = None,
    asynchronous: bool = False,
) -> list[Any]:
    require_framework("langchain")
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool

    from saga_worker.integrations.langchain import SagaMiddleware

    class ToolCallingFake(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    @tool
    def charge(amount: int) -> str:
        """Charge the customer."""
        key = call_options().idempotency_key
        if body is not None:
            return str(body(key))
        ledger.call(key, "attempt:charge")  # asked; the provider declines before charging anything
        raise declined("card declined")

    charge.handle_tool_error = True  # LangChain answers the model with the error: a ToolMessage
    answers = [
        AIMessage(
            "", tool_calls=[{"name": n, "args": a, "id": f"lc-{uuid.uuid4().hex[:8]}"} for n, a in step]
        )
        for step in steps
    ]
    agent = create_agent(
        ToolCallingFake(messages=iter([*answers, AIMessage("done")])),
        tools=[charge],
        middleware=[SagaMiddleware(journal=journal, tools=tools)],
    )
    question: Any = {"messages": [{"role": "user", "content": "go"}]}
    config: Any = {"configurable": {"thread_id": run_id}}
    result = asyncio.run(agent.ainvoke(question, config)) if asynchronous else agent.invoke(question, config)
    assert result["messages"][-1].content == "done"
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def test_langchain_a_tool_exception_handed_to_the_model_is_a_failed_call_and_is_not_refunded(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    from langchain_core.tools import ToolException

    messages = langchain_run(
        journal,
        ledger,
        run_id,
        [[("charge", {"amount": 10})]],
        tools=shop_hooks(ledger),
        declined=ToolException,
    )

    assert [(m.status, m.content) for m in messages] == [("error", "card declined")]  # the model sees it
    (record,) = journal.list_records(run_id)
    assert (record.suffix, record.status, record.error) == (
        "call-1",
        RecordStatus.FAILED,
        "ErrorResult: card declined",
    )
    report = compensate_run(run_id, journal=journal, tools=shop_hooks(ledger))
    assert [e.status for e in report.entries] == [S.SKIPPED_NOT_EXECUTED]  # recover: no charge under its key
    assert refunds(ledger) == []


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_langchain_a_tool_exception_marked_no_effect_needs_no_recover_hook(
    journal: Journal, ledger: Ledger, run_id: str, asynchronous: bool
) -> None:
    from langchain_core.tools import ToolException

    def declined(text: str) -> Exception:
        return no_effect(ToolException(text))

    langchain_run(
        journal,
        ledger,
        run_id,
        [[("charge", {"amount": 10})]],
        tools=refund_only(ledger),
        declined=declined,
        asynchronous=asynchronous,
    )

    (record,) = journal.list_records(run_id)
    assert record.status is RecordStatus.FAILED and record.had_no_effect
    report = compensate_run(run_id, journal=journal, tools=refund_only(ledger))
    assert [e.status for e in report.entries] == [S.SKIPPED_NOT_EXECUTED]
    assert refunds(ledger) == []


def test_langchain_a_call_with_bad_arguments_is_not_journaled_and_nothing_is_refunded(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    messages = langchain_run(
        journal,
        ledger,
        run_id,
        [[("charge", {"amount": "a lot"})]],
        tools=shop_hooks(ledger),
        declined=RuntimeError,
    )

    assert [m.status for m in messages] == ["error"]  # the tool node's own answer to bad arguments
    assert journal.list_records(run_id) == []
    assert ledger.calls() == []  # the tool never ran
    report = compensate_run(run_id, journal=journal, tools=shop_hooks(ledger))
    assert report.entries == [] and refunds(ledger) == []


# -- pydantic-ai ------------------------------------------------------------------------------------
def test_pydantic_ai_a_model_retry_marked_no_effect_unwinds_as_nothing_to_undo(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    require_framework("pydantic_ai")
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from saga_worker.integrations.pydantic_ai import SagaCapability

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n == 0:
            return ModelResponse(parts=[ToolCallPart("charge", {"amount": 0})])
        if n == 1:
            return ModelResponse(parts=[ToolCallPart("charge", {"amount": 10})])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(
        FunctionModel(respond), capabilities=[SagaCapability(journal=journal, tools=refund_only(ledger))]
    )

    @agent.tool_plain
    def charge(amount: int) -> dict[str, Any]:
        key = call_options().idempotency_key
        if amount <= 0:  # checked before the provider is asked: nothing happened
            raise no_effect(ModelRetry("the amount must be positive"))
        ledger.effect(key, "execute:charge")
        return {"charged": amount}

    assert agent.run_sync("go", run_id=run_id).output == "done"

    records = journal.list_records(run_id)
    assert [(r.suffix, r.status, r.had_no_effect) for r in records] == [
        ("call-1", RecordStatus.FAILED, True),
        ("call-2", RecordStatus.SUCCEEDED, False),
    ]
    report = compensate_run(run_id, journal=journal, tools=refund_only(ledger))
    assert [(e.suffix, e.status) for e in report.entries] == [
        ("call-2", S.COMPENSATED),
        ("call-1", S.SKIPPED_NOT_EXECUTED),
    ]
    assert refunds(ledger) == [f"{run_id}:comp:call-2"]
    run = journal.get_run(run_id)
    assert run is not None and run.unwind_state.value == "complete"  # nothing left for the sweeper


def test_pydantic_ai_a_model_retry_not_marked_stays_a_question_for_recover(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    require_framework("pydantic_ai")
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from saga_worker.integrations.pydantic_ai import SagaCapability

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        if n == 0:
            return ModelResponse(parts=[ToolCallPart("charge", {"amount": 10})])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(
        FunctionModel(respond), capabilities=[SagaCapability(journal=journal, tools=refund_only(ledger))]
    )

    @agent.tool_plain(retries=0)
    def charge(amount: int) -> dict[str, Any]:
        raise ModelRetry("the provider timed out")  # it may have charged: only recover could tell

    with pytest.raises(Exception, match="exceeded max retries|retries"):
        agent.run_sync("go", run_id=run_id)

    report = compensate_run(run_id, journal=journal, tools=refund_only(ledger))
    assert [e.status for e in report.entries] == [S.UNCERTAIN]


# -- OpenAI Agents SDK -------------------------------------------------------------------------------
def test_openai_agents_an_exception_marked_no_effect_unwinds_as_nothing_to_undo(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    require_framework("agents")
    from agents import Agent, RunConfig, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from saga_worker.integrations.openai_agents import SagaRunner, saga_tool

    @function_tool
    @saga_tool
    def charge(amount: int) -> dict[str, Any]:
        """Charge the customer."""
        raise no_effect(ValueError("card declined"))

    model = ScriptedModel(
        [[function_call("charge", {"amount": 10}, call_id="fc-1")], [assistant_message("done")]]
    )
    result = SagaRunner(journal=journal, tools=refund_only(ledger)).run_sync(
        Agent(name="shop", model=model, tools=[charge]),
        "go",
        run_id=run_id,
        run_config=RunConfig(tracing_disabled=True),
    )

    assert result.final_output == "done"  # the SDK told the model the tool failed
    (record,) = journal.list_records(run_id)
    assert record.status is RecordStatus.FAILED and record.had_no_effect
    report = compensate_run(run_id, journal=journal, tools=refund_only(ledger))
    assert [e.status for e in report.entries] == [S.SKIPPED_NOT_EXECUTED]
    assert refunds(ledger) == []


# -- a marked error caught, a charge, then a failure: never journaled as no effect (issue 42) --------
def test_langchain_a_failure_raised_after_a_caught_no_effect_error_is_refunded(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    with pytest.raises(RuntimeError, match="receipt"):
        langchain_run(
            journal,
            ledger,
            run_id,
            [[("charge", {"amount": 10})]],
            tools=shop_hooks(ledger),
            body=lambda key: charged_anyway(ledger, key, RuntimeError("the receipt was not stored")),
        )
    assert_the_charge_is_asked_about_and_refunded(journal, ledger, run_id)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_langchain_an_error_result_after_a_caught_no_effect_error_is_refunded(
    journal: Journal, ledger: Ledger, run_id: str, asynchronous: bool
) -> None:
    from langchain_core.tools import ToolException

    messages = langchain_run(
        journal,
        ledger,
        run_id,
        [[("charge", {"amount": 10})]],
        tools=shop_hooks(ledger),
        body=lambda key: charged_anyway(ledger, key, ToolException("the receipt was not stored")),
        asynchronous=asynchronous,
    )
    assert [m.status for m in messages] == ["error"]  # LangChain made it an error result
    assert_the_charge_is_asked_about_and_refunded(journal, ledger, run_id)


def test_langchain_an_error_result_raised_from_a_no_effect_error_keeps_the_mark(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    from langchain_core.tools import ToolException

    def declined(key: str) -> NoReturn:
        try:
            validate(10)
        except ValueError as exc:
            raise ToolException("declined before charging") from exc  # the reported failure's cause
        raise AssertionError("validate(10) raises")

    langchain_run(
        journal, ledger, run_id, [[("charge", {"amount": 10})]], tools=refund_only(ledger), body=declined
    )
    (record,) = journal.list_records(run_id)
    assert record.status is RecordStatus.FAILED and record.had_no_effect


def test_pydantic_ai_a_model_retry_after_a_caught_no_effect_error_is_refunded(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    require_framework("pydantic_ai")
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from saga_worker.integrations.pydantic_ai import SagaCapability

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart("charge", {"amount": 10})])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(
        FunctionModel(respond), capabilities=[SagaCapability(journal=journal, tools=shop_hooks(ledger))]
    )

    @agent.tool_plain(retries=1)
    def charge(amount: int) -> dict[str, Any]:
        key = call_options().idempotency_key
        charged_anyway(ledger, key, ModelRetry("the receipt was not stored"))

    assert agent.run_sync("go", run_id=run_id).output == "done"
    assert_the_charge_is_asked_about_and_refunded(journal, ledger, run_id)


def test_pydantic_ai_an_exception_after_a_caught_no_effect_error_is_refunded(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    require_framework("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from saga_worker.integrations.pydantic_ai import SagaCapability

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart("charge", {"amount": 10})])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(
        FunctionModel(respond), capabilities=[SagaCapability(journal=journal, tools=shop_hooks(ledger))]
    )

    @agent.tool_plain
    def charge(amount: int) -> dict[str, Any]:
        key = call_options().idempotency_key
        charged_anyway(ledger, key, RuntimeError("the receipt was not stored"))

    with pytest.raises(RuntimeError, match="receipt"):
        agent.run_sync("go", run_id=run_id)
    assert_the_charge_is_asked_about_and_refunded(journal, ledger, run_id)


def openai_run(journal: Journal, ledger: Ledger, run_id: str, body: Callable[[], Any]) -> Any:
    require_framework("agents")
    from agents import Agent, RunConfig, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from saga_worker.integrations.openai_agents import SagaRunner, saga_tool

    @function_tool
    @saga_tool
    def charge(amount: int) -> dict[str, Any]:
        """Charge the customer."""
        return dict(body())

    model = ScriptedModel(
        [[function_call("charge", {"amount": 10}, call_id="fc-1")], [assistant_message("done")]]
    )
    return SagaRunner(journal=journal, tools=shop_hooks(ledger)).run_sync(
        Agent(name="shop", model=model, tools=[charge]),
        "go",
        run_id=run_id,
        run_config=RunConfig(tracing_disabled=True),
    )


def test_openai_agents_an_exception_after_a_caught_no_effect_error_is_refunded(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    def body() -> NoReturn:
        charged_anyway(ledger, call_options().idempotency_key, RuntimeError("the receipt was not stored"))

    assert openai_run(journal, ledger, run_id, body).final_output == "done"  # the model was told
    assert_the_charge_is_asked_about_and_refunded(journal, ledger, run_id)


def test_openai_agents_an_exception_raised_from_a_no_effect_error_keeps_the_mark(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    def body() -> NoReturn:
        try:
            validate(10)
        except ValueError as exc:
            raise RuntimeError("declined before charging") from exc
        raise AssertionError("validate(10) raises")

    assert openai_run(journal, ledger, run_id, body).final_output == "done"
    (record,) = journal.list_records(run_id)
    assert record.status is RecordStatus.FAILED and record.had_no_effect
    report = compensate_run(run_id, journal=journal, tools=refund_only(ledger))
    assert [e.status for e in report.entries] == [S.SKIPPED_NOT_EXECUTED] and refunds(ledger) == []
