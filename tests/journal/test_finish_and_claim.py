"""A step's outcome and the next step's claim in one commit (``Journal.finish_and_claim``, the
in-process unwind's n+1 commits), on every backend: the outcome is written only by the claim's owner,
nothing is claimed without it, and a next step that is busy or done keeps the outcome written."""

from __future__ import annotations

from saga_worker import Journal
from saga_worker.journal.records import ClaimAttempt, ClaimStatus, FinishedClaim


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
