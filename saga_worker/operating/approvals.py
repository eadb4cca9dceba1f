"""Human approvals (docs/reference/approvals.md): a person's word on a suspended call, or on a gated compensation.

A call of a tool with ``needs_approval`` is recorded ``suspended`` and its run stops; ``approve``
lets the next ``resume_run`` execute it (once, with its normal claim and key), ``deny`` hands the
planner an error for it instead. A compensation of a tool with ``compensate_needs_approval`` halts
the unwind (``awaiting-approval``) until ``approve_compensation``; ``deny_compensation`` leaves the
effect in place (``skipped-denied``). Every decision is written with its audit row in one
transaction, and the first decision on a call or gate is the only one: a second approver's call
changes nothing and writes nothing.
"""

from __future__ import annotations

from ..compensation.actors import check_via
from ..core.checks import check_actor, check_reason, check_run_id
from ..errors import ApprovalError, CompensatedRunError, RunEndedError, UnknownRunError
from ..journal.records import (
    AuditAction,
    AuditVia,
    CompensationGate,
    GateDecision,
    NewAudit,
    RecordStatus,
    ToolRecord,
)
from ..journal.roles import OperatorJournal

_UNDOABLE = (RecordStatus.SUCCEEDED, RecordStatus.FAILED, RecordStatus.RUNNING)


def pending_calls(journal: OperatorJournal, run_id: str) -> list[ToolRecord]:
    """The run's calls waiting for a person (``suspended``), in execution order."""
    return journal.list_records(check_run_id(run_id), [RecordStatus.SUSPENDED])


def approve(
    journal: OperatorJournal,
    run_id: str,
    tool_call_id: str,
    *,
    actor: str,
    reason: str = "",
    via: AuditVia | str = "library",
) -> ToolRecord:
    """Approve a suspended call: the next ``resume_run`` executes it. Approving it again is a no-op.

    Raises CompensatedRunError (writing nothing) if the run is condemned, RunEndedError (writing
    nothing) if it has ended (finished or failed) with the call still suspended, ApprovalError if the
    call is not suspended (or was denied), whether the run has ended or not."""
    return _decide(journal, run_id, tool_call_id, RecordStatus.APPROVED, actor, reason, via)


def deny(
    journal: OperatorJournal,
    run_id: str,
    tool_call_id: str,
    *,
    actor: str,
    reason: str = "",
    via: AuditVia | str = "library",
) -> ToolRecord:
    """Deny a suspended call: it is recorded ``denied`` and the next ``resume_run`` hands the planner
    its error. Raises as ``approve``."""
    return _decide(journal, run_id, tool_call_id, RecordStatus.DENIED, actor, reason, via)


def _decide(
    journal: OperatorJournal,
    run_id: str,
    tool_call_id: str,
    decision: RecordStatus,
    actor: str,
    reason: str,
    via: AuditVia | str,
) -> ToolRecord:
    check_run_id(run_id)
    who, why, through = check_actor(actor), check_reason(reason), check_via(via)
    run = journal.get_run(run_id)
    if run is None:
        raise UnknownRunError(run_id)
    if run.condemned:
        raise CompensatedRunError(run_id)
    record = _find_call(journal, run_id, tool_call_id)
    error = None
    if decision is RecordStatus.DENIED:
        error = f"denied by {who}" + (f": {why}" if why else "")
    action = AuditAction.APPROVED if decision is RecordStatus.APPROVED else AuditAction.DENIED
    audit = NewAudit(
        run_id, action, who, through, why, target=record.tool_call_id, detail={"tool": record.tool_name}
    )
    try:
        decided = journal.decide_call(run_id, record.suffix, decision, error=error, audit=audit)
    except RunEndedError:
        # Deciding it as it was decided before the end is still a no-op, and deciding a call that was
        # no longer waiting the other way is the ApprovalError below, ended run or not: RunEndedError
        # is only for a call the run's end left suspended, which can never execute now.
        decided = None
        if _decided_so(journal, run_id, record, decision, action) is None and _still_suspended(
            journal, run_id, record
        ):
            raise
    if decided is not None:
        return decided
    now = _decided_so(journal, run_id, record, decision, action)
    if now is not None:
        return now  # decided so already (by this person or another; maybe executed since): no-op
    status = (journal.get_record(run_id, record.suffix) or record).status.value
    raise ApprovalError(run_id, tool_call_id, f"the call is {status}, not waiting for approval")


