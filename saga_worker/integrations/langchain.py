"""LangChain v1 / LangGraph: an agent middleware that routes every tool call through the saga journal.

```python
from langchain.agents import create_agent
from saga_worker.integrations import hooks
from saga_worker.integrations.langchain import SagaMiddleware

agent = create_agent(model, tools=[charge, reserve], checkpointer=saver,
                     middleware=[SagaMiddleware(journal=journal, tools={"charge": hooks(compensate=refund)})])
agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "order-7"}})   # the thread is the run
```

It is LangChain's own hook for tool execution, ``wrap_tool_call`` / ``awrap_tool_call`` (sync
``invoke`` and async ``ainvoke``), around the tool node's call of each tool. The LangGraph thread id
is the saga run id: a thread's turns are one run, so the middleware never ends the run. A call's
position is counted from the thread's messages (``state["messages"]``), so a re-run of the same
input, or a resume from the checkpointer, names every call as before. A call LangChain would reject
before its tool runs (a tool the agent does not have, arguments that fail the tool's schema) is
handed straight to the tool node, which answers it with its error message: it is not journaled and
takes no position (the agent's tools are known from its model requests).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from . import missing_extra, note_reported

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import BaseTool
    from langgraph.config import get_config
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command
    from pydantic import BaseModel, ValidationError
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test in a clean env
    raise missing_extra("langchain", exc) from exc

try:  # how BaseTool answers a caught ToolException / ValidationError for each kind of handler setting
    from langchain_core.tools.base import _handle_tool_error, _handle_validation_error

    _DEFAULT_HANDLERS: dict[str, Callable[..., Any]] = {
        "handle_tool_error": _handle_tool_error,
        "handle_validation_error": _handle_validation_error,
    }
except ImportError:  # pragma: no cover - a langchain-core that moved them
    _DEFAULT_HANDLERS = {}

from ..core.checks import check_run_id
from ..errors import InvalidInputError
from ..journal.roles import RunJournal
from ..recording.tools import Tool, check_tools
from ._agent import AgentJournal, HistoryCall, Outcome, Slot, slot_of


class SagaMiddleware(AgentMiddleware[Any, Any, Any]):
    """Journal every tool call of the agent; ``tools`` maps tool names to their hooks.

    The run id is the thread id of the invocation (``config["configurable"]["thread_id"]``), or
    ``run_id`` if given (one saga run whatever the thread)."""

    def __init__(
        self, *, journal: RunJournal, tools: Mapping[str, Tool] | None = None, run_id: str | None = None
    ) -> None:
        super().__init__()
        self.journal = journal
        self.saga_tools = check_tools(tools)  # a bad mapping fails here, not at the first tool call
        self.run_id = check_run_id(run_id) if run_id is not None else None
        self._agent_tools: dict[str, BaseTool] | None = None  # the agent's tools, from its model requests

    # -- the run ------------------------------------------------------------------------------------
    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        self._journal(get_config()).refuse_if_condemned()  # before the first model call
        return None

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)

    # -- the model's requests: they name the agent's tools ------------------------------------------
    def wrap_model_call(self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Any]) -> Any:
        self._note_tools(request)
        return handler(request)

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[Any]]
    ) -> Any:
        self._note_tools(request)
        return await handler(request)

    def _note_tools(self, request: ModelRequest[Any]) -> None:
        self._agent_tools = {t.name: t for t in request.tools if isinstance(t, BaseTool)}

    # -- each tool call -----------------------------------------------------------------------------
    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        if not _reaches(request.tool, request.tool_call):
            return handler(request)  # the tool node answers it with its error; nothing to journal
        journal, name, args, slot = self._call(request)
        reporting = _reporting(request)
        outcome = journal.call(
            name, args, slot, lambda: handler(reporting), _json_of_message, _error_of_message
        )
        return _message(request, outcome)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        if not _reaches(request.tool, request.tool_call):
            return await handler(request)
        journal, name, args, slot = self._call(request)
        reporting = _reporting(request)
        outcome = await journal.acall(
            name, args, slot, lambda: handler(reporting), _json_of_message, _error_of_message
        )
        return _message(request, outcome)

    def _call(self, request: ToolCallRequest) -> tuple[AgentJournal, str, Any, Slot]:
        call = request.tool_call
        journal = self._journal(request.runtime.config)
        known = dict(self._agent_tools or {})
        if request.tool is not None:
            known[request.tool.name] = request.tool

        def reaches(c: Any) -> bool:
            if c["name"] in known:
                return _reaches(known[c["name"]], c)
            return self._agent_tools is None  # tools not known yet (a resume into the tool node): count it

        responses = [
            [HistoryCall(c["id"] or "", reaches(c)) for c in m.tool_calls]
            for m in _messages(request.state)
            if isinstance(m, AIMessage)
        ]
        return journal, call["name"], dict(call["args"]), slot_of(call["id"] or "", responses)

    def _journal(self, config: Any) -> AgentJournal:
        run_id = self.run_id or ((config or {}).get("configurable") or {}).get("thread_id")
        if not run_id:
            raise InvalidInputError(
                "SagaMiddleware needs a run id: invoke the agent with "
                "config={'configurable': {'thread_id': ...}} or pass SagaMiddleware(run_id=...)"
            )
        return AgentJournal(str(run_id), journal=self.journal, tools=self.saga_tools)


def _reaches(tool: BaseTool | None, call: Any) -> bool:
    """Whether the tool node would run the tool for this call: False for a tool the agent does not
    have, or arguments its schema rejects (the node answers both with an error and runs nothing)."""
    if tool is None:
        return False
    try:
        schema = tool.tool_call_schema
    except Exception:  # noqa: BLE001 - a schema we cannot build: count the call, the journal decides
        return True
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            schema.model_validate(call.get("args") or {})
        except ValidationError:
            return False
        except Exception:  # noqa: BLE001 - a validator that fails otherwise: let the tool node decide
            return True
    return True


def _reporting(request: ToolCallRequest) -> ToolCallRequest:
    """The request with a copy of its tool whose error handlers (``handle_tool_error``,
    ``handle_validation_error``) first note the exception LangChain is turning into an error result,
    then answer as the tool's own would: the error result carries that exception's ``no_effect``
    mark, not the mark of an error the tool caught before it. Without LangChain's default handling
    to defer to, the tool is left as it is (its error results then carry no mark: asked to ``recover``)."""
    tool = request.tool
    if tool is None:
        return request
    update = {
        field: _noting(flag, default)
        for field, default in _DEFAULT_HANDLERS.items()
        if (flag := getattr(tool, field, None))
    }
    if not update:
        return request
    return request.override(tool=tool.model_copy(update=update))


def _noting(flag: Any, default: Callable[..., Any]) -> Callable[[Any], Any]:
    def handle(error: Any) -> Any:
        note_reported(error)
        return default(error, flag=flag)

    return handle


def _messages(state: Any) -> list[Any]:
    messages = state.get("messages") if isinstance(state, dict) else getattr(state, "messages", None)
    return list(messages or [])


def _json_of_message(result: Any) -> Any:
    """A tool message as journaled: what a replay needs to hand the model the same answer."""
    if not isinstance(result, ToolMessage):
        raise TypeError(
            f"the tool returned a {type(result).__name__}; only ToolMessage results can be journaled and replayed"
        )
    return {"content": result.content, "artifact": result.artifact, "status": result.status}


def _error_of_message(result: Any) -> str | None:
    """An error result (``status="error"``: the tool raised and LangChain caught it) is a failed call."""
    if isinstance(result, ToolMessage) and result.status == "error":
        return result.content if isinstance(result.content, str) else str(result.content)
    return None


def _message(request: ToolCallRequest, outcome: Outcome) -> ToolMessage | Command[Any]:
    if outcome.executed:
        live: ToolMessage | Command[Any] = outcome.live
        return live
    recorded = outcome.output if isinstance(outcome.output, dict) else {"content": outcome.output}
    # The replayed answer goes to this model response's call id, whatever id the journaled call had.
    return ToolMessage(
        content=recorded.get("content", ""),
        artifact=recorded.get("artifact"),
        status=recorded.get("status", "success"),
        tool_call_id=request.tool_call["id"] or "",
        name=request.tool_call["name"],
    )


__all__ = ["SagaMiddleware"]
