"""A step's outcome and the next step's claim in one commit (``Journal.finish_and_claim``, the
in-process unwind's n+1 commits), and the last step's outcome with the unwind's complete state
(``Journal.finish_last_step``), on every backend: an outcome is written only by the claim's owner,
nothing else is written without it, and a next step that is busy or done keeps the outcome written."""

from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy as sa

from saga_worker import Journal
from saga_worker.journal import boot_clock
from saga_worker.journal.records import (
    AuditAction,
    AuditVia,
    ClaimAttempt,
    ClaimStatus,
    CompensationClaim,
    FinishedClaim,
    NewAudit,
    UnwindState,
)
from saga_worker.journal.sql_parts.claims import CLAIM_FIELDS


def _claim(journal: Journal, run_id: str, suffix: str, owner: str) -> ClaimAttempt | None:
    return journal.claim_compensation(
        run_id, suffix, via_run_id=run_id, owner=owner, ttl=30.0, idempotency_key=f"{run_id}:comp:{suffix}"
    )


def _next(journal: Journal, run_id: str, finished_by: str, owner: str = "me-2") -> ClaimAttempt | None:
    done = FinishedClaim(run_id, "call-2", finished_by, ClaimStatus.COMPENSATED)
    return journal.finish_and_claim(
        done,
        run_id,
        "call-1",
        via_run_id=run_id,
        owner=owner,
        ttl=30.0,
        idempotency_key=f"{run_id}:comp:call-1",
    )


def test_the_outcome_and_the_next_claim_are_written_together(journal: Journal, run_id: str) -> None:
    got = _claim(journal, run_id, "call-2", "me-1")
    assert got is not None and got.acquired

    taken = _next(journal, run_id, "me-1")

    assert taken is not None and taken.acquired and taken.claim is not None
    assert (taken.claim.owner, taken.claim.status, taken.claim.attempts) == ("me-2", ClaimStatus.CLAIMED, 1)
    assert taken.claim == journal.get_claim(run_id, "call-1")
    finished = journal.get_claim(run_id, "call-2")
    assert finished is not None and finished.status is ClaimStatus.COMPENSATED and finished.owner == "me-1"


def test_an_outcome_of_a_lost_claim_is_not_written_and_nothing_is_claimed(
    journal: Journal, run_id: str
) -> None:
    assert _claim(journal, run_id, "call-2", "someone-else") is not None

    assert _next(journal, run_id, "me-1") is None

    held = journal.get_claim(run_id, "call-2")
    assert held is not None and held.status is ClaimStatus.CLAIMED and held.owner == "someone-else"
    assert journal.get_claim(run_id, "call-1") is None


def test_a_busy_next_step_keeps_the_outcome_and_says_who_holds_it(journal: Journal, run_id: str) -> None:
    assert _claim(journal, run_id, "call-2", "me-1") is not None
    assert _claim(journal, run_id, "call-1", "other-unwinder") is not None

    busy = _next(journal, run_id, "me-1")

    assert busy is not None and not busy.acquired
    assert busy.claim is not None and busy.claim.owner == "other-unwinder"
    finished = journal.get_claim(run_id, "call-2")
    assert finished is not None and finished.status is ClaimStatus.COMPENSATED


def test_a_next_step_already_compensated_keeps_the_outcome(journal: Journal, run_id: str) -> None:
    assert _claim(journal, run_id, "call-2", "me-1") is not None
    assert _claim(journal, run_id, "call-1", "earlier") is not None
    assert journal.finish_claim(run_id, "call-1", "earlier", ClaimStatus.COMPENSATED)

    done = _next(journal, run_id, "me-1")

    assert done is not None and not done.acquired
    assert done.claim is not None and done.claim.status is ClaimStatus.COMPENSATED
    finished = journal.get_claim(run_id, "call-2")
    assert finished is not None and finished.status is ClaimStatus.COMPENSATED


def test_a_failed_next_step_is_taken_again_with_its_attempts_counted(journal: Journal, run_id: str) -> None:
    assert _claim(journal, run_id, "call-2", "me-1") is not None
    assert _claim(journal, run_id, "call-1", "earlier") is not None
    assert journal.finish_claim(run_id, "call-1", "earlier", ClaimStatus.FAILED, "provider said no")

    taken = _next(journal, run_id, "me-1")

    assert taken is not None and taken.acquired and taken.claim is not None
    assert (taken.claim.owner, taken.claim.attempts, taken.claim.error) == ("me-2", 2, None)


