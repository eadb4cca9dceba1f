"""What a crash leaves behind, for tests that make one: a ``running`` record whose execute lease lapsed.

A process killed inside ``execute`` stops renewing the call's execute lease, and on PostgreSQL nobody
may probe or re-execute the call until that lease lapses (``SAGA_CLAIM_TTL``, 30 s by default): a
live process cut off from the database looks the same until then. Tests that crash a call (in-process
by a BaseException, or by killing a child process) do not wait that out: once the crashed process can
no longer renew, they date its lease back, as if the crash had happened long ago. On memory and SQLite
the execution guard alone decides, and the lease changes nothing.
"""

from __future__ import annotations

from dataclasses import replace

import sqlalchemy as sa

from saga_worker import Journal, SqlJournal
from saga_worker.journal.memory import MemoryJournal
from saga_worker.journal.records import RecordStatus, ToolRecord
from saga_worker.journal.schema import records


def lapse_execute_lease(journal: Journal, run_id: str, suffix: str) -> ToolRecord:
    """Expire the execute lease of a ``running`` record whose process is gone; the record as it now is."""
    current = journal.get_record(run_id, suffix)
    assert current is not None and current.status is RecordStatus.RUNNING, current
    lapsed = journal.now() - 3600
    if isinstance(journal, MemoryJournal):
        journal._records[(run_id, suffix)] = replace(
            journal._records[(run_id, suffix)], exec_lease_expires_at=lapsed
        )
    else:
        assert isinstance(journal, SqlJournal), journal
        with journal.engine.begin() as conn:
            conn.execute(
                sa.update(records)
                .where(records.c.run_id == run_id, records.c.suffix == suffix)
                .values(exec_lease_expires_at=lapsed)
            )
    after = journal.get_record(run_id, suffix)
    assert after is not None
    return after
