"""The tombstone rule, backend-free: every backend's ``condemn`` and ``condemn_and_read`` obey it.

A run is condemned by its tombstone (``condemned_at`` on the run's row), which is

- durable before ``condemn`` returns: no compensation hook runs on a tombstone a crash could take
  back (SQLite: the commit synced; PostgreSQL: the commit waits for the WAL flush);
- written once: a second ``condemn`` returns the first stamp, so who condemned the run stays who did;
- the only place a ``condemned`` audit row is written, with the stamp and only by the call that wrote
  it (``check_not_condemned_row`` refuses one anywhere else): the trail's first ``condemned`` row is
  who condemned the run;
- then read with the worklist (``condemn_then_read``): the run, its records, their claims, as they
  stand after the stamp; the rows are parsed after the commit, so a malformed one fails the unwind
  with its tombstone standing.

The SQL mechanics (statements, one transaction or one pipeline per dialect) are
``sql_parts/tombstone.py``; the memory journal's are ``memory_parts/runs.py`` under its lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..errors import InvalidInputError, JournalError
from .records import AuditAction, NewAudit, RecordStatus, WorklistView


class Condemns(Protocol):
    """What ``condemn_then_read`` needs of a journal."""

    def condemn(self, run_id: str, *, audit: NewAudit | None = None) -> float: ...

    def read_worklist(self, run_id: str, statuses: Sequence[RecordStatus]) -> WorklistView: ...


def check_not_condemned_row(entry: NewAudit | None) -> None:
    """Refuse a ``condemned`` audit row anywhere but in ``Journal.condemn``.

    The trail's first ``condemned`` row is who condemned the run (``condemned_by``, the report's
    ``condemned_by``): written apart from the tombstone, before it, it would name whoever wrote it."""
    if entry is not None and entry.action is AuditAction.CONDEMNED:
        raise InvalidInputError(
            f"run {entry.run_id!r}: a 'condemned' audit row is written only with the tombstone itself "
            "(Journal.condemn); nothing was written",
            run_id=entry.run_id,
        )


def stamped_or_raise(run_id: str, stamped: float | None) -> float:
    """The tombstone's time, or a refusal when it could not be written (its row kept changing)."""
    if stamped is None:
        raise JournalError(
            f"run {run_id!r}: could not write its tombstone (its row kept changing)", run_id=run_id
        )
    return stamped


def condemn_then_read(
    journal: Condemns, run_id: str, statuses: Sequence[RecordStatus], *, audit: NewAudit | None = None
) -> WorklistView:
    """The rule's order in two transactions: ``condemn`` (durable before it returns), then
    ``read_worklist``. A backend where a transaction costs no round trip reads in the tombstone's own
    transaction instead (one commit, not two): ``sql_parts/tombstone.py``."""
    journal.condemn(run_id, audit=audit)
    return journal.read_worklist(run_id, statuses)
