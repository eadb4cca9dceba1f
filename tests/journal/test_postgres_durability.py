"""The PostgreSQL journal waits for the WAL flush exactly where the contract needs it (as SQLite syncs,
tests/journal/test_sqlite_durability.py): the tombstone, and the claim of a side-effecting call that is not
idempotent. Every other commit returns without waiting (``synchronous_commit=off`` in the journal's
sessions), so an unwind costs one flush, not two per step.

Seen by the server itself: triggers on the journal's tables note, for each row written, the
``synchronous_commit`` its transaction commits with (``on``: the commit waits for the flush)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from saga_worker import Tool, ToolCall, compensate_run, open_journal, run_durable, scripted

pytestmark = pytest.mark.postgres

TABLES = ("saga_runs", "saga_tool_records", "saga_compensations", "saga_unwind_entries", "saga_audit")
NOTE = """
CREATE OR REPLACE FUNCTION durability_note() RETURNS trigger AS $$
DECLARE what text := TG_OP;
BEGIN
  IF TG_TABLE_NAME = 'saga_runs' THEN
    IF NEW.condemned_at IS NOT NULL AND (TG_OP = 'INSERT' OR OLD.condemned_at IS NULL) THEN
      what := 'tombstone';
    END IF;
  ELSIF TG_TABLE_NAME = 'saga_tool_records' THEN
    what := TG_OP || ' ' || NEW.tool_name || ' ' || NEW.status;
  ELSIF TG_TABLE_NAME = 'saga_compensations' THEN
    what := TG_OP || ' ' || NEW.status;
  END IF;
  INSERT INTO durability_seen (tx, tbl, what, setting)
    VALUES (txid_current(), TG_TABLE_NAME, what, current_setting('synchronous_commit'));
  RETURN NULL;
END $$ LANGUAGE plpgsql
"""


@pytest.fixture
def seen(pg_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(
            sa.text("CREATE TABLE durability_seen (id serial, tx bigint, tbl text, what text, setting text)")
        )
        conn.execute(sa.text(NOTE))
        for table in TABLES:
            conn.execute(
                sa.text(
                    f"CREATE TRIGGER durability_note AFTER INSERT OR UPDATE ON {table} "
                    "FOR EACH ROW EXECUTE FUNCTION durability_note()"
                )
            )
    try:
        yield engine
    finally:
        with engine.begin() as conn:
            for table in TABLES:
                conn.execute(sa.text(f"DROP TRIGGER IF EXISTS durability_note ON {table}"))
            conn.execute(sa.text("DROP TABLE IF EXISTS durability_seen"))
        engine.dispose()


def transactions_seen(engine: sa.Engine) -> list[tuple[str, list[str]]]:
    """Each transaction that wrote to the journal, in order: its ``synchronous_commit`` and its rows."""
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT tx, tbl, what, setting FROM durability_seen ORDER BY id")).all()
    order: dict[int, tuple[str, list[str]]] = {}
    for r in rows:
        order.setdefault(r.tx, (r.setting, []))[1].append(f"{r.tbl} {r.what}")
    return list(order.values())


def test_only_the_tombstone_and_a_non_idempotent_calls_claim_wait_for_the_wal_flush(
    pg_url: str, seen: sa.Engine, run_id: str
) -> None:
    with sa.create_engine(pg_url).connect() as conn:  # what the server is configured with
        server = conn.execute(sa.text("SHOW synchronous_commit")).scalar_one()
    assert server != "off", "the server itself commits asynchronously: nothing here could be durable"

    def undo(input: Any, output: Any, opts: Any) -> None:
        return None

    tools = {
        "charge": Tool(lambda input, opts: {"id": "ch-1"}, undo),  # side-effecting, not idempotent
        "reserve": Tool(lambda input, opts: {"id": "rs-1"}, undo, idempotent=True),
    }
    with open_journal(pg_url) as journal:
        plan = scripted(ToolCall("charge", {"amount": 5}), ToolCall("reserve", {"sku": "A1"}))
        assert run_durable(run_id, journal=journal, tools=tools, planner=plan).status == "finished"
        report = compensate_run(run_id, journal=journal, tools=tools)
        assert [e.status.value for e in report.entries] == ["compensated", "compensated"]
    transactions = transactions_seen(seen)
    assert {setting for setting, _ in transactions} == {"off", server}
    assert [rows for setting, rows in transactions if setting != "off"] == [
        # before charge's execute: its claim (the run's row gives it its sequence number)
        ["saga_runs UPDATE", "saga_tool_records INSERT charge running"],
        # before the first compensate hook: the tombstone, with the trail's row saying who condemned it
        # and the first step's claim (one statement: the claim rides in the tombstone's commit)
        ["saga_runs tombstone", "saga_compensations INSERT claimed", "saga_audit INSERT"],
    ]
    # Every other transaction returned without waiting: the idempotent call's claim, the calls'
    # outcomes, and the compensations' claims and outcomes (a lost one is redone with the same key).
    fast = [row for setting, rows in transactions if setting == "off" for row in rows]
    for row in (
        "saga_tool_records INSERT reserve running",
        "saga_tool_records UPDATE charge succeeded",
        "saga_compensations INSERT claimed",
        "saga_compensations UPDATE compensated",
    ):
        assert row in fast
