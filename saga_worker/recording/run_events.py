"""What a run tells its caller: each event as it goes, and how it stopped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..journal.records import RunInfo, RunStatus, ToolRecord


@dataclass(frozen=True)
class PendingCall:
    """A call the run stopped at: it waits for ``approve`` or ``deny`` (by its ``tool_call_id``)."""

    tool_call_id: str
    tool: str
    input: Any


@dataclass(frozen=True)
class RunResult:
    """How a run stopped: ``finished``/``failed`` (its end, journaled), or ``suspended`` (not an end:
    ``pending`` lists the calls waiting for a person; ``resume_run`` goes on after the decisions)."""

    run_id: str
    status: Literal["finished", "failed", "suspended"]
    text: str = ""
    error: str | None = None
    pending: tuple[PendingCall, ...] = ()

    @classmethod
    def of(cls, run: RunInfo) -> RunResult:
        return cls(
            run.run_id, "finished" if run.status is RunStatus.FINISHED else "failed", run.text, run.error
        )


EventKind = Literal["decision", "tool", "end"]


@dataclass(frozen=True)
class RunEvent:
    """One thing that happened in a run. ``tool`` events say whether the call was executed, replayed
    from the journal, or recovered (``recover`` said it had happened); ``end`` carries the result."""

    kind: EventKind
    run_id: str
    step: int
    tool_call_id: str | None = None
    tool: str | None = None
    input: Any = None
    output: Any = None
    error: str | None = None
    # ``suspended``: waits for a person; ``shared``: a cross-run call mirrored another run's execution.
    outcome: (
        Literal["executed", "replayed", "recovered", "failed", "denied", "suspended", "shared"] | None
    ) = None
    result: RunResult | None = None


def event_of(
    run_id: str, step: int, record: ToolRecord, outcome: Any, *, output: Any = None, error: str | None = None
) -> RunEvent:
    """The ``tool`` event of a settled call, from its record: a replayed or recovered call hands on
    the journaled output, a denied one the reason it was denied."""
    if outcome in ("replayed", "recovered"):
        output = record.output
    if outcome == "denied":
        error = record.error or f"call was {record.status.value}"
    return RunEvent(
        "tool", run_id, step, record.tool_call_id, record.tool_name, record.input, output, error, outcome
    )
