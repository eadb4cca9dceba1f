"""The journal's bookkeeping of distributed unwinds, on every backend: first write wins, so a
redelivered coordinator or step message cannot change what was recorded."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from saga_worker import Journal
from saga_worker.errors import InvalidInputError
from saga_worker.journal.memory import MemoryJournal
from saga_worker.journal.records import ClaimStatus, StepFinish
from tests.journal.parts_only import PartsOnly

# Every backend, and the journal of the parts alone (tests/journal/parts_only.py): the defaults keep the contract.
pytestmark = pytest.mark.backends("memory", "sqlite", "postgres", "memory-parts")


def test_an_unwind_keeps_the_worklist_of_its_first_record(journal: Journal, run_id: str) -> None:
    first = journal.record_unwind("u-1", run_id, dry_run=False, suffixes=["call-3", "call-2", "call-1"])
    again = journal.record_unwind("u-1", run_id, dry_run=True, suffixes=["call-9"])
    assert again == first == journal.get_unwind("u-1")
    assert first.suffixes == ("call-3", "call-2", "call-1") and first.dry_run is False
    assert journal.get_unwind("u-unknown") is None


def test_a_step_entry_is_written_once_and_read_back_by_position(journal: Journal, run_id: str) -> None:
    journal.record_unwind("u-2", run_id, dry_run=False, suffixes=["a", "b"])
    assert journal.record_unwind_entry("u-2", 1, {"status": "failed", "n": 1}) == {"status": "failed", "n": 1}
    assert journal.record_unwind_entry("u-2", 1, {"status": "compensated"}) == {"status": "failed", "n": 1}
    journal.record_unwind_entry("u-2", 0, {"status": "compensated"})
    assert journal.list_unwind_entries("u-2") == {
        0: {"status": "compensated"},
        1: {"status": "failed", "n": 1},
    }
    assert journal.list_unwind_entries("u-other") == {}


# -- a step's outcome and its entry, in one commit (Journal.finish_step) ------------------------------

WON = {"status": "compensated", "error": None}
LOST = {"status": "busy", "error": "lease lapsed: the step is another unwinder's"}


def _claimed(journal: Journal, run_id: str, owner: str, ttl: float = 60.0) -> None:
    taken = journal.claim_compensation(
        run_id, "call-1", via_run_id=run_id, owner=owner, ttl=ttl, idempotency_key=f"{run_id}:comp:call-1"
    )
    assert taken.acquired


def _finish(journal: Journal, run_id: str, owner: str, position: int = 0, **kw: Any) -> StepFinish:
    return journal.finish_step(
        run_id,
        "call-1",
        owner,
        ClaimStatus.COMPENSATED,
        unwind_id="u-3",
        position=position,
        **{"won": WON, "lost": LOST, **kw},
    )


def test_the_owner_of_a_step_writes_its_outcome_and_the_won_entry_together(
    journal: Journal, run_id: str
) -> None:
    journal.record_unwind("u-3", run_id, dry_run=False, suffixes=["call-1"])
    _claimed(journal, run_id, "a")

    assert _finish(journal, run_id, "a") == StepFinish(True, WON)

    claim = journal.get_claim(run_id, "call-1")
    assert claim is not None and (claim.status, claim.owner) == (ClaimStatus.COMPENSATED, "a")
    assert journal.list_unwind_entries("u-3") == {0: WON}


def test_a_holder_whose_lease_was_taken_over_writes_no_outcome_and_stores_the_lost_entry(
    journal: Journal, run_id: str
) -> None:
    journal.record_unwind("u-3", run_id, dry_run=False, suffixes=["call-1"])
    _claimed(journal, run_id, "a", ttl=-1.0)  # a lease already lapsed
    _claimed(journal, run_id, "b")

    assert _finish(journal, run_id, "a") == StepFinish(False, LOST)

    claim = journal.get_claim(run_id, "call-1")
    assert claim is not None and (claim.status, claim.owner) == (ClaimStatus.CLAIMED, "b")
    assert journal.list_unwind_entries("u-3") == {0: LOST}


def test_a_step_finished_after_an_entry_was_stored_writes_its_outcome_and_is_given_the_stored_entry(
    journal: Journal, run_id: str
) -> None:
    journal.record_unwind("u-3", run_id, dry_run=False, suffixes=["call-1"])
    earlier = {"status": "failed", "error": "an earlier delivery's"}
    journal.record_unwind_entry("u-3", 0, earlier)
    _claimed(journal, run_id, "a")

    assert _finish(journal, run_id, "a") == StepFinish(True, earlier)

    claim = journal.get_claim(run_id, "call-1")
    assert claim is not None and claim.status is ClaimStatus.COMPENSATED
    assert journal.list_unwind_entries("u-3") == {0: earlier}


def _still_claimed_with_no_entry(journal: Journal, run_id: str) -> None:
    claim = journal.get_claim(run_id, "call-1")
    assert claim is not None and (claim.status, claim.owner) == (ClaimStatus.CLAIMED, "a")
    assert journal.list_unwind_entries("u-3") == {}
    assert journal.renew_claim(run_id, "call-1", "a", 60)  # still the owner's to finish


def test_a_step_whose_entry_cannot_be_stored_keeps_its_claim_unfinished(
    journal: Journal, run_id: str, request: pytest.FixtureRequest
) -> None:
    if isinstance(journal, PartsOnly):
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                reason="Journal.finish_step's default writes the outcome, then the entry, not in one "
                "transaction: a backend of the parts alone that cannot store the entry has finished the claim",
            )
        )
    journal.record_unwind("u-3", run_id, dry_run=False, suffixes=["call-1"])
    _claimed(journal, run_id, "a")

    with pytest.raises(InvalidInputError):
        _finish(journal, run_id, "a", won={"status": "compensated", "output": object()})

    _still_claimed_with_no_entry(journal, run_id)


def test_an_entry_the_database_refuses_rolls_back_the_step_outcome_written_with_it(
    journal: Journal, run_id: str
) -> None:
    if isinstance(journal, MemoryJournal):
        pytest.skip("the memory journal has no integer range to refuse a position by")
    journal.record_unwind("u-3", run_id, dry_run=False, suffixes=["call-1"])
    _claimed(journal, run_id, "a")

    # Beyond every SQL integer: refused while the entry is written, after the outcome's update.
    with pytest.raises((OverflowError, sa.exc.DBAPIError)):
        _finish(journal, run_id, "a", position=2**70)

    _still_claimed_with_no_entry(journal, run_id)