@pytest.mark.backends("sqlite")  # PostgreSQL writes both in one statement (claim_next): atomic whole
def test_an_error_in_the_next_claim_keeps_the_outcome_and_undoes_the_claim_alone(
    journal: Journal, journal_url: str, run_id: str
) -> None:
    assert _claim(journal, run_id, "call-2", "me-1") is not None
    engine = sa.create_engine(journal_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE TRIGGER refuse_claim BEFORE INSERT ON saga_compensations WHEN NEW.suffix = 'call-1' "
            "BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    try:
        with pytest.raises(sa.exc.DBAPIError, match="refused"):
            _next(journal, run_id, "me-1")  # the claim, tried again alone after the commit, fails again
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TRIGGER refuse_claim")
        engine.dispose()
    finished = journal.get_claim(run_id, "call-2")
    assert finished is not None and finished.status is ClaimStatus.COMPENSATED and finished.owner == "me-1"
    assert journal.get_claim(run_id, "call-1") is None


def _unwound(run_id: str) -> NewAudit:
    return NewAudit(
        run_id,
        AuditAction.UNWOUND,
        "me",
        AuditVia.LIBRARY,
        "",
        detail={"complete": True},
        event_key=f"unwound:{run_id}",
    )


def test_the_last_outcome_and_the_complete_state_are_written_together(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "p")
    journal.condemn(run_id)
    assert _claim(journal, run_id, "call-2", "me-1") is not None
    done = FinishedClaim(run_id, "call-2", "me-1", ClaimStatus.COMPENSATED)

    assert journal.finish_last_step(done, run_id, epoch=None, audit=_unwound(run_id))

    run = journal.get_run(run_id)
    assert run is not None and run.unwind_state is UnwindState.COMPLETE
    assert [a.action for a in journal.read_audit(run_id)][-1] is AuditAction.UNWOUND
    finished = journal.get_claim(run_id, "call-2")
    assert finished is not None and finished.status is ClaimStatus.COMPENSATED


def test_a_last_outcome_of_a_lost_claim_writes_neither_it_nor_the_state(
    journal: Journal, run_id: str
) -> None:
    journal.start_run(run_id, "p")
    journal.condemn(run_id)
    before = journal.get_run(run_id)
    assert _claim(journal, run_id, "call-2", "someone-else") is not None
    done = FinishedClaim(run_id, "call-2", "me-1", ClaimStatus.COMPENSATED)

    assert not journal.finish_last_step(done, run_id, epoch=None, audit=_unwound(run_id))

    run = journal.get_run(run_id)
    assert before is not None and run is not None and run.unwind_state is before.unwind_state
    assert AuditAction.UNWOUND not in [a.action for a in journal.read_audit(run_id)]
    held = journal.get_claim(run_id, "call-2")
    assert held is not None and held.status is ClaimStatus.CLAIMED


def test_a_claim_taken_reads_as_the_claim_read_back_afterwards(journal: Journal, run_id: str) -> None:
    # On SQLite the claim taken is read back by its key as plain values (``claims.claim_of``), on
    # PostgreSQL from its RETURNING: either way every field is the stored row's, as ``get_claim`` reads it.
    first = _claim(journal, run_id, "call-1", "me-1")
    assert first is not None and first.acquired
    assert first.claim == journal.get_claim(run_id, "call-1")
    assert journal.finish_claim(run_id, "call-1", "me-1", ClaimStatus.FAILED, "boom")
    again = _claim(journal, run_id, "call-1", "me-2")  # taken over: its attempts counted
    assert again is not None and again.acquired and again.claim is not None
    assert again.claim == journal.get_claim(run_id, "call-1")
    assert (again.claim.owner, again.claim.attempts, again.claim.error) == ("me-2", 2, None)


def test_a_claim_taken_where_there_is_no_boot_clock_reads_as_the_claim_read_back(
    journal: Journal, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On SQLite a first claim is made from what its insert bound (``claims.inserted``), its lease as
    # the database computes it: with no boot id, the boot columns are NULL (NULL plus a TTL).
    monkeypatch.setattr(boot_clock, "reading", lambda: {"boot": None, "mono": None})
    first = _claim(journal, run_id, "call-2", "me-1")
    assert first is not None and first.acquired and first.claim is not None
    assert first.claim == journal.get_claim(run_id, "call-2")
    taken = _next(journal, run_id, "me-1")
    assert taken is not None and taken.acquired and taken.claim is not None
    assert taken.claim == journal.get_claim(run_id, "call-1")


def test_the_claim_fields_read_as_plain_values_are_the_claims_own_in_order() -> None:
    assert tuple(f.name for f in dataclasses.fields(CompensationClaim)) == CLAIM_FIELDS
