"""A backend that implements only the parts' abstract methods is a whole journal (docs: DEVELOPING.md,
"Adding a journal backend"): what spans parts (``finish_step``, ``record_unwind``'s hold,
``hold_sweep``, ``read_worklist``, ``read_step``) and ``list_runs`` have defaults in ``Journal``.

The journal here is the memory one with every such override taken back to ``Journal``'s default,
and the contract tests of those methods run on it as they run on every backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from saga_worker.journal.base import Journal
from saga_worker.journal.memory import MemoryJournal
from saga_worker.journal.parts import AuditPart, ClaimsPart, RecordsPart, RunsPart, SharedPart, UnwindsPart
from tests.journal import test_unwind_bookkeeping as steps
from tests.journal.test_journal_contract import (
    test_list_runs_lists_most_recently_updated_first,
    test_recording_an_unwind_with_a_hold_keeps_the_sweeper_off_the_run_unless_it_is_a_dry_run,
)

SPANNING = ("finish_step", "record_unwind", "hold_sweep", "read_worklist", "read_step", "list_runs")


class PartsOnly(MemoryJournal):
    """The memory journal's parts, and nothing of its own for what spans them."""


for _name in SPANNING:
    setattr(PartsOnly, _name, getattr(Journal, _name))


def test_the_parts_leave_only_what_spans_them_to_the_journal() -> None:
    parts = (RunsPart, RecordsPart, AuditPart, SharedPart, ClaimsPart, UnwindsPart)
    assert all(part in Journal.__mro__ for part in parts)
    every = set().union(*(part.__abstractmethods__ for part in parts))
    assert Journal.__abstractmethods__ == every  # nothing abstract but the parts' methods
    assert not every & set(SPANNING)  # each of these has a default
    PartsOnly()  # and a journal of the parts alone can be made


CONTRACT: list[Callable[..., Any]] = [
    test_recording_an_unwind_with_a_hold_keeps_the_sweeper_off_the_run_unless_it_is_a_dry_run,
    steps.test_an_unwind_keeps_the_worklist_of_its_first_record,
    steps.test_a_step_entry_is_written_once_and_read_back_by_position,
    steps.test_the_owner_of_a_step_writes_its_outcome_and_the_won_entry_together,
    steps.test_a_holder_whose_lease_was_taken_over_writes_no_outcome_and_stores_the_lost_entry,
    steps.test_a_step_finished_after_an_entry_was_stored_writes_its_outcome_and_is_given_the_stored_entry,
]


@pytest.mark.parametrize("contract", CONTRACT, ids=lambda f: f.__name__)
def test_the_defaults_keep_the_contract(contract: Callable[..., Any], run_id: str) -> None:
    contract(PartsOnly(), run_id)


def test_list_runs_by_default_is_a_page_of_runs() -> None:
    test_list_runs_lists_most_recently_updated_first(PartsOnly())
