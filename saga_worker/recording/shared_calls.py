"""Settling a cross-run call: one execution shared by identical calls of any run within the tool's
window. ``CallSettler`` (``calls.py``) holds a ``SharedCalls`` and routes such calls to it."""

from __future__ import annotations

from typing import Any

from ..core import faults
from ..core.keys import CROSS_MODE, json_problem, shared_key
from ..core.storable import exception_text
from ..errors import SideEffectRetryBlockedError
from ..journal.records import NewRecord, RecordStatus, SharedAction, SharedStatus, ToolRecord
from ..journal.roles import RunJournal
from ..observing import tracing
from .groups import group_of
from .run_events import RunEvent, event_of
from .tools import CallOptions, Tool, ask_recover, call_hook, usable_recover_answer

# How long a cross-run call waits for another run that is executing the same shared call.
_SHARED_WAIT_S = 30.0
# The guard namespace of shared executions (not a valid run id, so it never meets a run's own guard).
_SHARED_GUARD = "~shared"


class SharedCalls:
    """The cross-run window of one run's calls: a call whose tool has ``idempotency="cross-run"``
    mirrors the live shared execution of an identical call (of any run), or makes one and executes
    it. ``CallSettler`` holds one and hands it the calls it routes here."""

    def __init__(self, run_id: str, journal: RunJournal) -> None:
        self.run_id = run_id
        self.journal = journal

    def settle(
        self,
        step: int,
        tool: Tool,
        suffix: str,
        call_id: str,
        tool_name: str,
        input: Any,
        mirror: ToolRecord | None,
        *,
        trace: Any,
    ) -> RunEvent:
        """Mirror the live shared execution of this call, or make one and execute it (under
        ``trace``, the run's span); ``mirror`` is the call's own record, if it has one yet.

        Under the shared key's execution guard: a second run racing on the same call waits for the
        first to settle, then mirrors it; a ``running`` shared execution whose guard is free was left
        by a process that died, and gets the same recover/idempotent rules as a record."""
        key = shared_key(tool_name, input)
        with self.journal.execution_guard(_SHARED_GUARD, key, wait=_SHARED_WAIT_S) as held:
            if not held:
                raise SideEffectRetryBlockedError(
                    self.run_id, call_id, tool_name, "another run is executing the shared call right now"
                )
            if mirror is None:
                mirror, made = self._claim_mirror(step, tool, suffix, call_id, tool_name, input, key)
                if made is not None:
                    return self._execute_shared(step, tool, mirror, made, trace)
            assert mirror.shared_id is not None
            action = self.journal.get_shared(mirror.shared_id)
            if action is None:
                raise SideEffectRetryBlockedError(
                    self.run_id, call_id, tool_name, f"its shared execution {mirror.shared_id!r} is missing"
                )
            return self._settle_mirror(step, tool, mirror, action, trace)

    def replay(self, step: int, mirror: ToolRecord, action: SharedAction) -> RunEvent:
        """The event of a call whose shared execution succeeded, replayed from the journal."""
        return self._shared_event(step, mirror, action, "replayed")

    def _claim_mirror(
        self, step: int, tool: Tool, suffix: str, call_id: str, tool_name: str, input: Any, key: str
    ) -> tuple[ToolRecord, SharedAction | None]:
        """Claim this call's mirror of the live shared execution, or of a new generation; the
        shared execution this run made and must execute, if it made one."""
        assert tool.window_s is not None
        latest = self.journal.latest_shared(key)
        live = latest is not None and latest.live(self.journal.now())
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
            group=group_of(self.run_id),
        )
        # The mirror is this call's claim: gated, so no shared execution starts for a condemned run.
        mirror = self.journal.claim_record(self.run_id, new, gated=tool.side_effect) or (
            self.journal.get_record(self.run_id, suffix)
        )
        assert mirror is not None and mirror.shared_id is not None
        if live:
            return mirror, None
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
        return mirror, made

    def _settle_mirror(
        self, step: int, tool: Tool, mirror: ToolRecord, action: SharedAction, trace: Any
    ) -> RunEvent:
        """Settle a call by the shared execution its mirror names: replayed if it succeeded,
        recovered or executed again if it failed or was left running."""
        if action.status is SharedStatus.SUCCEEDED:
            outcome = "replayed" if action.run_id == self.run_id else "shared"
            return self._shared_event(step, mirror, action, outcome)
        return self._recover_shared(step, tool, mirror, action, trace)

    def _recover_shared(
        self, step: int, tool: Tool, mirror: ToolRecord, action: SharedAction, trace: Any
    ) -> RunEvent:
        """A failed shared execution, or a running one whose process died (we hold its guard)."""
        if tool.recover is not None:
            opts = CallOptions(action.key, mirror.tool_call_id, self.run_id)
            answer = usable_recover_answer(
                self.run_id, mirror, ask_recover(tool, action.input, opts, tool_name=mirror.tool_name)
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
        return self._execute_shared(step, tool, mirror, again, trace)

    def _execute_shared(
        self, step: int, tool: Tool, mirror: ToolRecord, action: SharedAction, trace: Any
    ) -> RunEvent:
        # Its span is not journaled: no unwind undoes a shared execution, so nothing links to it.
        with tracing.execute(trace, mirror, action.key) as span:
            event = self._execute_shared_traced(step, tool, mirror, action)
            span.outcome(event)
            return event

    def _execute_shared_traced(
        self, step: int, tool: Tool, mirror: ToolRecord, action: SharedAction
    ) -> RunEvent:
        opts = CallOptions(action.key, mirror.tool_call_id, self.run_id)
        try:
            output = call_hook(tool.execute, action.input, opts)
        except Exception as exc:
            error = exception_text(exc)
            self.journal.settle_shared(
                action.shared_id, SharedStatus.RUNNING, SharedStatus.FAILED, error=error
            )
            return event_of(self.run_id, step, mirror, "failed", error=error)
        problem = json_problem(output)
        if problem is not None:
            error = (
                f"tool {mirror.tool_name!r}: the output of execute (a {type(output).__name__}) cannot be "
                f"journaled: {problem}"
            )
            self.journal.settle_shared(
                action.shared_id, SharedStatus.RUNNING, SharedStatus.FAILED, error=error
            )
            return event_of(self.run_id, step, mirror, "failed", error=error)
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
