"""Durable runs: planner decisions and tool calls journaled so a run executes each side effect once.

A tool record is claimed (``running``) before ``execute``, so a crash mid-call reads as interrupted,
never as not started. A recorded success is replayed, never executed again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from . import faults, tracing, transactions
from .compensation.engine import new_owner
from .compensation.leases import keeper
from .errors import (
    CompensatedRunError,
    InvalidInputError,
    MalformedRecordError,
    SideEffectRetryBlockedError,
    UnknownRunError,
    UnknownToolError,
)
from .journal.base import Journal
from .journal.records import (
    NO_EFFECT_OUTPUT,
    NewRecord,
    RecordStatus,
    RunInfo,
    RunStatus,
    SharedAction,
    SharedStatus,
    ToolRecord,
)
from .keys import (
    CROSS_MODE,
    canonical_json,
    check_call_id,
    check_run_id,
    execute_key,
    json_problem,
    record_suffix,
    shared_key,
)
from .planning import CallResult, Finish, Planner, RunState, ToolCall
from .settings import get_settings
from .storable import bounded_error, check_storable_text, exception_text, storable_text
from .tools import (
    CallOptions,
    NoEffect,
    RecoverRefusal,
    RecoverResult,
    Tool,
    ask_recover,
    call_hook,
    check_tools,
)

_MAX_RACE_RETRIES = 5
# How long a call waits for another process that is executing the same record before giving up.
_GUARD_WAIT_S = 5.0
# How long a cross-run call waits for another run that is executing the same shared call.
_SHARED_WAIT_S = 30.0
# The guard namespace of shared executions (not a valid run id, so it never meets a run's own guard).
_SHARED_GUARD = "~shared"


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


# -- public entry points ---------------------------------------------------------------------------


def run_durable(
    run_id: str,
    *,
    journal: Journal,
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
    journal: Journal,
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
    if run is not None and run.condemned:
        raise CompensatedRunError(run_id)
    # A run already started keeps its journaled prompt: the planner must see what it saw before.
    return tracing.traced_run(loop, run, loop.events(run, prompt if run is None else run.prompt), "run")


def resume_run(
    run_id: str, *, journal: Journal, tools: Mapping[str, Tool], planner: Planner, max_steps: int = 20
) -> RunResult:
    """Continue a stopped or crashed run from its journal (replaying what it already did)."""
    loop = _RunLoop(run_id, journal, tools, planner, max_steps)
    run = journal.get_run(run_id)
    if run is None or run.status is RunStatus.UNKNOWN and not run.condemned:
        raise UnknownRunError(run_id)
    if run.condemned:
        raise CompensatedRunError(run_id)
    result: RunResult | None = None
    for event in tracing.traced_run(loop, run, loop.events(run, run.prompt), "resume"):
        result = event.result if event.kind == "end" else result
    assert result is not None
    return result


def fork_run(journal: Journal, run_id: str, step: int, new_run_id: str) -> str:
    """Copy the run's first ``step`` decisions and the tool records they produced into ``new_run_id``."""
    check_run_id(run_id)
    check_run_id(new_run_id)
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise InvalidInputError(f"fork step must be a whole number >= 0, got {step!r}")
    run = journal.get_run(run_id)
    if run is None:
        raise UnknownRunError(run_id)
    if run.condemned:
        raise CompensatedRunError(run_id)
    made = len(journal.list_decisions(run_id))
    if step > made:
        raise InvalidInputError(
            f"run {run_id!r} has made {made} decisions; cannot fork at step {step}", run_id=run_id, step=step
        )
    journal.fork(run_id, step, new_run_id)
    return new_run_id


def _must_be_durable(tool: Tool) -> bool:
    """Is this call's claim fsynced before ``execute``? Only where losing it could cost a second
    effect: a side-effecting call that is not idempotent. Lost in a power cut, its claim would make
    the call read as never started, and a resume would execute it again without asking ``recover``.
    An idempotent call executed again is harmless (same key), a read-only one has no effect."""
    return tool.side_effect and not tool.idempotent


# -- decisions as journaled ------------------------------------------------------------------------


