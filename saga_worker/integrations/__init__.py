"""saga-worker under agent frameworks: pydantic-ai, LangChain v1 / LangGraph, the OpenAI Agents SDK.

Each framework's adapter is its own module (``.pydantic_ai``, ``.langchain``, ``.openai_agents``),
imported only when asked for, so the framework stays an optional extra
(``pip install 'saga-worker[pydantic-ai]'`` and so on). All three route every tool call of an agent
run through one ``saga()`` block per call (``_agent.AgentJournal``): the framework's own tool
function is the ``execute`` hook, and the compensate/recover hooks come from a mapping of tool
name to :func:`hooks` (the same mapping a Celery worker loads through ``SAGA_TOOLS``).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, TypeVar

from ..errors import InvalidInputError
from ..recording.tools import CallOptions, Hook, Tool

_EXTRAS = {
    "pydantic_ai": "pydantic-ai",
    "langchain": "langchain",
    "openai_agents": "openai-agents",
}


# The call a framework tool function is executing right now, set around it by the adapter, and its
# notes, read back by the adapter once it returns: the marked errors that could not carry the mark
# themselves (``"marked"``), and the exception the framework turned into an error result (``"reported"``).
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
    tool has none). Use it only when nothing can have happened.

    The mark is the error's, not the call's: it counts only when the failure the call reports is
    this error, or was raised ``from`` it. A marked error the tool caught and went on from says
    nothing about what the tool did afterwards."""
    try:
        setattr(error, _NO_EFFECT_ATTR, True)
    except AttributeError:  # an exception type without a __dict__: the call's notes remember it
        notes = _CURRENT_NOTES.get()
        if notes is not None:
            notes.setdefault("marked", []).append(error)
    return error


def said_no_effect(error: BaseException | None, notes: dict[str, Any] | None = None) -> bool:
    """Whether ``error``, or an error it was raised ``from`` (its ``__cause__`` chain), was marked
    with :func:`no_effect`. Never the implicit ``__context__``: an error raised while handling a
    marked one (``except Marked: charge(); raise Other``) is not that error's failure."""
    marked = (notes if notes is not None else _CURRENT_NOTES.get() or {}).get("marked", [])
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if getattr(error, _NO_EFFECT_ATTR, False) or any(error is m for m in marked):
            return True
        seen.add(id(error))
        error = error.__cause__
    return False


def note_reported(error: BaseException) -> None:
    """Called by an adapter when its framework turns ``error``, raised by the tool, into an error
    result: that result is the call's failure, and carries ``error``'s mark (and no other)."""
    notes = _CURRENT_NOTES.get()
    if notes is not None:
        notes["reported"] = error


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
