"""Settling one tool call of a run: claim before execute, replay of a recorded outcome, recover or
retry of an interrupted call, execute under a lease; a cross-run call goes to the ``SharedCalls``
the settler holds (``shared_calls.py``).

Durable runs (``runs.py``, a planner's decisions) and ``saga()`` blocks (``blocks.py``, the code's
calls) both hold a ``CallSettler`` for their run and settle every call through it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ..core import faults
from ..core.keys import execute_key, json_problem, record_suffix
from ..core.leases import keeper, new_owner
from ..core.storable import exception_text
from ..errors import InvalidInputError, OpenTransactionError, SideEffectRetryBlockedError, UnknownToolError
from ..journal.records import NO_EFFECT_OUTPUT, NewRecord, RecordStatus, SharedStatus, ToolRecord
from ..journal.roles import RunJournal
from ..observing import tracing
from ..settings import get_settings
from . import transactions
from .groups import group_of
from .run_events import RunEvent, event_of
from .shared_calls import SharedCalls
from .tools import CallOptions, NoEffect, Tool, ask_recover, call_hook, usable_recover_answer

_MAX_RACE_RETRIES = 5
# How long a call waits for another process that is executing the same record before giving up.
_GUARD_WAIT_S = 5.0


def must_be_durable(tool: Tool) -> bool:
    """Is this call's claim fsynced before ``execute``? Only where losing it could cost a second
    effect: a side-effecting call that is not idempotent. Lost in a power cut, its claim would make
    the call read as never started, and a resume would execute it again without asking ``recover``.
    An idempotent call executed again is harmless (same key), a read-only one has no effect."""
    return tool.side_effect and not tool.idempotent


def joined_if_in_transaction(tool: Tool, journal: RunJournal) -> AbstractContextManager[None]:
    """A ``Tool(in_transaction=True)`` call joins the app's open transaction where the journal can
    (``transactions.joining``); any other call is journaled on the journal's own connections."""
    return transactions.joining(journal) if tool.in_transaction else nullcontext()