def _still_suspended(journal: OperatorJournal, run_id: str, record: ToolRecord) -> bool:
    return (journal.get_record(run_id, record.suffix) or record).status is RecordStatus.SUSPENDED


def _decided_so(
    journal: OperatorJournal, run_id: str, record: ToolRecord, decision: RecordStatus, action: AuditAction
) -> ToolRecord | None:
    """The call as it is now, if it was decided ``decision`` already; else None."""
    now = journal.get_record(run_id, record.suffix) or record
    if now.status is decision or any(
        row.action is action and row.target == record.tool_call_id for row in journal.read_audit(run_id)
    ):
        return now
    return None


def _find_call(journal: OperatorJournal, run_id: str, tool_call_id: str) -> ToolRecord:
    if not isinstance(tool_call_id, str) or not tool_call_id:
        raise ApprovalError(run_id, str(tool_call_id), "a tool call id is a non-empty string")
    for record in journal.list_records(run_id):
        if record.tool_call_id == tool_call_id or record.suffix == tool_call_id:
            return record
    raise ApprovalError(run_id, tool_call_id, "the run has no such call")


def approve_compensation(
    journal: OperatorJournal,
    run_id: str,
    suffix: str,
    *,
    actor: str,
    reason: str = "",
    via: AuditVia | str = "library",
) -> CompensationGate:
    """Allow an approval-gated compensation: the next unwind of the run (or the beat sweeper, which
    picks the run up at once) calls the hook, with the step's usual key. Of two approvers racing,
    one decision is written; the other gets it back. Raises ApprovalError if the step was denied."""
    return _gate(journal, run_id, suffix, GateDecision.APPROVED, actor, reason, via)


def deny_compensation(
    journal: OperatorJournal,
    run_id: str,
    suffix: str,
    *,
    actor: str,
    reason: str = "",
    via: AuditVia | str = "library",
) -> CompensationGate:
    """Refuse an approval-gated compensation: the step reads ``skipped-denied`` and the unwind goes
    on past it. Raises ApprovalError if the step was approved."""
    return _gate(journal, run_id, suffix, GateDecision.DENIED, actor, reason, via)


def _gate(
    journal: OperatorJournal,
    run_id: str,
    suffix: str,
    decision: GateDecision,
    actor: str,
    reason: str,
    via: AuditVia | str,
) -> CompensationGate:
    check_run_id(run_id)
    who, why, through = check_actor(actor), check_reason(reason), check_via(via)
    if journal.get_run(run_id) is None:
        raise UnknownRunError(run_id)
    record = journal.get_record(run_id, suffix) if isinstance(suffix, str) else None
    if record is None:
        raise ApprovalError(run_id, str(suffix), "the run has no such step")
    if record.status not in _UNDOABLE:
        raise ApprovalError(run_id, suffix, f"the call is {record.status.value}: there is nothing to undo")
    action = (
        AuditAction.COMPENSATION_APPROVED
        if decision is GateDecision.APPROVED
        else AuditAction.COMPENSATION_DENIED
    )
    audit = NewAudit(run_id, action, who, through, why, target=suffix, detail={"tool": record.tool_name})
    wanted = CompensationGate(record.origin_run_id, suffix, decision, who, why, 0.0, run_id)
    stored, _ = journal.decide_compensation(wanted, audit)
    if stored.decision is not decision:
        raise ApprovalError(
            run_id, suffix, f"its compensation was already {stored.decision.value} by {stored.actor}"
        )
    return stored


__all__ = ["approve", "approve_compensation", "deny", "deny_compensation", "pending_calls"]
