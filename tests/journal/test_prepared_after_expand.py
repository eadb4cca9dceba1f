"""An unwind on PostgreSQL, on a worker or in process, goes on after an expand migration adds a column to the tables its
step statements read, while its connections stay open (a rolling upgrade migrates first).

psycopg prepares a statement on the server after its fifth call on a connection; a prepared
statement that returns ``*`` of a table fails once the table has a column more ("cached plan must
not change result type"), so the step statements name their columns."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from saga_worker import Journal, Tool, ToolCall, compensate_run, open_journal, run_durable, scripted
from saga_worker import executor as ex
from saga_worker.executor import Step
from saga_worker.locks.memory import MemoryStepLock
from tests.conftest import fresh_pg_database

STEPS = 3


def _noop(*_args: object) -> dict[str, bool]:
    return {"ok": True}


TOOLS = {f"t{i}": Tool(execute=_noop, compensate=_noop) for i in range(STEPS)}


@pytest.fixture
def own_database() -> Iterator[str]:
    """A database of this test's own: it changes the schema."""
    yield from fresh_pg_database("saga_expand_")


def _recorded(journal: Journal) -> str:
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    calls = [ToolCall(f"t{i}", {"i": i}) for i in range(STEPS)]
    run_durable(run_id, journal=journal, tools=TOOLS, planner=scripted(*calls), max_steps=STEPS + 1)
    return run_id


def _unwound_in_process(journal: Journal) -> list[str]:
    report = compensate_run(_recorded(journal), journal=journal, tools=TOOLS)
    return [e.status.value for e in report.entries]


def _unwound_on_a_worker(journal: Journal) -> list[str]:
    run_id = _recorded(journal)
    lock = MemoryStepLock()
    unwind = f"u-{run_id}"
    nxt: object = ex.start_unwind(journal, run_id, unwind, dry_run=False, claim_ttl=5.0)
    while isinstance(nxt, Step):
        nxt = ex.run_step(journal, TOOLS, run_id, unwind, nxt.suffix, claim_ttl=5.0, lock=lock)
    return [e.status.value for e in ex.finalize_unwind(journal, run_id, unwind).entries]


def test_an_unwind_goes_on_after_a_column_is_added_to_its_tables(own_database: str) -> None:
    journal = open_journal(own_database)
    try:
        for _ in range(6):  # each statement called more than five times: prepared on the server
            assert _unwound_on_a_worker(journal) == ["compensated"] * STEPS
            assert _unwound_in_process(journal) == ["compensated"] * STEPS
        engine = sa.create_engine(own_database)
        with engine.begin() as conn:  # the next release's expand migration, say
            for table in ("saga_unwinds", "saga_compensations", "saga_tool_records"):
                conn.execute(sa.text(f"ALTER TABLE {table} ADD COLUMN next_release_note TEXT"))
        engine.dispose()

        assert _unwound_on_a_worker(journal) == ["compensated"] * STEPS
        assert _unwound_in_process(journal) == ["compensated"] * STEPS
    finally:
        journal.close()
