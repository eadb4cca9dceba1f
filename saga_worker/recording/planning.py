"""Planners decide a run's next tool calls; ``scripted`` is the planner of a fixed script."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """One call a planner asks for. Without an id it is named ``call-N`` (N: its 1-based position in the run)."""

    tool: str
    input: Any = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Finish:
    """The planner's last word: the run ends ``finished`` (no error) or ``failed`` (with ``error``)."""

    text: str = ""
    error: str | None = None


@dataclass(frozen=True)
class CallResult:
    """What one call gave, as the planner sees it."""

    tool_call_id: str
    tool: str
    input: Any
    output: Any = None
    error: str | None = None


@dataclass(frozen=True)
class RunState:
    """What a planner decides from: ``step`` is the number of decisions made so far."""

    run_id: str
    prompt: str
    step: int
    results: tuple[CallResult, ...] = ()


Decision = Sequence[ToolCall] | Finish
Planner = Callable[[RunState], Decision]


def scripted(*steps: ToolCall | Sequence[ToolCall], final: str = "") -> Planner:
    """A planner that returns ``steps`` in order, then finishes with ``final``.

    It keeps no state of its own: its place is ``state.step`` (the decisions already journaled), so a
    fresh ``scripted(...)`` resumes a run exactly where it stopped. It gives up at the first error.
    """
    script: list[list[ToolCall]] = [[s] if isinstance(s, ToolCall) else list(s) for s in steps]

    def plan(state: RunState) -> Decision:
        failed = [r for r in state.results if r.error is not None]
        if failed:
            first = failed[0]
            return Finish(error=f"tool {first.tool!r} (call {first.tool_call_id}) failed: {first.error}")
        if state.step < len(script):
            return script[state.step]
        return Finish(text=final)

    return plan
