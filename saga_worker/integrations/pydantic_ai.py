"""pydantic-ai: a capability that routes every tool call of an agent run through the saga journal.

```python
from saga_worker.integrations import hooks
from saga_worker.integrations.pydantic_ai import SagaCapability

agent = Agent(model, capabilities=[SagaCapability(journal=journal, tools={"charge": hooks(compensate=refund)})])
agent.run_sync("place order 7", run_id="order-7")     # pydantic-ai's own run id is the saga run id
```

It uses pydantic-ai's own extension point for cross-cutting tool behaviour, a capability's
``wrap_tool_execute`` (around the validated call, inside retries and approvals), and its
``wrap_run`` (a condemned run id refuses to start; a run that completes ends ``finished``). A call's
position comes from the run's message history (``ctx.messages``), so a re-run with the same run id
(from scratch, or from saved ``message_history``) names every call as before. A call pydantic-ai
rejects before its tool runs (arguments that fail validation, a tool the agent does not have, an
output tool) takes no position: ``wrap_tool_validate`` sees the rejections of this run, and a saved
history says which of its calls were retried for bad arguments or an unknown tool.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from . import missing_extra

try:
    from pydantic_ai import DeferredToolRequests, RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import ApprovalRequired, CallDeferred
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.tools import ToolDefinition
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test in a clean env
    raise missing_extra("pydantic_ai", exc) from exc

from ..errors import InvalidInputError
from ..journal.roles import RunJournal
from ..recording.tools import Tool
from ._agent import AgentJournal, HistoryCall, slot_of

# The ids of calls pydantic-ai rejected in validation during the current agent run (set by wrap_run).
_REJECTED: ContextVar[set[str] | None] = ContextVar("saga_pydantic_ai_rejected", default=None)
# Retry causes of a call rejected before its tool could run (the tool's own ModelRetry is not one).
_REJECTED_CAUSES = frozenset({"validation_error", "unknown_tool", "unavailable_tool"})
_EXECUTED_KINDS = frozenset({"function", "unapproved"})


@dataclass
class SagaCapability(AbstractCapability[Any]):
    """Journal every tool call of the agent's runs; ``tools`` maps tool names to their hooks.

    The saga run id is ``run_id`` if given, else the run id pydantic-ai runs under
    (``agent.run(..., run_id=...)``; pass it, so a re-run gets the same one). ``finish=False`` keeps
    the run open when the agent run completes (several agent runs adding to one saga run). A run
    that ends with ``DeferredToolRequests`` (calls awaiting approval) stays open for its resume;
    pydantic-ai refuses a ``run_id`` already in ``message_history``, so a run resumed that way (or
    continued over several agent runs) takes its saga run id from ``run_id`` here."""

    journal: RunJournal
    tools: Mapping[str, Tool] | None = None
    run_id: str | None = None
    finish: bool = True

    def _journal_for(self, ctx: RunContext[Any]) -> AgentJournal:
        run_id = self.run_id or ctx.run_id
        if run_id is None:
            raise InvalidInputError("SagaCapability needs a run id: pass run_id= to it or to agent.run()")
        prompt = ctx.prompt if isinstance(ctx.prompt, str) else ""
        return AgentJournal(run_id, journal=self.journal, tools=self.tools, prompt=prompt)

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> Any:
        journal = self._journal_for(ctx)
        journal.refuse_if_condemned()  # before the first model request: a condemned run never starts
        token = _REJECTED.set(set())
        try:
            result = await handler()
        finally:
            _REJECTED.reset(token)
        # A run that stops for approvals (or external results) is not over: its resume, a new agent
        # run with the same history, executes the approved calls under the same saga run.
        if self.finish and not isinstance(getattr(result, "output", None), DeferredToolRequests):
            await journal.afinish()
        return result

    async def wrap_tool_validate(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: Any,
    ) -> Any:
        try:
            return await handler(args)
        except (CallDeferred, ApprovalRequired):
            raise  # deferred, not rejected: it may run once resolved
        except Exception:
            rejected = _REJECTED.get()
            if rejected is not None:
                rejected.add(call.tool_call_id)  # never executed: it takes no position
            raise

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: Any,
    ) -> Any:
        if tool_def.kind == "unapproved" and not ctx.tool_call_approved:
            return await handler(args)  # not executed here: it defers for approval, and runs once approved
        journal = self._journal_for(ctx)
        slot = slot_of(call.tool_call_id, _history(ctx))
        outcome = await journal.acall(
            call.tool_name,
            to_jsonable_python(args),
            slot,
            lambda: handler(args),
            to_jsonable_python,
        )
        return outcome.live if outcome.executed else outcome.output


def _history(ctx: RunContext[Any]) -> list[list[HistoryCall]]:
    """The run's calls per model response, each marked with whether it reaches the journal."""
    rejected = set(_REJECTED.get() or ()) | _rejected_in(ctx.messages)
    manager = ctx.tool_manager

    def reaches(part: ToolCallPart) -> bool:
        if part.tool_call_id in rejected:
            return False
        if manager is None:
            return True
        tool_def = manager.get_tool_def(part.tool_name)
        return tool_def is not None and tool_def.kind in _EXECUTED_KINDS

    return [
        [
            HistoryCall(part.tool_call_id, reaches(part))
            for part in message.parts
            if isinstance(part, ToolCallPart)
        ]
        for message in ctx.messages
        if isinstance(message, ModelResponse)
    ]


def _rejected_in(messages: list[ModelMessage]) -> set[str]:
    """Calls a (saved) history answers as rejected before their tool ran: bad arguments, unknown tool."""
    rejected = set()
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, ToolReturnPart) and part.outcome == "retried":
                if part.retry is not None and part.retry.cause in _REJECTED_CAUSES:
                    rejected.add(part.tool_call_id)
            elif isinstance(part, RetryPromptPart) and isinstance(part.content, list):  # a validation error
                rejected.add(part.tool_call_id)
    return rejected


__all__ = ["SagaCapability"]
