"""The tombstone and the first step's claim in one commit (``Journal.condemn_read_and_claim``, the
in-process unwind's first commit), on every backend: the step claimed is the run's latest one to
undo, only when its tool is one named, and a claim that cannot be taken (busy, already compensated)
never costs the tombstone."""

from __future__ import annotations

from saga_worker import Journal, Tool, ToolCall, run_durable, scripted
from saga_worker.journal.records import (
    AuditAction,
    AuditVia,
    ClaimAttempt,
    ClaimStatus,
    FirstClaim,
    NewAudit,
    RecordStatus,
    WorklistView,
)

STEPS = 3
UNWOUND = (RecordStatus.SUCCEEDED, RecordStatus.FAILED, RecordStatus.RUNNING)
LATEST = f"call-{STEPS}"


def _noop(*_args: object) -> dict[str, bool]:
    return {"ok": True}


def _recorded(journal: Journal, run_id: str) -> None:
    tools = {f"t{i}": Tool(execute=_noop, compensate=_noop) for i in range(STEPS)}
    calls = [ToolCall(f"t{i}", {"i": i}) for i in range(STEPS)]
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*calls), max_steps=STEPS + 1)


def _condemn(
    journal: Journal, run_id: str, tools: frozenset[str] = frozenset({"t0", "t1", "t2"})
) -> tuple[WorklistView, ClaimAttempt | None]:
    audit = NewAudit(run_id, AuditAction.CONDEMNED, "me", AuditVia.LIBRARY, "test")
    first = FirstClaim(tools, "first-owner", run_id, 30.0)
    return journal.condemn_read_and_claim(run_id, UNWOUND, audit=audit, first=first)


def _condemned_once(journal: Journal, run_id: str) -> None:
    run = journal.get_run(run_id)
    assert run is not None and run.condemned
    trail = [a.action for a in journal.read_audit(run_id)]
    assert trail.count(AuditAction.CONDEMNED) == 1


def test_the_latest_step_is_claimed_with_the_tombstone(journal: Journal, run_id: str) -> None:
    _recorded(journal, run_id)

    view, got = _condemn(journal, run_id)

    _condemned_once(journal, run_id)
    assert [r.suffix for r in view.records] == [f"call-{i + 1}" for i in range(STEPS)]
    assert got is not None and got.acquired and got.claim is not None
    claim = got.claim
    assert (claim.suffix, claim.owner, claim.status, claim.attempts) == (
        LATEST,
        "first-owner",
        ClaimStatus.CLAIMED,
        1,
    )
    assert claim.idempotency_key == f"{run_id}:comp:{LATEST}"
    assert journal.get_claim(run_id, LATEST) == claim
    assert all(journal.get_claim(run_id, f"call-{i + 1}") is None for i in range(STEPS - 1))


def test_a_latest_step_whose_tool_is_not_named_is_not_claimed(journal: Journal, run_id: str) -> None:
    _recorded(journal, run_id)

    view, got = _condemn(journal, run_id, tools=frozenset({"t0", "t1"}))

    _condemned_once(journal, run_id)
    assert len(view.records) == STEPS
    assert got is None
    assert all(journal.get_claim(run_id, f"call-{i + 1}") is None for i in range(STEPS))


def test_a_busy_first_step_keeps_the_tombstone(journal: Journal, run_id: str) -> None:
    _recorded(journal, run_id)
    held = journal.claim_compensation(
        run_id, LATEST, via_run_id=run_id, owner="other", ttl=30.0, idempotency_key=f"{run_id}:comp:{LATEST}"
    )
    assert held.acquired

    view, got = _condemn(journal, run_id)

    _condemned_once(journal, run_id)
    assert len(view.records) == STEPS
    assert got is None or not got.acquired
    claim = journal.get_claim(run_id, LATEST)
    assert claim is not None and (claim.owner, claim.attempts) == ("other", 1)


def test_a_first_step_already_compensated_keeps_the_tombstone_and_its_outcome(
    journal: Journal, run_id: str
) -> None:
    _recorded(journal, run_id)
    key = f"{run_id}:comp:{LATEST}"
    assert journal.claim_compensation(
        run_id, LATEST, via_run_id=run_id, owner="e", ttl=30.0, idempotency_key=key
    )
    assert journal.finish_claim(run_id, LATEST, "e", ClaimStatus.COMPENSATED)

    view, got = _condemn(journal, run_id)

    _condemned_once(journal, run_id)
    assert view.claims[(run_id, LATEST)].status is ClaimStatus.COMPENSATED
    assert got is None or not got.acquired
    claim = journal.get_claim(run_id, LATEST)
    assert claim is not None and (claim.status, claim.owner, claim.attempts) == (
        ClaimStatus.COMPENSATED,
        "e",
        1,
    )


def test_a_run_never_seen_is_condemned_and_nothing_is_claimed(journal: Journal, run_id: str) -> None:
    view, got = _condemn(journal, run_id)

    _condemned_once(journal, run_id)
    assert view.records == [] and got is None


def test_without_an_audit_row_the_latest_step_is_claimed_with_the_tombstone(
    journal: Journal, run_id: str
) -> None:
    _recorded(journal, run_id)
    first = FirstClaim(frozenset({"t2"}), "first-owner", run_id, 30.0)

    _view, got = journal.condemn_read_and_claim(run_id, UNWOUND, first=first)

    run = journal.get_run(run_id)
    assert run is not None and run.condemned
    assert got is not None and got.acquired and got.claim is not None
    assert got.claim == journal.get_claim(run_id, LATEST)
