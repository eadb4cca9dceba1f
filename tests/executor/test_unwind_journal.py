"""The journal's bookkeeping of distributed unwinds, on every backend: first write wins, so a
redelivered coordinator or step message cannot change what was recorded."""

from __future__ import annotations

from saga_worker import Journal


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
