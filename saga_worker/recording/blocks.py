"""``saga()``: record tool calls from ordinary code, no planner (docs/reference/integration.md).

The code in the block plays the planner's part: each ``run.call`` is journaled as one planner
decision holding one call, exactly as ``scripted`` would journal it, and is then settled by the same
machinery as ``run_durable`` (``calls.CallSettler``: claim before execute, replay of a recorded
success, ``recover``/``idempotent`` for an interrupted call, the tombstone gate on the claim). So a run
recorded this way is indistinguishable in the journal from a scripted one, and ``resume``-style
re-entry is just running the same code again: the block's k-th call is matched to what the journal
holds for it and replayed, and only the calls past the journal execute.

Matching is by call id: an explicit ``id=`` names the call wherever it was journaled (so a chain of
Celery tasks, each adding its own call to one run, replays on redelivery), and a call without one is
``call-k``, k its position among the block's calls (the run's position for a run recorded by one
block). A call that matches a journaled one with another tool or another input is refused: the code
changed under its journal, and replaying the old outcome for a different call would be a lie.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from ..core.checks import check_call_id, check_run_id, check_storable_text
from ..core.keys import canonical_json, record_suffix
from ..core.storable import exception_text
from ..errors import (
    InvalidInputError,
    ReplayMismatchError,
    RunEndedError,
    SagaError,
    ToolFailedError,
    UnknownToolError,
)
from ..journal.records import RecordStatus, RunInfo, RunStatus
from ..journal.retention import refuse_stopped
from ..journal.roles import RunJournal
from ..observing import tracing
from .calls import CallSettler, joined_if_in_transaction
from .decisions import decoded_calls, encode_decision
from .groups import new_token, recorded_as_group
from .planning import ToolCall
from .run_events import RunEvent, RunResult
from .tools import Tool, check_tools

_MAX_APPEND_RETRIES = 20


class Parallel:
    """What ``SagaRun.parallel()`` returns: one group of calls, as a ``with`` or ``async with`` block.

    The group is the handle's while the block is open, so a call on it from any thread joins (a
    ``ThreadPoolExecutor`` does not carry context variables), and it is in the context too, so the
    threads ``acall`` uses join as well."""

    def __init__(self, run: SagaRun) -> None:
        self._run = run
        self._scope: AbstractContextManager[str] | None = None
        self._owned = False

    def __enter__(self) -> Parallel:
        run = self._run
        with run._lock:
            if run._group is None:  # nested: the inner block adds to the outer group
                run._group, self._owned = new_token(), True
            token = run._group
        self._scope = recorded_as_group(run.run_id, token)
        self._scope.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._scope is not None
        self._scope.__exit__(None, None, None)
        self._scope = None
        if self._owned:
            with self._run._lock:
                self._run._group, self._owned = None, False

    async def __aenter__(self) -> Parallel:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)


class SagaRun:
    """The handle a ``saga()`` block gets: ``run.call(tool_name, input, id=None) -> output``."""

    def __init__(self, run_id: str, journal: RunJournal, tools: Mapping[str, Tool], prompt: str) -> None:
        self.run_id = check_run_id(run_id)
        self.calls = CallSettler(self.run_id, journal, check_tools(tools))
        check_storable_text(prompt, "prompt", run_id=self.run_id)
        self.journal = journal
        self.prompt = prompt
        self.result: RunResult | None = None  # set when the block is left
        self._lock = threading.Lock()
        self._position = 0
        self._used: set[str] = set()
        self._group: str | None = None  # the group of an open ``parallel()`` block
        run = journal.get_run(self.run_id)
        refuse_stopped(run)  # condemned, or pruned (its journal is gone: nothing to replay)
        self._run: RunInfo | None = run
        self._decisions: list[Any] = journal.list_decisions(self.run_id) if run is not None else []

    # -- the calls ---------------------------------------------------------------------------------
    def call(self, tool_name: str, input: Any = None, id: str | None = None) -> Any:  # noqa: A002
        """Call ``tool_name`` once for this run and return its output (replayed if journaled).

        Raises :class:`ToolFailedError` if the tool raised (its record is ``failed``),
        ``CompensatedRunError`` if the run was condemned (nothing executed, no record), and
        ``SideEffectRetryBlockedError`` for an interrupted call nothing can prove safe to repeat."""
        input = {} if input is None else input
        tools = self.calls.tools
        if tool_name not in tools:
            raise UnknownToolError(self.run_id, tool_name, sorted(tools))
        # An in_transaction call's run, decision and record join the app's transaction with its effect.
        with joined_if_in_transaction(tools[tool_name], self.journal):
            with self._lock:
                self._position += 1
                call_id = check_call_id(id) if id is not None else f"call-{self._position}"
                if call_id in self._used:
                    raise InvalidInputError(
                        f"run {self.run_id!r}: tool call id {call_id!r} is used twice in one saga() block",
                        run_id=self.run_id,
                        tool_call_id=call_id,
                    )
                self._used.add(call_id)
                step = self._journaled_step(call_id, tool_name, input)
                if step is None:
                    step = self._append(call_id, tool_name, input)
            event = self._settle(step, call_id, tool_name, input)
        if event.error is not None:
            raise ToolFailedError(self.run_id, call_id, tool_name, event.error)
        return event.output

    async def acall(self, tool_name: str, input: Any = None, id: str | None = None) -> Any:  # noqa: A002
        """``call`` from async code: the journal and the hooks run on a worker thread."""
        return await asyncio.to_thread(self.call, tool_name, input, id)

    def parallel(self) -> Parallel:
        """``with run.parallel():`` (``async with`` in async code): the calls made inside are one
        group, independent of each other, whether they run at once or one by one; an unwind with
        ``parallel=True`` undoes them concurrently (docs/reference/compensation.md, "Groups")."""
        return Parallel(self)

    def _settle(self, step: int, call_id: str, tool_name: str, input: Any) -> RunEvent:
        if self._run is not None and self._run.ended:
            return self._replay_only(call_id, tool_name, input)
        group = self._group  # the open parallel() block's, whichever thread makes this call
        with contextlib.nullcontext() if group is None else recorded_as_group(self.run_id, group):
            return self.calls.settle(step, call_id, tool_name, input)

    def _replay_only(self, call_id: str, tool_name: str, input: Any) -> RunEvent:
        """An ended run executes nothing: its recorded outcomes are all a re-run of the block gets."""
        tool = self.calls.tools[tool_name]
        suffix = record_suffix(tool.idempotency, tool_name, call_id, input)
        record = self.journal.get_record(self.run_id, suffix)
        if record is None or record.status not in (RecordStatus.SUCCEEDED, RecordStatus.FAILED):
            assert self._run is not None
            raise RunEndedError(self.run_id, self._run.status.value)
        return self.calls.event(
            0, record, "replayed" if record.status is RecordStatus.SUCCEEDED else "failed", error=record.error
        )

    # -- decisions, as a planner's ---------------------------------------------------------------
    def _journaled_step(self, call_id: str, tool_name: str, input: Any) -> int | None:
        """The decision step that holds ``call_id`` (checked against this call), or None."""
        for step, payload in enumerate(self._decisions, start=1):
            for call in decoded_calls(self.run_id, step, payload) or ():
                if call["id"] != call_id:
                    continue
                if call["tool"] != tool_name or canonical_json(call["input"]) != canonical_json(input):
                    raise ReplayMismatchError(
                        self.run_id,
                        call_id,
                        (call["tool"], canonical_json(call["input"])),
                        (tool_name, canonical_json(input)),
                        "a saga() block must make the same calls when it runs again (pass explicit ids "
                        "to calls whose order can change)",
                    )
                return step
        return None

    def _append(self, call_id: str, tool_name: str, input: Any) -> int:
        """Journal a new decision holding this one call, after whatever the run holds already."""
        if self._run is not None and self._run.ended:
            return 0  # refused by _replay_only with a clear error
        self.calls.refuse_new_in_open_transaction(call_id, tool_name, input)
        payload = encode_decision(
            self.run_id, [ToolCall(tool_name, input, call_id)], self.calls.tools, 0, set()
        )
        for _ in range(_MAX_APPEND_RETRIES):
            if self._run is None:
                self._run, _ = self.journal.start_run(
                    self.run_id, self.prompt, traceparent=self.calls.trace.traceparent
                )
            step = len(self._decisions) + 1
            stored = self.journal.record_decision(self.run_id, step, payload)
            if stored == payload:
                self._decisions.append(stored)
                return step
            # Another process of the same run (a parallel forward task) took this step first.
            self._decisions = self.journal.list_decisions(self.run_id)
            found = self._journaled_step(call_id, tool_name, input)
            if found is not None:
                return found
        raise SagaError(
            f"run {self.run_id!r}: could not journal call {call_id!r}: the run's decisions kept "
            "changing under concurrent writers",
            run_id=self.run_id,
        )

    # -- the end -----------------------------------------------------------------------------------
    def _finish(self, error: str | None) -> None:
        run = self.journal.get_run(self.run_id)
        if run is not None and (run.condemned or run.ended):
            self.result = None if run.condemned else RunResult.of(run)
            return
        if run is None:
            run, _ = self.journal.start_run(
                self.run_id, self.prompt, traceparent=self.calls.trace.traceparent
            )
        decisions = self.journal.list_decisions(self.run_id)
        step = len(decisions) + 1
        try:
            self.journal.record_decision(self.run_id, step, {"kind": "finish", "text": "", "error": error})
        except RunEndedError:  # another block (or process) ended the run since we read it: its end stands
            ended = self.journal.get_run(self.run_id)
            self.result = None if ended is None or ended.condemned else RunResult.of(ended)
            return
        status = RunStatus.FAILED if error is not None else RunStatus.FINISHED
        self.result = RunResult.of(self.journal.end_run(self.run_id, status, "", error))


def _failure_text(exc: BaseException) -> str:
    if isinstance(exc, ToolFailedError):
        # The words scripted uses for the same end, so the two kinds of run read alike.
        return f"tool {exc.tool_name!r} (call {exc.tool_call_id}) failed: {exc.error}"
    return exception_text(exc)


@contextmanager
def saga(
    run_id: str,
    *,
    journal: RunJournal,
    tools: Mapping[str, Tool],
    prompt: str = "",
    finish: bool = True,
) -> Iterator[SagaRun]:
    """Record the block's tool calls as run ``run_id`` (docs/reference/integration.md).

    Leaving the block normally finishes the run; an exception from the block's code marks it failed
    and propagates. Neither compensates. The run is left as it is (so the same code can enter again
    and continue) when saga-worker itself refused a call (a condemned run, an interrupted call that
    cannot be repeated safely, misuse), and when the process is going down (``KeyboardInterrupt``,
    ``SystemExit``). ``finish=False`` leaves a normally ended block's run open, for a run built by
    several blocks (Celery forward tasks each adding a call)."""
    run = SagaRun(run_id, journal, tools, prompt)
    with tracing.block(run):
        try:
            yield run
        except ToolFailedError as exc:
            run._finish(_failure_text(exc))
            raise
        except SagaError:
            raise
        except Exception as exc:
            run._finish(_failure_text(exc))
            raise
        if finish:
            run._finish(None)


__all__ = ["Parallel", "SagaRun", "saga"]
