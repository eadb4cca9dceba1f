"""saga-worker under agent frameworks: pydantic-ai, LangChain v1 / LangGraph, the OpenAI Agents SDK.

Each framework's adapter is its own module (``.pydantic_ai``, ``.langchain``, ``.openai_agents``),
imported only when asked for, so the framework stays an optional extra
(``pip install 'saga-worker[pydantic-ai]'`` and so on). All three route every tool call of an agent
run through one ``saga()`` block per call (``_agent.AgentJournal``): the framework's own tool
function is the ``execute`` hook, and the compensate/recover hooks come from a mapping of tool
name to :func:`hooks` (the same mapping a Celery worker loads through ``SAGA_TOOLS``).
"""

from __future__ import annotations

from contextlib import suppress
from contextvars import ContextVar
from typing import Any, TypeVar

from ..errors import InvalidInputError
from ..tools import CallOptions, Hook, Tool

_EXTRAS = {
    "pydantic_ai": "pydantic-ai",
    "langchain": "langchain",
    "openai_agents": "openai-agents",
}


# The call a framework tool function is executing right now, set around it by the adapter, and
# what that call has said about itself (``no_effect``), read back by the adapter once it returns.
_CURRENT_CALL: ContextVar[CallOptions | None] = ContextVar("saga_current_call", default=None)
_CURRENT_NOTES: ContextVar[dict[str, Any] | None] = ContextVar("saga_current_notes", default=None)
_NO_EFFECT_ATTR = "__saga_no_effect__"

E = TypeVar("E", bound=BaseException)


def call_options() -> CallOptions:
    """Inside a framework tool function that saga-worker is executing: the call's ``CallOptions``,
    whose ``idempotency_key`` is the one to hand the provider (stable across re-runs)."""
    opts = _CURRENT_CALL.get()
    if opts is None:
        raise InvalidInputError(
            "call_options() is only known inside a tool call that saga-worker is executing (an agent run "
            "with the saga capability, middleware or runner)"
        )
    return opts


def no_effect(error: E) -> E:
    """Mark the error a framework tool is about to raise (or return as an error result) as one raised
    **before any side effect**, and hand it back: ``raise no_effect(ModelRetry("amount must be
    positive"))``, ``raise no_effect(ToolException("card declined"))``.

    The call is journaled ``failed`` with the mark (``saga_worker.NoEffect``): an unwind reads it
    ``skipped-not-executed`` without asking ``recover``, and a re-run may execute it again under the
    same key. Without the mark a failed call is a question for ``recover`` (``uncertain`` when the
    tool has none). Use it only when nothing can have happened."""
    with suppress(AttributeError):  # an exception type without a __dict__: the call's notes still say it
        setattr(error, _NO_EFFECT_ATTR, True)
    notes = _CURRENT_NOTES.get()
    if notes is not None:
        notes["no_effect"] = True
    return error


def said_no_effect(error: BaseException | None) -> bool:
    """Whether the call executing now, or ``error``, was marked with :func:`no_effect`."""
    notes = _CURRENT_NOTES.get()
    return bool((notes or {}).get("no_effect")) or bool(getattr(error, _NO_EFFECT_ATTR, False))


def _executed_by_the_agent(input: Any, opts: CallOptions) -> Any:
    raise InvalidInputError(
        f"run {opts.run_id!r}: call {opts.tool_call_id!r} is executed by its agent framework; a tool made "
        "with saga_worker.integrations.hooks() carries only compensate/recover hooks",
        run_id=opts.run_id,
        tool_call_id=opts.tool_call_id,
    )


def hooks(
    compensate: Hook | None = None,
    recover: Hook | None = None,
    *,
    idempotency: str = "call",
    side_effect: bool = True,
    idempotent: bool = False,
    description: str = "",
) -> Tool:
    """The saga side of an agent framework's tool: how to undo it (``compensate``), how to tell
    whether an interrupted call took effect (``recover``), and its options. The framework's own tool
    function executes the call, so the ``Tool`` made here has no ``execute`` of its own to run."""
    return Tool(
        _executed_by_the_agent,
        compensate,
        recover,
        idempotency=idempotency,  # type: ignore[arg-type]  # checked by Tool
        side_effect=side_effect,
        idempotent=idempotent,
        description=description,
    )


def missing_extra(module: str, error: ImportError) -> ImportError:
    """The error to raise when an adapter's framework is not installed: says which extra to install."""
    extra = _EXTRAS[module]
    return ImportError(
        f"saga_worker.integrations.{module} needs the {extra} package: pip install 'saga-worker[{extra}]' "
        f"({error})"
    )


__all__ = ["call_options", "hooks", "missing_extra", "no_effect"]
