"""The unwind entry of one step, as every verdict writes it: from the step's tool record, or, for a
worklist step whose record is missing, from its run and suffix alone."""

from __future__ import annotations

from ..core.keys import compensate_key
from ..journal.records import ToolRecord
from .report import CompensationEntry, CompensationStatus


def entry_for(
    record: ToolRecord,
    status: CompensationStatus,
    error: str | None = None,
    attempts: int = 0,
    *,
    needs_approval: bool = False,
    group: int = 0,
    key: str | None = None,
) -> CompensationEntry:
    """``key``: the step's ``compensate_key``, when the caller has it already."""
    return CompensationEntry(
        needs_approval=needs_approval,
        group=group,
        suffix=record.suffix,
        tool_call_id=record.tool_call_id,
        tool_name=record.tool_name,
        status=status,
        error=error,
        record_status=record.status._value_,  # (``.value`` is a descriptor: two calls)
        origin_run_id=record.origin_run_id,
        attempts=attempts,
        idempotency_key=compensate_key(record.origin_run_id, record.suffix) if key is None else key,
    )


def missing_record_entry(
    run_id: str, suffix: str, status: CompensationStatus, error: str | None = None
) -> CompensationEntry:
    """The entry of a worklist step whose tool record is not in the journal (records are never
    deleted: say so honestly rather than crash the worker)."""
    return CompensationEntry(
        suffix=suffix,
        tool_call_id="",
        tool_name="",
        status=status,
        error=error,
        record_status="missing",
        idempotency_key=compensate_key(run_id, suffix),
        origin_run_id=run_id,
    )
