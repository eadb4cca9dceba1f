"""Approval-gated compensation (docs/reference/approvals.md), on every journal: the unwind halts at a gated step
(awaiting-approval) until a person approves it, goes past a denied one (skipped-denied), and shows the
gate in a dry run."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from saga_worker import (
    ApprovalError,
    AuditAction,
    CallOptions,
    Journal,
    Tool,
    ToolCall,
    approve_compensation,
    compensate_run,
    deny_compensation,
    read_audit,
    run_durable,
    scripted,
)
from saga_worker.journal.records import UnwindState
from tests.ledger import Ledger, MemoryLedger, open_ledger
from tests.reads import run_of

SCRIPT = scripted(
    ToolCall("charge", {"amount": 900}), ToolCall("reserve", {"sku": "A1"}), ToolCall("notify", {})
)


def gated_tools(ledger: Ledger, rule: Any = True) -> dict[str, Tool]:
    def make(name: str, gate: Any = False) -> Tool:
        def execute(input: Any, opts: CallOptions) -> Any:
            return {"id": name}

        def compensate(input: Any, output: Any, opts: CallOptions) -> None:
            ledger.effect(opts.idempotency_key, f"compensate:{name}")

        return Tool(execute, compensate, compensate_needs_approval=gate)

    return {"charge": make("charge"), "reserve": make("reserve", rule), "notify": make("notify")}


def placed(journal: Journal, ledger: Ledger, run_id: str) -> dict[str, Tool]:
    tools = gated_tools(ledger)
    assert run_durable(run_id, journal=journal, tools=tools, planner=SCRIPT).status == "finished"
    return tools


def statuses(report: Any) -> list[tuple[str, str]]:
    return [(e.suffix, e.status.value) for e in report.entries]


def test_awaiting_approval_halts_the_unwind_and_resumes_after_approval_with_the_same_key(
    journal: Journal, run_id: str
) -> None:
    ledger = MemoryLedger()
    tools = placed(journal, ledger, run_id)
    first = compensate_run(run_id, journal=journal, tools=tools)
    assert statuses(first) == [
        ("call-3", "compensated"),
        ("call-2", "awaiting-approval"),
        ("call-1", "not-attempted"),
    ]
    assert first.entries[1].needs_approval and first.halted and not first.complete
    assert "compensate:reserve" not in ledger.whats()
    assert run_of(journal, run_id).unwind_state is UnwindState.AWAITING
    # Unwinding again without a decision halts at the same gate.
    assert statuses(compensate_run(run_id, journal=journal, tools=tools))[1] == (
        "call-2",
        "awaiting-approval",
    )

    approve_compensation(journal, run_id, "call-2", actor="alice", reason="refund ok")
    assert run_of(journal, run_id).unwind_state is UnwindState.PENDING
    second = compensate_run(run_id, journal=journal, tools=tools)
    assert statuses(second) == [
        ("call-3", "already-compensated"),
        ("call-2", "compensated"),
        ("call-1", "compensated"),
    ]
    assert second.complete
    assert second.entries[1].idempotency_key == first.entries[1].idempotency_key == f"{run_id}:comp:call-2"
    assert ledger.effect_counts("compensate:reserve") == {f"{run_id}:comp:call-2": 1}


def test_a_denied_compensation_reads_skipped_denied_and_the_unwind_goes_on(
    journal: Journal, run_id: str
) -> None:
    ledger = MemoryLedger()
    tools = placed(journal, ledger, run_id)
    compensate_run(run_id, journal=journal, tools=tools)
    deny_compensation(journal, run_id, "call-2", actor="bob", reason="keep the stock")
    report = compensate_run(run_id, journal=journal, tools=tools)
    assert statuses(report) == [
        ("call-3", "already-compensated"),
        ("call-2", "skipped-denied"),
        ("call-1", "compensated"),
    ]
    assert report.entries[1].error == "compensation denied by bob: keep the stock"
    assert report.complete and "compensate:reserve" not in ledger.whats()
    with pytest.raises(ApprovalError, match="already denied by bob"):
        approve_compensation(journal, run_id, "call-2", actor="alice")


def test_a_dry_run_shows_the_gate_as_would_compensate_with_needs_approval(
    journal: Journal, run_id: str
) -> None:
    ledger = MemoryLedger()
    tools = placed(journal, ledger, run_id)
    plan = compensate_run(run_id, journal=journal, tools=tools, dry_run=True)
    assert statuses(plan) == [(s, "would-compensate") for s in ("call-3", "call-2", "call-1")]
    assert [e.needs_approval for e in plan.entries] == [False, True, False]
    assert plan.model_dump(mode="json")["entries"][1]["needs_approval"] is True
    assert not plan.condemned and read_audit(journal, run_id) == []


def test_a_rule_on_input_and_output_decides_which_compensations_need_approval(
    journal: Journal, run_id: str
) -> None:
    ledger = MemoryLedger()
    tools = gated_tools(ledger, rule=lambda input, output: input["sku"] == "B2")
    run_durable(run_id, journal=journal, tools=tools, planner=SCRIPT)
    assert compensate_run(run_id, journal=journal, tools=tools).complete


def test_an_approval_before_the_unwind_reaches_the_gate_lets_it_straight_through(
    journal: Journal, run_id: str
) -> None:
    ledger = MemoryLedger()
    tools = placed(journal, ledger, run_id)
    approve_compensation(journal, run_id, "call-2", actor="alice")
    assert compensate_run(run_id, journal=journal, tools=tools).complete


def test_two_concurrent_approvers_of_one_gate_make_one_decision_and_one_effect(
    journal: Journal, journal_url: str, run_id: str
) -> None:
    ledger = open_ledger(journal_url)  # outside the journal: what the provider saw
    try:
        tools = placed(journal, ledger, run_id)
        compensate_run(run_id, journal=journal, tools=tools)
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def approver(name: str) -> None:
            try:
                barrier.wait()
                approve_compensation(journal, run_id, "call-2", actor=name)
                compensate_run(run_id, journal=journal, tools=tools, actor=name)
            except BaseException as exc:  # handed to the test below
                errors.append(exc)

        threads = [threading.Thread(target=approver, args=(n,)) for n in ("alice", "bob")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        final = compensate_run(run_id, journal=journal, tools=tools)
        assert final.complete
        assert ledger.effect_counts("compensate:reserve") == {f"{run_id}:comp:call-2": 1}
        assert ledger.call_counts("compensate:reserve")[f"{run_id}:comp:call-2"] == 1  # one hook call, too
        approvals = [r for r in read_audit(journal, run_id) if r.action is AuditAction.COMPENSATION_APPROVED]
        assert len(approvals) == 1 and approvals[0].actor in ("alice", "bob")
    finally:
        ledger.close()


def test_deciding_on_a_step_the_run_does_not_have_is_refused(journal: Journal, run_id: str) -> None:
    ledger = MemoryLedger()
    placed(journal, ledger, run_id)
    with pytest.raises(ApprovalError, match="no such step"):
        approve_compensation(journal, run_id, "call-9", actor="alice")