def _encode_decision(
    run_id: str, decision: object, tools: Mapping[str, Tool], calls_so_far: int, used_ids: set[str]
) -> dict[str, Any]:
    """Validate a planner's answer and give every call its id, before anything is written."""
    if isinstance(decision, Finish):
        # The text is the run's answer: refused if unstorable. The error is a failure's words: kept, escaped.
        text = check_storable_text(str(decision.text), "the planner's Finish text", run_id=run_id)
        error = None if decision.error is None else storable_text(bounded_error(str(decision.error)))
        return {"kind": "finish", "text": text, "error": error}
    if isinstance(decision, ToolCall):
        decision = [decision]
    if not isinstance(decision, Sequence) or isinstance(decision, str | bytes):
        raise InvalidInputError(
            f"run {run_id!r}: planner must return a list of ToolCall or a Finish, "
            f"got {type(decision).__name__}",
            run_id=run_id,
        )
    calls = []
    seen = set(used_ids)
    for position, call in enumerate(decision, start=calls_so_far + 1):
        if not isinstance(call, ToolCall):
            raise InvalidInputError(
                f"run {run_id!r}: planner returned {type(call).__name__} where a ToolCall belongs",
                run_id=run_id,
            )
        if call.tool not in tools:
            raise UnknownToolError(run_id, call.tool, sorted(tools))
        call_id = check_call_id(call.id) if call.id is not None else f"call-{position}"
        if call_id in seen:
            raise InvalidInputError(
                f"run {run_id!r}: tool call id {call_id!r} is used twice", run_id=run_id, tool_call_id=call_id
            )
        seen.add(call_id)
        try:
            canonical_json(call.input)
        except InvalidInputError as exc:
            raise InvalidInputError(
                f"run {run_id!r}: the input of call {call_id!r} to tool {call.tool!r} cannot be "
                f"journaled: {exc.detail['reason']}; nothing was written",
                run_id=run_id,
                tool_call_id=call_id,
                tool_name=call.tool,
            ) from exc
        calls.append({"id": call_id, "tool": call.tool, "input": call.input})
    return {"kind": "calls", "calls": calls}


def _decoded_calls(run_id: str, step: int, payload: Any) -> list[dict[str, Any]] | None:
    """The calls of a journaled decision, or None for a finish."""
    if not isinstance(payload, dict) or payload.get("kind") not in ("calls", "finish"):
        raise MalformedRecordError(run_id, f"decision {step}", "not a calls/finish decision")
    if payload["kind"] == "finish":
        return None
    calls = payload.get("calls")
    if not isinstance(calls, list) or not all(
        isinstance(c, dict) and {"id", "tool", "input"} <= c.keys() for c in calls
    ):
        raise MalformedRecordError(run_id, f"decision {step}", "calls are not {id, tool, input} objects")
    return calls


