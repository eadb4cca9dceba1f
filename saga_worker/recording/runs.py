"""Durable runs: planner decisions and tool calls journaled so a run executes each side effect once.

A tool record is claimed (``running``) before ``execute``, so a crash mid-call reads as interrupted,
never as not started. A recorded success is replayed, never executed again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..core.checks import check_run_id, check_storable_text
from ..errors import InvalidInputError, UnknownRunError
from ..journal.records import RunInfo, RunStatus
from ..journal.retention import refuse_stopped
from ..journal.roles import RunJournal
from ..observing import tracing
from .calls import CallSettler
from .decisions import decoded_calls, encode_decision
from .planning import CallResult, Planner, RunState
from .run_events import EventKind, PendingCall, RunEvent, RunResult
from .tools import Tool, check_tools

__all__ = [
    "EventKind",
    "PendingCall",
    "RunEvent",
    "RunResult",
    "fork_run",
    "resume_run",
    "run_durable",
    "stream_durable",
]


# -- public entry points ---------------------------------------------------------------------------


def run_durable(
    run_id: str,
    *,
    journal: RunJournal,
    tools: Mapping[str, Tool],
    planner: Planner,
    prompt: str = "",
    max_steps: int = 20,
) -> RunResult:
    """Run (or continue) a run to its end and return its result."""
    result: RunResult | None = None
    for event in stream_durable(
        run_id, journal=journal, tools=tools, planner=planner, prompt=prompt, max_steps=max_steps
    ):
        result = event.result if event.kind == "end" else result
    assert result is not None
    return result


def stream_durable(
    run_id: str,
    *,
    journal: RunJournal,
    tools: Mapping[str, Tool],
    planner: Planner,
    prompt: str = "",
    max_steps: int = 20,
) -> Iterator[RunEvent]:
    """As ``run_durable``, yielding events as the run goes. Misuse and a condemned run raise here, at
    the call, before anything is written."""
    loop = _RunLoop(run_id, journal, tools, planner, max_steps)
    check_storable_text(prompt, "prompt", run_id=run_id)
    run = journal.get_run(run_id)
    refuse_stopped(run)  # condemned or pruned: it never moves, and a pruned one has nothing to replay
    # A run already started keeps its journaled prompt: the planner must see what it saw before.
    return tracing.traced_run(loop, run, loop.events(run, prompt if run is None else run.prompt), "run")


def resume_run(
    run_id: str, *, journal: RunJournal, tools: Mapping[str, Tool], planner: Planner, max_steps: int = 20
) -> RunResult:
    """Continue a stopped or crashed run from its journal (replaying what it already did)."""
    loop = _RunLoop(run_id, journal, tools, planner, max_steps)
    run = journal.get_run(run_id)
    if run is None or run.status is RunStatus.UNKNOWN and not run.condemned:
        raise UnknownRunError(run_id)
    refuse_stopped(run)
    result: RunResult | None = None
    for event in tracing.traced_run(loop, run, loop.events(run, run.prompt), "resume"):
        result = event.result if event.kind == "end" else result
    assert result is not None
    return result


def fork_run(journal: RunJournal, run_id: str, step: int, new_run_id: str) -> str:
    """Copy the run's first ``step`` decisions and the tool records they produced into ``new_run_id``."""
    check_run_id(run_id)
    check_run_id(new_run_id)
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise InvalidInputError(f"fork step must be a whole number >= 0, got {step!r}")
    run = journal.get_run(run_id)
    if run is None:
        raise UnknownRunError(run_id)
    refuse_stopped(run)
    made = len(journal.list_decisions(run_id))
    if step > made:
        raise InvalidInputError(
            f"run {run_id!r} has made {made} decisions; cannot fork at step {step}", run_id=run_id, step=step
        )
    journal.fork(run_id, step, new_run_id)
    return new_run_id


class _RunLoop:
    """One run's loop: replays journaled decisions and records, asks the planner for the rest."""

    def __init__(
        self, run_id: str, journal: RunJournal, tools: Mapping[str, Tool], planner: Planner, max_steps: int
    ) -> None:
        self.run_id = check_run_id(run_id)
        self.tools = check_tools(tools)
        if not callable(planner):
            raise InvalidInputError(f"planner must be callable, got {type(planner).__name__}")
        if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
            raise InvalidInputError(f"max_steps must be a whole number >= 1, got {max_steps!r}")
        self.journal = journal
        self.planner = planner
        self.max_steps = max_steps
        self.calls = CallSettler(self.run_id, journal, self.tools)

    @property
    def trace(self) -> Any:
        """The run's span, the parent of its calls' (``tracing.traced_run`` sets it)."""
        return self.calls.trace

    @trace.setter
    def trace(self, span: Any) -> None:
        self.calls.trace = span

    def events(self, run: RunInfo | None, prompt: str) -> Iterator[RunEvent]:
        if run is not None and run.ended:
            yield RunEvent("end", self.run_id, 0, result=RunResult.of(run))
            return
        started = run is not None
        decisions = self.journal.list_decisions(self.run_id) if started else []
        results: list[CallResult] = []
        used_ids: set[str] = set()
        calls_made = 0
        step = 0
        while True:
            if step < len(decisions):
                payload = decisions[step]
            elif step >= self.max_steps:
                yield self._end(
                    RunStatus.FAILED, "", f"max_steps ({self.max_steps}) reached without finishing", step
                )
                return
            else:
                state = RunState(self.run_id, prompt, step, tuple(results))
                payload = encode_decision(self.run_id, self.planner(state), self.tools, calls_made, used_ids)
                for call in decoded_calls(self.run_id, step + 1, payload) or ():
                    self.calls.refuse_new_in_open_transaction(call["id"], call["tool"], call["input"])
                if not started:  # written only now, so a rejected first decision leaves nothing behind
                    self.journal.start_run(self.run_id, prompt, traceparent=self.trace.traceparent)
                    started = True
                payload = self.journal.record_decision(self.run_id, step + 1, payload)
            step += 1
            calls = decoded_calls(self.run_id, step, payload)
            if calls is None:
                error = payload.get("error")
                status = RunStatus.FAILED if error is not None else RunStatus.FINISHED
                yield self._end(status, str(payload.get("text") or ""), error, step)
                return
            yield RunEvent("decision", self.run_id, step)
            pending: list[PendingCall] = []
            for call in calls:
                calls_made += 1
                used_ids.add(call["id"])
                event = self.calls.settle(step, call["id"], call["tool"], call["input"])
                if event.outcome == "suspended":
                    pending.append(PendingCall(call["id"], call["tool"], event.input))
                else:
                    results.append(
                        CallResult(call["id"], call["tool"], event.input, event.output, event.error)
                    )
                yield event
            if pending:
                # Not an end: the run stays running in the journal, and the planner is not asked again
                # until every call of this decision is decided and done.
                result = RunResult(self.run_id, "suspended", pending=tuple(pending))
                yield RunEvent("end", self.run_id, step, result=result)
                return

    def _end(self, status: RunStatus, text: str, error: str | None, step: int) -> RunEvent:
        run = self.journal.end_run(self.run_id, status, text, error)
        return RunEvent("end", self.run_id, step, result=RunResult.of(run))

    # -- cross-run calls (one execution shared by identical calls of any run within the window) ------
