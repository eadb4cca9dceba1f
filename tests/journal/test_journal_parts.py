"""A backend that implements only the parts' abstract methods is a whole journal (docs: DEVELOPING.md,
"Adding a journal backend"): what spans parts (``finish_step``, ``record_unwind``'s hold,
``hold_sweep``, ``read_worklist``, ``read_step``) and ``list_runs`` have defaults in ``Journal``.

That journal (tests/journal/parts_only.py) is the ``memory-parts`` backend of the ``journal`` fixture:
the contract tests (test_journal_contract.py, test_unwind_bookkeeping.py) run on it as on every
backend.
"""

from __future__ import annotations

from saga_worker.journal.base import Journal
from saga_worker.journal.parts import (
    AuditPart,
    ClaimsPart,
    RecordsPart,
    RetentionPart,
    RunsPart,
    SharedPart,
    UnwindsPart,
)
from tests.journal.parts_only import SPANNING, PartsOnly


def test_the_parts_leave_only_what_spans_them_to_the_journal() -> None:
    parts = (RunsPart, RecordsPart, AuditPart, SharedPart, ClaimsPart, UnwindsPart, RetentionPart)
    assert all(part in Journal.__mro__ for part in parts)
    every = set().union(*(part.__abstractmethods__ for part in parts))
    assert Journal.__abstractmethods__ == every  # nothing abstract but the parts' methods
    assert not every & set(SPANNING)  # each of these has a default
    PartsOnly()  # and a journal of the parts alone can be made
