"""What happened to the call a step would undo (docs/reference/compensation.md, each step's rule 2):
a succeeded call's output, a recovered one's, or the verdict that settles the step before any hook.

A call that failed or was interrupted may or may not have had its effect; its tool's ``recover`` is
asked, with the call's own execute key. A running record may be a call still executing in a live
process, not a crash: it is probed only once its execution guard is free and its execute lease gone.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.frozen import quick
from ..core.keys import execute_key
from ..journal.records import RecordStatus, ToolRecord
from ..journal.roles import UnwindJournal
from ..recording.tools import CallOptions, RecoverRefusal, RecoverResult, Tool, ask_recover
from .report import CompensationStatus

S = CompensationStatus


@quick
@dataclass(frozen=True)
class Settled:
    """The step's verdict, decided by what happened before any hook could be called."""

    status: CompensationStatus
    error: str | None = None


def recover_options(record: ToolRecord, run_id: str) -> CallOptions:
    """What ``recover`` is asked with: the call's own execute key (the provider knows it by that)."""
    key = execute_key(record.origin_run_id, record.mode, record.tool_name, record.tool_call_id, record.input)
    return CallOptions(key, record.tool_call_id, run_id)


def what_happened(
    journal: UnwindJournal, run_id: str, record: ToolRecord, tool: Tool | None
) -> tuple[ToolRecord, RecoverResult | Settled]:
    """The record as last read (afresh under its execution guard, when that was taken), and what its
    call did: a succeeded call's output, a recovered one's, or the verdict that settles the step."""
    if record.status is RecordStatus.SUCCEEDED:
        return record, RecoverResult(done=True, output=record.output)
    if record.had_no_effect:
        return record, Settled(S.SKIPPED_NOT_EXECUTED, "the tool said the call had no effect (NoEffect)")
    if tool is None or tool.recover is None:
        why = f"tool {record.tool_name!r} is not in tools" if tool is None else "the tool has no recover hook"
        return record, Settled(
            S.UNCERTAIN,
            f"call is {record.status.value} and {why}: cannot tell whether its side effect happened",
        )
    if record.status is not RecordStatus.RUNNING:
        return record, probe(tool, record, run_id)
    # A running record may be a call still executing in a live process (its run was live when
    # condemned), not a crash: a probe now could read "not done" just before its effect lands and
    # the step would be lost. The record's execution guard and its execute lease tell the two
    # apart; when the call settles, its outcome reopens this unwind (the journal's complete_record).
    with journal.execution_guard(record.run_id, record.suffix) as free:
        if free:
            record = journal.get_record(record.run_id, record.suffix) or record
        if not free or not journal.executor_gone(record):
            return record, Settled(
                S.UNCERTAIN,
                "call is executing right now in another process"
                + ("" if not free else " (its execute lease is live)")
                + "; the unwind looks again once it settles",
            )
        if record.status is RecordStatus.SUCCEEDED:
            return record, RecoverResult(done=True, output=record.output)
        return record, probe(tool, record, run_id)


def probe(tool: Tool, record: ToolRecord, run_id: str) -> RecoverResult | Settled:
    """Ask ``recover`` whether the call took effect: its answer, or the verdict it decides."""
    answer = ask_recover(tool, record.input, recover_options(record, run_id), tool_name=record.tool_name)
    if isinstance(answer, RecoverRefusal):
        return Settled(S.UNCERTAIN, answer.reason)
    if not answer.done:
        return Settled(S.SKIPPED_NOT_EXECUTED)
    return answer
