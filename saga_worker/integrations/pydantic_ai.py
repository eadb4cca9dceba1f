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
(from scratch, or from saved ``message_history``) names every call as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import missing_extra

try:
    from pydantic_ai import DeferredToolRequests, RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
    from pydantic_ai.tools import ToolDefinition
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test in a clean env
    raise missing_extra("pydantic_ai", exc) from exc

from ..errors import InvalidInputError
from ..journal.base import Journal
from ..tools import Tool
from ._agent import AgentJournal, position_of


@dataclass
class SagaCapability(AbstractCapability[Any]):
    """Journal every tool call of the agent's runs; ``tools`` maps tool names to their hooks.

    The saga run id is ``run_id`` if given, else the run id pydantic-ai runs under
    (``agent.run(..., run_id=...)``; pass it, so a re-run gets the same one). ``finish=False`` keeps
    the run open when the agent run completes (several agent runs adding to one saga run). A run
    that ends with ``DeferredToolRequests`` (calls awaiting approval) stays open for its resume;
    pydantic-ai refuses a ``run_id`` already in ``message_history``, so a run resumed that way (or
    continued over several agent runs) takes its saga run id from ``run_id`` here."""

    journal: Journal
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
        result = await handler()
        # A run that stops for approvals (or external results) is not over: its resume, a new agent
        # run with the same history, executes the approved calls under the same saga run.
        if self.finish and not isinstance(getattr(result, "output", None), DeferredToolRequests):
            await journal.afinish()
        return result

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
        position = position_of(call.tool_call_id, _history_call_ids(ctx.messages))
        outcome = await journal.acall(
            call.tool_name,
            to_jsonable_python(args),
            position,
            lambda: handler(args),
            to_jsonable_python,
        )
        return outcome.live if outcome.executed else outcome.output


def _history_call_ids(messages: list[ModelMessage]) -> list[str]:
    return [
        part.tool_call_id
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ToolCallPart)
    ]


__all__ = ["SagaCapability"]
