"""The tombstone's cost, pinned: the transactions and statements ``condemn`` and ``condemn_and_read``
send on each SQL backend (what the bench measures per unwind, issue 26), so moving the rule
(``journal/tombstone.py``, ``sql_parts/tombstone.py``) cannot add a commit, a sync or a round trip."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from saga_worker.journal import driver, open_journal
from saga_worker.journal.records import AuditAction, AuditVia, NewAudit, RecordStatus
from saga_worker.journal.sql import SqlJournal

# One transaction as sent: (writes, atomic, durable, statements run in it).
Sent = tuple[bool, bool, bool, int]


@pytest.fixture(params=["sqlite", "postgres"])
def sql_journal(request: pytest.FixtureRequest) -> Iterator[SqlJournal]:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    journal = open_journal(url, migrate=True)
    assert isinstance(journal, SqlJournal)
    yield journal
    journal.close()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Sent]:
    """Every transaction the journal runs from now on, as ``Sent``."""
    log: list[Sent] = []
    real = driver.transaction

    def counted(connections: Any, work: Callable[[driver.Tx], Any], **how: Any) -> Any:
        seen: list[driver.Tx] = []

        def watched(tx: driver.Tx) -> Any:
            seen.append(tx)
            return work(tx)

        result = real(connections, watched, **how)
        log.append(
            (how["write"], how.get("atomic", True), how.get("durable", False), seen[-1].statements_run)
        )
        return result

    monkeypatch.setattr(driver, "transaction", counted)
    return log


def _audit(run_id: str) -> NewAudit:
    return NewAudit(run_id=run_id, action=AuditAction.CONDEMNED, actor="ops", via=AuditVia.CLI, reason="stop")


def test_an_unwinds_first_move_costs_what_it_cost(
    sql_journal: SqlJournal, run_id: str, sent: list[Sent]
) -> None:
    journal = sql_journal
    journal.start_run(run_id, "p")
    journal.start_run(run_id + "-a", "p")
    journal.start_run(run_id + "-c", "p")
    sent.clear()
    view = journal.condemn_and_read(run_id, [RecordStatus.SUCCEEDED])
    assert view.run is not None and view.run.condemned
    live = list(sent)
    sent.clear()
    journal.condemn_and_read(run_id, [RecordStatus.SUCCEEDED])  # condemned already: the stamp writes nothing
    again = list(sent)
    sent.clear()
    journal.condemn_and_read(run_id + "-never", [])  # a run never seen: its tombstone is a new row
    unknown = list(sent)
    sent.clear()
    journal.condemn_and_read(run_id + "-a", [], audit=_audit(run_id + "-a"))
    audited = list(sent)
    sent.clear()
    journal.condemn(run_id + "-c", audit=_audit(run_id + "-c"))
    condemned = list(sent)
    assert {"live": live, "again": again, "unknown": unknown, "audited": audited, "condemn": condemned} == (
        EXPECTED[journal.dialect]
    )


# As measured before the rule had its home (0ddcf18). SQLite: one synced transaction each (BEGIN
# IMMEDIATE, the stamp, the reads). PostgreSQL: one pipeline framed as a durable transaction (see
# ``sql_parts/tombstone.py``), and condemn's own durable transaction after it when the stamp wrote nothing.
EXPECTED: dict[str, dict[str, list[Sent]]] = {
    "sqlite": {
        "live": [(True, True, True, 3)],
        "again": [(True, True, True, 5)],
        "unknown": [(True, True, True, 4)],
        "audited": [(True, True, True, 4)],
        "condemn": [(True, True, True, 2)],
    },
    "postgresql": {
        "live": [(True, False, False, 4)],
        "again": [(True, False, False, 4), (True, False, True, 6)],
        "unknown": [(True, False, False, 4), (True, False, True, 5)],
        "audited": [(True, False, False, 4)],
        "condemn": [(True, False, True, 1)],
    },
}