class CallSettler:
    """Settles the calls of one run (``run_id`` and ``tools`` checked by the caller)."""

    def __init__(self, run_id: str, journal: RunJournal, tools: Mapping[str, Tool]) -> None:
        self.run_id = run_id
        self.journal = journal
        self.tools = tools
        self.shared = SharedCalls(run_id, journal)
        # The execute lease: renewed every ttl/3 while execute runs; a holder that stops renewing (dead,
        # or cut off from the journal) is judged gone once it expires.
        self.ttl = get_settings().claim_ttl
        # Records this drive has already settled. An identical args-mode call met again shares that
        # outcome, failed included: it is the same call, not a resumed one, so it must not run again.
        self.settled: set[str] = set()
        self.trace: Any = tracing.NO_SPAN  # the run's span, the parent of its calls' (tracing.py)

    def settle(self, step: int, call_id: str, tool_name: str, input: Any) -> RunEvent:
        """Settle call ``call_id`` of decision ``step``: replay its recorded outcome, or claim and
        execute it (or suspend it for approval, recover it, mirror a shared execution)."""
        tool = self.tools.get(tool_name)
        if tool is None:
            raise UnknownToolError(self.run_id, tool_name, sorted(self.tools))
        suffix = record_suffix(tool.idempotency, tool_name, call_id, input)
        with joined_if_in_transaction(tool, self.journal):
            event = self._settle_record(step, tool, suffix, call_id, tool_name, input)
        self.settled.add(suffix)
        return event

    def event(
        self, step: int, record: ToolRecord, outcome: Any, *, output: Any = None, error: str | None = None
    ) -> RunEvent:
        """The ``tool`` event of a call of this run, settled as ``record`` says."""
        return event_of(self.run_id, step, record, outcome, output=output, error=error)

    def refuse_new_in_open_transaction(self, call_id: str, tool_name: str, input: Any) -> None:
        """Refuse a new side-effecting call made inside the app's open transaction before its
        decision is journaled: nothing of it is written, so a run it would have started is not
        started (one left ``running`` by a refused call would look live forever, docs/reference/
        integration.md). A call the journal holds already is ``settle``'s: replayed, or refused there."""
        tool = self.tools.get(tool_name)
        if tool is None or not tool.side_effect:
            return
        with joined_if_in_transaction(tool, self.journal):
            seen = transactions.open_transaction()
        if seen is None:
            return
        suffix = record_suffix(tool.idempotency, tool_name, call_id, input)
        if self.journal.get_record(self.run_id, suffix) is None:
            raise OpenTransactionError(self.run_id, call_id, tool_name, seen)

    def _settle_record(
        self, step: int, tool: Tool, suffix: str, call_id: str, tool_name: str, input: Any
    ) -> RunEvent:
        if suffix in self.settled:
            settled = self.journal.get_record(self.run_id, suffix)
            if settled is not None and settled.status is RecordStatus.FAILED:
                return self.event(step, settled, "failed", error=settled.error)
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
            return self.shared.settle(step, tool, suffix, call_id, tool_name, input, record, trace=self.trace)
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
                group=group_of(self.run_id),
            )
            suspended = self.journal.claim_record(self.run_id, new, gated=True)
            return None if suspended is None else self.event(step, suspended, "suspended")
        new = NewRecord(
            suffix,
            step,
            call_id,
            tool_name,
            tool.idempotency,
            input,
            self.run_id,
            group=group_of(self.run_id),
        )
        if tool.in_transaction:
            return self._execute_in_transaction(step, tool, new)
        faults.point("before_gate", execute_key(self.run_id, tool.idempotency, tool_name, call_id, input))
        claimed = self.journal.claim_record(
            self.run_id,
            new,
            gated=tool.side_effect,
            durable=must_be_durable(tool),
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
            return self.event(step, record, "replayed")
        if record.status is RecordStatus.DENIED:
            return self.event(step, record, "denied")
        if record.status is RecordStatus.SUSPENDED:
            return self.event(step, record, "suspended")
        if record.status is RecordStatus.MIRRORED and record.shared_id is not None:
            action = self.journal.get_shared(record.shared_id)
            if action is not None and action.status is SharedStatus.SUCCEEDED:
                return self.shared.replay(step, record, action)
        return None

    def _recover_or_retry(self, step: int, tool: Tool, record: ToolRecord) -> RunEvent | None:
        """A failed or running record: the side effect may or may not have happened (docs/reference/tools-and-runs.md)."""
        if tool.in_transaction and record.had_no_effect and record.status is RecordStatus.FAILED:
            # Its last attempt rolled back with its record: executed again, in a transaction again.
            again = NewRecord(
                record.suffix,
                record.step,
                record.tool_call_id,
                record.tool_name,
                record.mode,
                record.input,
                record.origin_run_id,
            )
            return self._execute_in_transaction(
                step, tool, again, expected=record.status, attempts=record.attempts
            )
        # A record whose tool said nothing happened (NoEffect) needs no probe: it is executed again.
        if record.had_no_effect:
            pass
        elif tool.recover is not None:
            opts = CallOptions(self._execute_key(record), record.tool_call_id, self.run_id)
            answer = usable_recover_answer(
                self.run_id, record, ask_recover(tool, record.input, opts, tool_name=record.tool_name)
            )
            if answer.done:
                resolved = self.journal.resolve_record(
                    self.run_id, record.suffix, record.status, answer.output
                )
                return None if resolved is None else self.event(step, resolved, "recovered")
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
            durable=must_be_durable(tool),
            owner=new_owner(),
            ttl=self.ttl,
            attempts=record.attempts,
        )
        return None if reclaimed is None else self._execute(step, tool, reclaimed)

    def _execute_in_transaction(
        self,
        step: int,
        tool: Tool,
        new: NewRecord,
        *,
        expected: RecordStatus | None = None,
        attempts: int | None = None,
    ) -> RunEvent | None:
        """A Tool(in_transaction=True): its effect, written by execute on ``opts.connection``, and its
        record commit in one transaction of the journal's database (as DBOS's ``@transaction`` steps
        do): both, or neither. A failure rolls both back, and is then journaled as a failure with no
        effect (NoEffect's mark), so a resume executes the call again, in a transaction again."""
        key = execute_key(self.run_id, tool.idempotency, new.tool_name, new.tool_call_id, new.input)
        failures: list[BaseException] = []

        def effect(connection: Any) -> Any:
            opts = CallOptions(key, new.tool_call_id, self.run_id, connection=connection)
            try:
                output = call_hook(tool.execute, new.input, opts)
                problem = json_problem(output)
                if problem is not None:
                    raise InvalidInputError(
                        f"tool {new.tool_name!r}: the output of execute (a {type(output).__name__}) cannot "
                        f"be journaled: {problem}"
                    )
            except Exception as exc:
                failures.append(exc)
                raise
            return output

        try:
            record = self.journal.record_in_transaction(
                self.run_id, new, effect, expected=expected, attempts=attempts
            )
        except Exception as exc:
            failed_here = failures and (exc is failures[0] or exc.__cause__ is failures[0])
            if not failed_here:
                raise  # the tombstone gate, an ended run, the database: not the tool's outcome
            return self._failed_in_transaction(step, new, failures[0], expected, attempts)
        return None if record is None else self.event(step, record, "executed", output=record.output)

    def _failed_in_transaction(
        self,
        step: int,
        new: NewRecord,
        exc: BaseException,
        expected: RecordStatus | None,
        attempts: int | None,
    ) -> RunEvent | None:
        owner = new_owner()
        if expected is None:
            claimed = self.journal.claim_record(self.run_id, new, gated=True, owner=owner, ttl=self.ttl)
        else:
            claimed = self.journal.reclaim_record(
                self.run_id, new.suffix, expected, gated=True, owner=owner, ttl=self.ttl, attempts=attempts
            )
        if claimed is None:
            return None
        error = exception_text(exc)
        failed = self._complete(step, claimed, owner, RecordStatus.FAILED, NO_EFFECT_OUTPUT, error)
        return failed if isinstance(failed, RunEvent) else self.event(step, failed, "failed", error=error)

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
            return self.event(step, now, "replayed")
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
            return failed if isinstance(failed, RunEvent) else self.event(step, failed, "failed", error=error)
        problem = json_problem(output)
        if problem is not None:
            # The effect happened but cannot be journaled: record it failed, so an unwind asks recover.
            error = (
                f"tool {record.tool_name!r}: the output of execute (a {type(output).__name__}) cannot be "
                f"journaled: {problem}"
            )
            failed = self._complete(step, record, owner, RecordStatus.FAILED, None, error, traceparent)
            return failed if isinstance(failed, RunEvent) else self.event(step, failed, "failed", error=error)
        done = self._complete(step, record, owner, RecordStatus.SUCCEEDED, output, None, traceparent)
        if isinstance(done, RunEvent):
            return done
        # Hand on the output as journaled (tuples as lists, keys as strings): a replay sees exactly that,
        # and a planner must decide alike live and on replay.
        return self.event(step, done, "executed", output=done.output)
