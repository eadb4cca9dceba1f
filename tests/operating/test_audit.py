"""The audit trail (docs/reference/approvals.md), on every journal: append-only rows for the tombstone, each
decision and each unwind's outcome; none for a dry run."""

from __future__ import annotations

from typing import Any

import pytest

from saga_worker import (
    AuditAction,
    AuditVia,
    CallOptions,
    InvalidInputError,
    Journal,
    Tool,
    ToolCall,
    approve,
    approve_compensation,
    compensate_run,
    deny_compensation,
    read_audit,
    resume_run,
    run_durable,
    scripted,
)
from saga_worker.compensation.actors import default_actor
from saga_worker.executor import sweep
from saga_worker.journal.records import NewAudit, UnwindState
from saga_worker.operating.audit import audit_dict
from saga_worker.settings import SagaSettings
from tests.reads import run_of


def noop(input: Any, opts: CallOptions) -> Any:
    return {}


def undo(input: Any, output: Any, opts: CallOptions) -> None:
    pass


TOOLS = {
    "charge": Tool(noop, undo, compensate_needs_approval=True),
    "ship": Tool(noop, undo),
    "refund": Tool(noop, undo, needs_approval=True),
    "label": Tool(noop, undo, compensate_needs_approval=True),
}
SCRIPT = scripted(ToolCall("charge", {}), ToolCall("label", {}), ToolCall("ship", {}), ToolCall("refund", {}))


def test_every_action_leaves_its_row_and_the_report_names_who_condemned_and_why(
    journal: Journal, run_id: str
) -> None:
    assert run_durable(run_id, journal=journal, tools=TOOLS, planner=SCRIPT).status == "suspended"
    approve(journal, run_id, "call-4", actor="alice", reason="customer asked")
    assert resume_run(run_id, journal=journal, tools=TOOLS, planner=SCRIPT).status == "finished"
    first = compensate_run(run_id, journal=journal, tools=TOOLS, actor="ops", reason="order cancelled")
    assert (first.condemned_by, first.reason) == ("ops", "order cancelled")
    deny_compensation(journal, run_id, "call-2", actor="bob", reason="label is free")
    approve_compensation(journal, run_id, "call-1", actor="carol")
    second = compensate_run(run_id, journal=journal, tools=TOOLS, actor="dave", reason="again", via="cli")
    assert (second.condemned_by, second.reason) == ("ops", "order cancelled")  # the tombstone's author

    trail = read_audit(journal, run_id)
    assert [(r.action, r.actor, r.reason, r.target) for r in trail] == [
        (AuditAction.APPROVED, "alice", "customer asked", "call-4"),
        (AuditAction.CONDEMNED, "ops", "order cancelled", None),
        (AuditAction.UNWOUND, "ops", "order cancelled", None),
        (AuditAction.COMPENSATION_DENIED, "bob", "label is free", "call-2"),
        (AuditAction.COMPENSATION_APPROVED, "carol", "", "call-1"),
        (AuditAction.UNWOUND, "dave", "again", None),
    ]
    assert trail[-1].via is AuditVia.CLI and trail[1].via is AuditVia.LIBRARY
    assert trail[2].detail["counts"] == {"compensated": 2, "awaiting-approval": 1, "not-attempted": 1}
    assert trail[-1].detail["counts"] == {
        "already-compensated": 2,
        "skipped-denied": 1,
        "compensated": 1,
    }
    assert [r.id for r in trail] == sorted(r.id for r in trail)
    assert all(a.at <= b.at + 1e-3 for a, b in zip(trail, trail[1:], strict=False))
    assert audit_dict(trail[0])["action"] == "approved"


def test_a_dry_run_writes_no_audit_row_and_a_second_tombstone_no_second_condemned_row(
    journal: Journal, run_id: str
) -> None:
    run_durable(
        run_id, journal=journal, tools={"ship": TOOLS["ship"]}, planner=scripted(ToolCall("ship", {}))
    )
    compensate_run(run_id, journal=journal, tools=TOOLS, dry_run=True, actor="ops")
    assert read_audit(journal, run_id) == []
    compensate_run(run_id, journal=journal, tools=TOOLS, actor="ops")
    compensate_run(run_id, journal=journal, tools=TOOLS, actor="eve")
    compensate_run(run_id, journal=journal, tools=TOOLS, dry_run=True, actor="ops")
    actions = [(r.action, r.actor) for r in read_audit(journal, run_id)]
    assert actions == [
        (AuditAction.CONDEMNED, "ops"),
        (AuditAction.UNWOUND, "ops"),
        (AuditAction.UNWOUND, "eve"),
    ]