class _RunLoop:
    """One run's loop: replays journaled decisions and records, asks the planner for the rest."""

    def __init__(
        self, run_id: str, journal: Journal, tools: Mapping[str, Tool], planner: Planner, max_steps: int
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
        # The execute lease: renewed every ttl/3 while execute runs; a holder that stops renewing (dead,
        # or cut off from the journal) is judged gone once it expires.
        self.ttl = get_settings().claim_ttl
        # Records this drive has already settled. An identical args-mode call met again shares that
        # outcome, failed included: it is the same call, not a resumed one, so it must not run again.
        self.settled: set[str] = set()
        self.trace: Any = tracing.NO_SPAN  # the run's span, the parent of its calls' (tracing.py)

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
                payload = _encode_decision(self.run_id, self.planner(state), self.tools, calls_made, used_ids)
                if not started:  # written only now, so a rejected first decision leaves nothing behind
                    self.journal.start_run(self.run_id, prompt, traceparent=self.trace.traceparent)
                    started = True
                payload = self.journal.record_decision(self.run_id, step + 1, payload)
            step += 1
            calls = _decoded_calls(self.run_id, step, payload)
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
                event = self._call(step, call["id"], call["tool"], call["input"])
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

    # -- one tool call ---------------------------------------------------------------------------
    def _call(self, step: int, call_id: str, tool_name: str, input: Any) -> RunEvent:
        tool = self.tools.get(tool_name)
        if tool is None:
            raise UnknownToolError(self.run_id, tool_name, sorted(self.tools))
        suffix = record_suffix(tool.idempotency, tool_name, call_id, input)
        event = self._settle(step, tool, suffix, call_id, tool_name, input)
        self.settled.add(suffix)
        return event

    def _settle(
        self, step: int, tool: Tool, suffix: str, call_id: str, tool_name: str, input: Any
    ) -> RunEvent:
        if suffix in self.settled:
            settled = self.journal.get_record(self.run_id, suffix)
            if settled is not None and settled.status is RecordStatus.FAILED:
                return self._event(step, settled, "failed", error=settled.error)
        for _ in range(_MAX_RACE_RETRIES):
            record = self.journal.get_record(self.run_id, suffix)
            known = None if record is None else self._settled_event(step, record)
            if known is not None:
                return known
            if tool.side_effect:
                # Before anything is claimed: an effect in the app's open transaction may roll back.
                transactions.refuse_inside_open_transaction(self.run_id, call_id, tool_name)
            # Claim, probe and execute under the record's execution guard: a `running` record whose
            # guard is free was left by a process that died, never by one still executing it.
            with self.journal.execution_guard(self.run_id, suffix, wait=_GUARD_WAIT_S) as held:
                if not held:
                    raise SideEffectRetryBlockedError(
                        self.run_id, call_id, tool_name, "another process is executing it right now"
                    )
                event = self._settle_guarded(step, tool, suffix, call_id, tool_name, input)
                if event is not None:
                    return event
        raise SideEffectRetryBlockedError(
            self.run_id, call_id, tool_name, "its record kept changing under concurrent writers"
        )

    def _settle_guarded(
        self, step: int, tool: Tool, suffix: str, call_id: str, tool_name: str, input: Any
    ) -> RunEvent | None:
        """One attempt at settling the call while its execution guard is held; ``None`` when a
        concurrent writer changed the record first and the caller should look at it again."""
        record = self.journal.get_record(self.run_id, suffix)
        if tool.idempotency == "cross-run" and (record is None or record.status is RecordStatus.MIRRORED):
            return self._cross(step, tool, suffix, call_id, tool_name, input, record)
        if record is None:
            return self._claim_new(step, tool, suffix, call_id, tool_name, input)
        if record.status is RecordStatus.APPROVED:
            return self._execute_approved(step, tool, record)
        awaited = self._await_executor(record)
        if awaited is None:
            return None
        return self._settled_event(step, awaited) or self._recover_or_retry(step, tool, awaited)

    def _claim_new(
        self, step: int, tool: Tool, suffix: str, call_id: str, tool_name: str, input: Any
    ) -> RunEvent | None:
        """Claim a call nobody has recorded yet and execute it (or suspend it for approval);
        ``None`` when another writer claimed it first: the caller handles its record."""
        if tool.call_needs_approval(input):
            # Suspended, not executed: no key is used until a person approves it.
            new = NewRecord(
                suffix,
                step,
                call_id,
                tool_name,
                tool.idempotency,
                input,
                self.run_id,
                status=RecordStatus.SUSPENDED,
            )
            suspended = self.journal.claim_record(self.run_id, new, gated=True)
            return None if suspended is None else self._event(step, suspended, "suspended")
        new = NewRecord(suffix, step, call_id, tool_name, tool.idempotency, input, self.run_id)
        faults.point("before_gate", execute_key(self.run_id, tool.idempotency, tool_name, call_id, input))
        claimed = self.journal.claim_record(
            self.run_id,
            new,
            gated=tool.side_effect,
            durable=_must_be_durable(tool),
            owner=new_owner(),
            ttl=self.ttl,
        )
        return None if claimed is None else self._execute(step, tool, claimed)

    def _execute_approved(self, step: int, tool: Tool, record: ToolRecord) -> RunEvent | None:
        """A person approved it: the normal claim (gated), then the normal key, once; ``None`` when
        another writer took the approved record first."""
        faults.point("before_gate", self._execute_key(record))
        approved = self.journal.reclaim_record(
            self.run_id,
            record.suffix,
            RecordStatus.APPROVED,
            gated=tool.side_effect,
            owner=new_owner(),
            ttl=self.ttl,
        )
        return None if approved is None else self._execute(step, tool, approved)

    def _await_executor(self, record: ToolRecord) -> ToolRecord | None:
        """Wait while another process may still be executing ``record`` (its execute lease is live:
        see ``Journal.executor_gone``); the record as it then stands.

        A lease nobody renews belongs to a process that died (or was cut off): wait it out, at most
        one TTL. One that is being renewed belongs to a live executor: wait as long as for a held
        guard, then refuse rather than probe a call that may be landing right now."""
        deadline = time.monotonic() + _GUARD_WAIT_S
        first = record.exec_lease_expires_at
        while not self.journal.executor_gone(record):
            expires = record.exec_lease_expires_at or 0.0
            renewed = expires != first
            remaining = expires - self.journal.now()
            if time.monotonic() >= deadline and (renewed or remaining > self.ttl):
                raise SideEffectRetryBlockedError(
                    self.run_id,
                    record.tool_call_id,
                    record.tool_name,
                    "another process is executing it right now (its execute lease is live)",
                )
            time.sleep(min(0.1, max(0.01, remaining)))
            fresh = self.journal.get_record(self.run_id, record.suffix)
            if fresh is None or fresh.status is not RecordStatus.RUNNING:
                return fresh
            record = fresh
        return record

    def _settled_event(self, step: int, record: ToolRecord) -> RunEvent | None:
        if record.status is RecordStatus.SUCCEEDED:
            return self._event(step, record, "replayed")
        if record.status is RecordStatus.DENIED:
            return self._event(step, record, "denied")
        if record.status is RecordStatus.SUSPENDED:
            return self._event(step, record, "suspended")
        if record.status is RecordStatus.MIRRORED and record.shared_id is not None:
            action = self.journal.get_shared(record.shared_id)
            if action is not None and action.status is SharedStatus.SUCCEEDED:
                return self._shared_event(step, record, action, "replayed")
        return None

    # -- cross-run calls (one execution shared by identical calls of any run within the window) ------
    def _cross(
        self,
        step: int,
        tool: Tool,
        suffix: str,
        call_id: str,
        tool_name: str,
        input: Any,
        mirror: ToolRecord | None,
    ) -> RunEvent:
        """Mirror the live shared execution of this call, or make one and execute it.

        Under the shared key's execution guard: a second run racing on the same call waits for the
        first to settle, then mirrors it; a ``running`` shared execution whose guard is free was left
        by a process that died, and gets the same recover/idempotent rules as a record."""
        key = shared_key(tool_name, input)
        with self.journal.execution_guard(_SHARED_GUARD, key, wait=_SHARED_WAIT_S) as held:
            if not held:
                raise SideEffectRetryBlockedError(
                    self.run_id, call_id, tool_name, "another run is executing the shared call right now"
                )
            action: SharedAction | None
            if mirror is None:
                assert tool.window_s is not None
                latest = self.journal.latest_shared(key)
                live = latest is not None and latest.live(self.journal.now())
                action = latest if live else None
                generation = 1 if latest is None else latest.generation + (0 if live else 1)
                new = NewRecord(
                    suffix,
                    step,
                    call_id,
                    tool_name,
                    CROSS_MODE,
                    input,
                    self.run_id,
                    status=RecordStatus.MIRRORED,
                    shared_id=f"{key}:{generation}",
                )
                # The mirror is this call's claim: gated, so no shared execution starts for a condemned run.
                mirror = self.journal.claim_record(self.run_id, new, gated=tool.side_effect) or (
                    self.journal.get_record(self.run_id, suffix)
                )
                assert mirror is not None and mirror.shared_id is not None
                if action is None:
                    faults.point("before_gate", key)
                    # The shared execution's own claim, behind this run's gate too: no unwind touches
                    # a shared execution, so one that started after the tombstone would stand forever.
                    made = self.journal.insert_shared(
                        key,
                        generation,
                        tool_name,
                        input,
                        self.run_id,
                        tool.window_s,
                        gated_run=self.run_id if tool.side_effect else None,
                    )
                    if made is not None:
                        return self._execute_shared(step, tool, mirror, made)
            assert mirror.shared_id is not None
            action = self.journal.get_shared(mirror.shared_id)
            if action is None:
                raise SideEffectRetryBlockedError(
                    self.run_id, call_id, tool_name, f"its shared execution {mirror.shared_id!r} is missing"
                )
            if action.status is SharedStatus.SUCCEEDED:
                outcome = "replayed" if action.run_id == self.run_id else "shared"
                return self._shared_event(step, mirror, action, outcome)
            return self._recover_shared(step, tool, mirror, action)

    def _recover_shared(self, step: int, tool: Tool, mirror: ToolRecord, action: SharedAction) -> RunEvent:
        """A failed shared execution, or a running one whose process died (we hold its guard)."""
        if tool.recover is not None:
            opts = CallOptions(action.key, mirror.tool_call_id, self.run_id)
            answer = self._recovered(
                mirror, ask_recover(tool, action.input, opts, tool_name=mirror.tool_name)
            )
            if answer.done:
                settled = self.journal.settle_shared(
                    action.shared_id, action.status, SharedStatus.SUCCEEDED, output=answer.output
                )
                if settled is not None:
                    return self._shared_event(step, mirror, settled, "recovered")
        elif not (tool.idempotent or not tool.side_effect):
            raise SideEffectRetryBlockedError(
                self.run_id,
                mirror.tool_call_id,
                mirror.tool_name,
                f"its shared execution is {action.status.value}, it has no recover hook and is not idempotent=True",
            )
        faults.point("before_gate", action.key)
        # Re-executing is a claim: the run's gate and the compare-and-set in one atomic step (a read of
        # the tombstone before it would let a condemn land in between).
        again = self.journal.settle_shared(
            action.shared_id,
            action.status,
            SharedStatus.RUNNING,
            reclaim=True,
            gated_run=self.run_id if tool.side_effect else None,
        )
        if again is None:
            raise SideEffectRetryBlockedError(
                self.run_id, mirror.tool_call_id, mirror.tool_name, "its shared execution changed under us"
            )
        return self._execute_shared(step, tool, mirror, again)

    def _execute_shared(self, step: int, tool: Tool, mirror: ToolRecord, action: SharedAction) -> RunEvent:
        opts = CallOptions(action.key, mirror.tool_call_id, self.run_id)
        try:
            output = call_hook(tool.execute, action.input, opts)
        except Exception as exc:
            error = exception_text(exc)
            self.journal.settle_shared(
                action.shared_id, SharedStatus.RUNNING, SharedStatus.FAILED, error=error
            )
            return self._event(step, mirror, "failed", error=error)
        problem = json_problem(output)
        if problem is not None:
            error = (
                f"tool {mirror.tool_name!r}: the output of execute (a {type(output).__name__}) cannot be "
                f"journaled: {problem}"
            )
            self.journal.settle_shared(
                action.shared_id, SharedStatus.RUNNING, SharedStatus.FAILED, error=error
            )
            return self._event(step, mirror, "failed", error=error)
        done = self.journal.settle_shared(
            action.shared_id, SharedStatus.RUNNING, SharedStatus.SUCCEEDED, output=output
        )
        return self._shared_event(
            step, mirror, done or action, "executed", output=output if done is None else None
        )

    def _shared_event(
        self, step: int, mirror: ToolRecord, action: SharedAction, outcome: Any, *, output: Any = None
    ) -> RunEvent:
        return RunEvent(
            "tool",
            self.run_id,
            step,
            mirror.tool_call_id,
            mirror.tool_name,
            mirror.input,
            action.output if output is None else output,
            None,
            outcome,
        )

    def _recovered(self, record: ToolRecord, answer: RecoverResult | RecoverRefusal) -> RecoverResult:
        """``recover``'s answer, if the run can act on it: one that cannot be used, or whose output
        cannot be journaled, refuses to execute the call again rather than risk a second effect."""
        if isinstance(answer, RecoverRefusal):
            raise SideEffectRetryBlockedError(
                self.run_id, record.tool_call_id, record.tool_name, answer.reason
            ) from answer.cause
        problem = json_problem(answer.output) if answer.done else None
        if problem is not None:
            raise SideEffectRetryBlockedError(
                self.run_id,
                record.tool_call_id,
                record.tool_name,
                f"the output recover answered cannot be journaled: {problem}",
            )
        return answer

    def _recover_or_retry(self, step: int, tool: Tool, record: ToolRecord) -> RunEvent | None:
        """A failed or running record: the side effect may or may not have happened (docs/reference/tools-and-runs.md)."""
        # A record whose tool said nothing happened (NoEffect) needs no probe: it is executed again.
        if record.had_no_effect:
            pass
        elif tool.recover is not None:
            opts = CallOptions(self._execute_key(record), record.tool_call_id, self.run_id)
            answer = self._recovered(
                record, ask_recover(tool, record.input, opts, tool_name=record.tool_name)
            )
            if answer.done:
                resolved = self.journal.resolve_record(
                    self.run_id, record.suffix, record.status, answer.output
                )
                return None if resolved is None else self._event(step, resolved, "recovered")
        elif not (tool.idempotent or not tool.side_effect):
            raise SideEffectRetryBlockedError(
                self.run_id,
                record.tool_call_id,
                record.tool_name,
                f"its record is {record.status.value}, it has no recover hook and is not idempotent=True",
            )
        faults.point("before_gate", self._execute_key(record))
        reclaimed = self.journal.reclaim_record(
            self.run_id,
            record.suffix,
            record.status,
            gated=tool.side_effect,
            durable=_must_be_durable(tool),
            owner=new_owner(),
            ttl=self.ttl,
            attempts=record.attempts,
        )
        return None if reclaimed is None else self._execute(step, tool, reclaimed)

    def _complete(
        self,
        step: int,
        record: ToolRecord,
        owner: str,
        status: RecordStatus,
        output: Any,
        error: str | None,
        traceparent: str | None = None,
    ) -> ToolRecord | RunEvent:
        """Write the outcome, fenced by this drive's execute lease: the record written, or the event
        of the outcome that stands instead.

        If another process took the call over (it judged this one gone: a lease that lapsed while
        execute ran), its outcome stands and this one is not written: replay what it recorded, or
        refuse to guess while it is still executing."""
        written = self.journal.complete_record(
            self.run_id,
            record.suffix,
            status,
            output=output,
            error=error,
            owner=owner,
            traceparent=traceparent,
        )
        if written is not None:
            return written
        now = self.journal.get_record(self.run_id, record.suffix)
        if now is not None and now.status is not RecordStatus.RUNNING and now.exec_owner == owner:
            return now  # written by this very drive after all (a retried statement's first attempt)
        if now is not None and now.status is RecordStatus.SUCCEEDED:
            return self._event(step, now, "replayed")
        raise SideEffectRetryBlockedError(
            self.run_id,
            record.tool_call_id,
            record.tool_name,
            "its execute lease lapsed while it ran and another process took the call over; "
            "this outcome was not written",
        )

    def _execute_key(self, record: ToolRecord) -> str:
        return execute_key(
            record.origin_run_id,
            record.mode,
            record.tool_name,
            record.tool_call_id,
            record.input,
        )

    def _execute(self, step: int, tool: Tool, record: ToolRecord) -> RunEvent:
        opts = CallOptions(self._execute_key(record), record.tool_call_id, self.run_id)
        with tracing.execute(self.trace, record, opts.idempotency_key) as span:
            event = self._execute_traced(step, tool, record, opts, span.traceparent)
            span.outcome(event)
            return event

    def _execute_traced(
        self, step: int, tool: Tool, record: ToolRecord, opts: CallOptions, traceparent: str | None
    ) -> RunEvent:
        owner = record.exec_owner
        assert owner is not None  # claimed by this drive, with its token

        def renew() -> bool:
            return self.journal.renew_execution(self.run_id, record.suffix, owner, self.ttl)

        try:
            with keeper.keep(renew, self.ttl / 3):
                output = call_hook(tool.execute, record.input, opts)
        except Exception as exc:
            error = exception_text(exc)
            # NoEffect: the tool says nothing happened; the record says so, for the unwind and a resume.
            marker = NO_EFFECT_OUTPUT if isinstance(exc, NoEffect) else None
            failed = self._complete(step, record, owner, RecordStatus.FAILED, marker, error, traceparent)
            return (
                failed if isinstance(failed, RunEvent) else self._event(step, failed, "failed", error=error)
            )
        problem = json_problem(output)
        if problem is not None:
            # The effect happened but cannot be journaled: record it failed, so an unwind asks recover.
            error = (
                f"tool {record.tool_name!r}: the output of execute (a {type(output).__name__}) cannot be "
                f"journaled: {problem}"
            )
            failed = self._complete(step, record, owner, RecordStatus.FAILED, None, error, traceparent)
            return (
                failed if isinstance(failed, RunEvent) else self._event(step, failed, "failed", error=error)
            )
        done = self._complete(step, record, owner, RecordStatus.SUCCEEDED, output, None, traceparent)
        if isinstance(done, RunEvent):
            return done
        # Hand on the output as journaled (tuples as lists, keys as strings): a replay sees exactly that,
        # and a planner must decide alike live and on replay.
        return self._event(step, done, "executed", output=done.output)

    def _event(
        self, step: int, record: ToolRecord, outcome: Any, *, output: Any = None, error: str | None = None
    ) -> RunEvent:
        if outcome in ("replayed", "recovered"):
            output = record.output
        if outcome == "denied":
            error = record.error or f"call was {record.status.value}"
        return RunEvent(
            "tool",
            self.run_id,
            step,
            record.tool_call_id,
            record.tool_name,
            record.input,
            output,
            error,
            outcome,
        )
