"""Human approvals on the forward path (docs/reference/approvals.md), on every journal: a gated call is suspended,
not executed; approve lets resume_run execute it once, deny hands the planner its error."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from saga_worker import (
    ApprovalError,
    AuditAction,
    CallOptions,
    CompensatedRunError,
    Journal,
    RunEndedError,
    Tool,
    ToolCall,
    approve,
    compensate_run,
    deny,
    pending_calls,
    read_audit,
    resume_run,
    run_durable,
    scripted,
)
from saga_worker.journal.records import RecordStatus, RunStatus
from tests.ledger import MemoryLedger
from tests.reads import record_of


def tools(ledger: MemoryLedger, needs_approval: Any = True) -> dict[str, Tool]:
    def execute(name: str) -> Any:
        def run(input: Any, opts: CallOptions) -> Any:
            ledger.effect(opts.idempotency_key, f"execute:{name}")
            return {"id": f"{name}-{opts.tool_call_id}"}

        return run

    def compensate(input: Any, output: Any, opts: CallOptions) -> None:
        ledger.effect(opts.idempotency_key, "compensate")

    return {
        "reserve": Tool(execute("reserve"), compensate),
        "refund": Tool(execute("refund"), compensate, needs_approval=needs_approval),
    }


SCRIPT = scripted(ToolCall("reserve", {"sku": "A1"}), ToolCall("refund", {"amount": 500}), final="done")


def suspended_run(journal: Journal, ledger: MemoryLedger, run_id: str) -> None:
    result = run_durable(run_id, journal=journal, tools=tools(ledger), planner=SCRIPT)
    assert result.status == "suspended"
    assert [(p.tool_call_id, p.tool, p.input) for p in result.pending] == [
        ("call-2", "refund", {"amount": 500})
    ]


def test_a_call_needing_approval_is_suspended_not_executed_and_uses_no_key(
    journal: Journal, run_id: str
) -> None:
    ledger = MemoryLedger()
    suspended_run(journal, ledger, run_id)
    assert ledger.whats() == ["execute:reserve"]
    [pending] = pending_calls(journal, run_id)
    assert pending.status is RecordStatus.SUSPENDED and pending.attempts == 0
    # Resuming before anyone decides stops at the same call again, executing nothing.
    again = resume_run(run_id, journal=journal, tools=tools(ledger), planner=SCRIPT)
    assert again.status == "suspended" and ledger.whats() == ["execute:reserve"]


def test_an_approved_call_executes_exactly_once_on_resume_and_is_compensable(
    journal: Journal, run_id: str
) -> None:
    ledger = MemoryLedger()
    suspended_run(journal, ledger, run_id)
    approve(journal, run_id, "call-2", actor="alice", reason="refund agreed")
    result = resume_run(run_id, journal=journal, tools=tools(ledger), planner=SCRIPT)
    assert result.status == "finished" and result.text == "done"
    assert resume_run(run_id, journal=journal, tools=tools(ledger), planner=SCRIPT).status == "finished"
    assert ledger.call_counts("execute:refund") == {f"{run_id}:call-2": 1}  # normal key, once
    report = compensate_run(run_id, journal=journal, tools=tools(ledger))
    assert [(e.suffix, e.status.value) for e in report.entries] == [
        ("call-2", "compensated"),
        ("call-1", "compensated"),
    ]


def test_a_denied_call_is_handed_to_the_planner_as_its_error_and_is_not_in_the_unwind(
    journal: Journal, run_id: str
) -> None:
    ledger = MemoryLedger()
    suspended_run(journal, ledger, run_id)
    deny(journal, run_id, "call-2", actor="bob", reason="over the limit")
    seen: list[Any] = []

    def planner(state: Any) -> Any:
        seen.append(state.results)
        return SCRIPT(state)

    result = resume_run(run_id, journal=journal, tools=tools(ledger), planner=planner)
    assert result.status == "failed" and "denied by bob: over the limit" in (result.error or "")
    assert seen[-1][-1].error == "denied by bob: over the limit"
    assert record_of(journal, run_id, "call-2").status is RecordStatus.DENIED
    assert "execute:refund" not in ledger.whats()
    report = compensate_run(run_id, journal=journal, tools=tools(ledger))
    assert [e.suffix for e in report.entries] == ["call-1"]


def test_suspended_calls_are_not_part_of_any_unwind(journal: Journal, run_id: str) -> None:
    ledger = MemoryLedger()
    suspended_run(journal, ledger, run_id)
    report = compensate_run(run_id, journal=journal, tools=tools(ledger))
    assert [e.suffix for e in report.entries] == ["call-1"]


def test_a_condemned_suspended_run_refuses_approve_deny_and_resume_writing_nothing(
    journal: Journal, run_id: str
) -> None:
    ledger = MemoryLedger()
    suspended_run(journal, ledger, run_id)
    compensate_run(run_id, journal=journal, tools=tools(ledger), actor="ops")
    trail = read_audit(journal, run_id)
    for decide in (approve, deny):
        with pytest.raises(CompensatedRunError):
            decide(journal, run_id, "call-2", actor="alice")
    with pytest.raises(CompensatedRunError):
        resume_run(run_id, journal=journal, tools=tools(ledger), planner=SCRIPT)
    assert record_of(journal, run_id, "call-2").status is RecordStatus.SUSPENDED
    assert read_audit(journal, run_id) == trail
    assert "execute:refund" not in ledger.whats()


@pytest.mark.parametrize("ended", [RunStatus.FINISHED, RunStatus.FAILED])
def test_a_run_that_ended_with_a_call_suspended_refuses_approve_and_deny_naming_the_run_and_its_state(
    journal: Journal, run_id: str, ended: RunStatus
) -> None:
    ledger = MemoryLedger()
    suspended_run(journal, ledger, run_id)
    journal.end_run(run_id, ended, "", None)  # another process ended the run: the call can never execute
    trail = read_audit(journal, run_id)
    for decide in (approve, deny):
        with pytest.raises(RunEndedError, match=rf"{run_id}.*\({ended.value}\)"):
            decide(journal, run_id, "call-2", actor="alice")
    assert record_of(journal, run_id, "call-2").status is RecordStatus.SUSPENDED
    assert read_audit(journal, run_id) == trail
    assert "execute:refund" not in ledger.whats()


def test_approving_again_after_the_approved_call_ran_and_the_run_finished_is_still_a_no_op(
    journal: Journal, run_id: str
) -> None:
    ledger = MemoryLedger()
    suspended_run(journal, ledger, run_id)
    approve(journal, run_id, "call-2", actor="alice")
    assert resume_run(run_id, journal=journal, tools=tools(ledger), planner=SCRIPT).status == "finished"
    assert approve(journal, run_id, "call-2", actor="carol").status is RecordStatus.SUCCEEDED
    assert [r.actor for r in read_audit(journal, run_id) if r.action is AuditAction.APPROVED] == ["alice"]
    with pytest.raises(ApprovalError, match="succeeded, not waiting"):
        deny(journal, run_id, "call-2", actor="bob")


@pytest.mark.parametrize("ended", [RunStatus.FINISHED, RunStatus.FAILED])
@pytest.mark.parametrize(("first", "then"), [(approve, deny), (deny, approve)], ids=["approved", "denied"])
def test_deciding_a_call_the_other_way_after_its_run_ended_raises_approval_error_and_writes_nothing(
    journal: Journal, run_id: str, ended: RunStatus, first: Any, then: Any
) -> None:
    ledger = MemoryLedger()
    suspended_run(journal, ledger, run_id)
    decided = first(journal, run_id, "call-2", actor="alice").status
    journal.end_run(run_id, ended, "", None)  # the run ended before the decided call was resumed
    trail = read_audit(journal, run_id)
    # The reference promises ApprovalError for deciding the other way afterwards, ended run or not.
    with pytest.raises(ApprovalError, match=rf"{decided.value}, not waiting"):
        then(journal, run_id, "call-2", actor="bob")
    assert record_of(journal, run_id, "call-2").status is decided
    assert read_audit(journal, run_id) == trail
    assert "execute:refund" not in ledger.whats()


def test_an_approval_and_a_tombstone_racing_never_leave_an_approval_on_a_condemned_run(
    journal: Journal, run_id: str
) -> None:
    ledger = MemoryLedger()
    suspended_run(journal, ledger, run_id)
    barrier = threading.Barrier(2)
    outcome: dict[str, Any] = {}

    def approver() -> None:
        barrier.wait()
        try:
            approve(journal, run_id, "call-2", actor="alice")
            outcome["approved"] = True
        except CompensatedRunError:
            outcome["approved"] = False

    thread = threading.Thread(target=approver)
    thread.start()
    barrier.wait()
    compensate_run(run_id, journal=journal, tools=tools(ledger))
    thread.join()
    record = journal.get_record(run_id, "call-2")
    assert record is not None
    approvals = [r for r in read_audit(journal, run_id) if r.action is AuditAction.APPROVED]
    # Either the approval committed before the tombstone (and is audited) or it wrote nothing at all.
    assert (record.status is RecordStatus.APPROVED) == outcome["approved"] == (len(approvals) == 1)
    with pytest.raises(CompensatedRunError):
        resume_run(run_id, journal=journal, tools=tools(ledger), planner=SCRIPT)
    assert "execute:refund" not in ledger.whats()


def test_a_rule_decides_per_input_which_calls_need_approval(journal: Journal, run_id: str) -> None:
    ledger = MemoryLedger()
    gated = tools(ledger, needs_approval=lambda input: input["amount"] > 100)
    small = scripted(ToolCall("refund", {"amount": 5}), ToolCall("refund", {"amount": 500}))
    result = run_durable(run_id, journal=journal, tools=gated, planner=small)
    assert result.status == "suspended" and [p.tool_call_id for p in result.pending] == ["call-2"]
    assert ledger.call_counts("execute:refund") == {f"{run_id}:call-1": 1}


def test_approving_twice_is_a_no_op_and_approving_a_denied_or_unknown_call_is_refused(
    journal: Journal, run_id: str
) -> None:
    ledger = MemoryLedger()
    suspended_run(journal, ledger, run_id)
    approve(journal, run_id, "call-2", actor="alice")
    approve(journal, run_id, "call-2", actor="carol")
    assert [r.actor for r in read_audit(journal, run_id) if r.action is AuditAction.APPROVED] == ["alice"]
    with pytest.raises(ApprovalError, match="approved, not waiting"):
        deny(journal, run_id, "call-2", actor="bob")
    with pytest.raises(ApprovalError, match="no such call"):
        approve(journal, run_id, "call-9", actor="alice")
    with pytest.raises(ApprovalError, match="not waiting"):
        approve(journal, run_id, "call-1", actor="alice")
    with pytest.raises(ValueError, match="actor"):
        approve(journal, run_id, "call-2", actor="")