def test_the_report_names_the_tombstones_author_whoever_unwinds_or_plans_later(
    journal: Journal, run_id: str
) -> None:
    run_durable(
        run_id, journal=journal, tools={"ship": TOOLS["ship"]}, planner=scripted(ToolCall("ship", {}))
    )
    first = compensate_run(run_id, journal=journal, tools=TOOLS, actor="ops", reason="")
    assert (first.condemned_by, first.reason) == ("ops", None)
    again = compensate_run(run_id, journal=journal, tools=TOOLS, actor="eve", reason="why not")
    plan = compensate_run(run_id, journal=journal, tools=TOOLS, dry_run=True, actor="zed")
    assert (again.condemned_by, again.reason) == (plan.condemned_by, plan.reason) == ("ops", None)
    journal.condemn("quiet-" + run_id)  # a tombstone whose trail does not say who wrote it
    quiet = compensate_run("quiet-" + run_id, journal=journal, actor="eve", reason="late")
    assert (quiet.condemned, quiet.condemned_by, quiet.reason) == (True, None, None)
    never = compensate_run("never-" + run_id, journal=journal, actor="eve", reason="unknown id")
    assert (never.condemned_by, never.reason) == ("eve", "unknown id")
    live = compensate_run("live-" + run_id, journal=journal, dry_run=True, actor="eve")
    assert (live.condemned, live.condemned_by, live.reason) == (False, None, None)


def test_without_an_actor_the_setting_or_the_os_user_is_named(
    journal: Journal, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from saga_worker import settings

    compensate_run(run_id, journal=journal)
    assert read_audit(journal, run_id)[0].actor == default_actor() != ""
    monkeypatch.setattr(settings, "get_settings", lambda: SagaSettings(actor="ops-bot"))
    monkeypatch.setattr("saga_worker.compensation.actors.get_settings", lambda: SagaSettings(actor="ops-bot"))
    assert default_actor() == "ops-bot"


def test_the_sweeper_leaves_a_run_at_a_gate_alone_and_resumes_it_once_approved(
    journal: Journal, run_id: str
) -> None:
    tools = {"charge": TOOLS["charge"], "ship": TOOLS["ship"]}
    run_durable(
        run_id, journal=journal, tools=tools, planner=scripted(ToolCall("charge", {}), ToolCall("ship", {}))
    )
    report = compensate_run(run_id, journal=journal, tools=tools)
    assert [e.status.value for e in report.entries] == ["compensated", "awaiting-approval"]
    settings = SagaSettings(sweep_backoff=0.01, sweep_backoff_max=0.01)
    far = journal.now() + 1e6
    redriven: list[str] = []
    assert sweep(journal, enqueue=redriven.append, settings=settings, now=far).redriven == []
    approve_compensation(journal, run_id, "call-1", actor="alice")

    def redrive(rid: str) -> None:
        redriven.append(rid)
        compensate_run(rid, journal=journal, tools=tools, via="sweeper")

    assert sweep(journal, enqueue=redrive, settings=settings, now=journal.now() + 1).redriven == [run_id]
    last = read_audit(journal, run_id)[-1]
    assert last.via is AuditVia.SWEEPER and last.detail["complete"] is True


def test_a_condemned_row_cannot_be_forged_before_the_tombstone_and_the_report_names_its_author(
    journal: Journal, run_id: str
) -> None:
    assert run_durable(
        run_id, journal=journal, tools=TOOLS, planner=scripted(ToolCall("ship", {}))
    ).status == ("finished")
    forged = NewAudit(run_id, AuditAction.CONDEMNED, "mallory", AuditVia.LIBRARY, "I did it")
    with pytest.raises(InvalidInputError, match="only with the tombstone"):
        journal.append_audit(forged)
    with pytest.raises(InvalidInputError, match="only with the tombstone"):
        journal.set_unwind_state(run_id, UnwindState.PENDING, audit=forged)
    assert journal.read_audit(run_id) == []
    assert not run_of(journal, run_id).condemned
    report = compensate_run(run_id, journal=journal, tools=TOOLS, actor="ops", reason="cancelled")
    assert (report.condemned_by, report.reason) == ("ops", "cancelled")
    assert [(r.action, r.actor) for r in read_audit(journal, run_id)] == [
        (AuditAction.CONDEMNED, "ops"),
        (AuditAction.UNWOUND, "ops"),
    ]
