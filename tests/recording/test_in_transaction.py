"""Tool(in_transaction=True) (issue 22): a step whose effect is a write to the journal's own database,
made on ``opts.connection`` in the transaction that records the call, so both commit or neither (as
DBOS's ``@transaction`` steps). Tested at SQLite and PostgreSQL: a commit, a rollback (the effect and
the record both gone, the failure journaled with no effect, a resume executing it again), and a
condemned run (nothing written)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from saga_worker import (
    CompensatedRunError,
    Journal,
    Tool,
    ToolFailedError,
    compensate_run,
    saga,
)
from saga_worker.journal.records import RecordStatus

pytestmark = pytest.mark.backends("sqlite", "postgres")  # a table of the tools' own next to the journal's


@pytest.fixture
def tx_payments(journal: Journal) -> None:
    """The tools' own table, empty, in the journal's database (``opts.connection`` writes to it)."""
    engine = sa.create_engine(journal.url)
    with engine.begin() as conn:
        conn.execute(
            sa.text("CREATE TABLE IF NOT EXISTS tx_payments (key varchar(200) primary key, amount int)")
        )
        conn.execute(sa.text("DELETE FROM tx_payments"))
    engine.dispose()


def payments(journal: Journal) -> list[tuple[str, int]]:
    engine = sa.create_engine(journal.url)
    try:
        with engine.connect() as conn:
            return [
                (r[0], r[1])
                for r in conn.execute(sa.text("SELECT key, amount FROM tx_payments ORDER BY key"))
            ]
    finally:
        engine.dispose()


def _insert(connection: Any, key: str, amount: int) -> None:
    mark = "?" if type(connection).__module__.startswith("sqlite3") else "%s"
    cursor = connection.cursor()
    cursor.execute(f"INSERT INTO tx_payments (key, amount) VALUES ({mark}, {mark})", (key, amount))  # noqa: S608


def charge_tool(fail_after_write: list[bool]) -> Tool:
    def execute(input: dict[str, Any], opts: Any) -> dict[str, Any]:
        _insert(opts.connection, opts.idempotency_key, input["amount"])  # the effect, not yet committed
        if fail_after_write and fail_after_write.pop(0):
            raise RuntimeError("card declined after the payment row was written")
        return {"payment": opts.idempotency_key}

    return Tool(execute, lambda i, o, opts: None, in_transaction=True)


@pytest.mark.usefixtures("tx_payments")
def test_the_effect_and_its_record_commit_together(journal: Journal) -> None:
    with saga("order-1", journal=journal, tools={"charge": charge_tool([])}) as run:
        out = run.call("charge", {"amount": 10})
    assert payments(journal) == [("order-1:call-1", 10)] and out == {"payment": "order-1:call-1"}
    record = journal.get_record("order-1", "call-1")
    assert record is not None and record.status is RecordStatus.SUCCEEDED and record.output == out


@pytest.mark.usefixtures("tx_payments")
def test_a_failing_effect_rolls_back_with_its_record_and_is_journaled_failed_with_no_effect(
    journal: Journal,
) -> None:
    failing = [True]
    tools = {"charge": charge_tool(failing)}
    with pytest.raises(ToolFailedError), saga("order-2", journal=journal, tools=tools) as run:
        run.call("charge", {"amount": 20})
    assert payments(journal) == []  # the row the hook wrote rolled back with the transaction
    record = journal.get_record("order-2", "call-1")
    assert record is not None and record.status is RecordStatus.FAILED and record.had_no_effect
    plan = compensate_run("order-2", journal=journal, tools=tools, dry_run=True)
    assert [e.status.value for e in plan.entries] == ["skipped-not-executed"]  # no refund of nothing
    # The same tool in a new run: executed, in a transaction again.
    with saga("order-2b", journal=journal, tools=tools) as run:
        run.call("charge", {"amount": 21})
    assert payments(journal) == [("order-2b:call-1", 21)]


@pytest.mark.usefixtures("tx_payments")
def test_a_condemned_run_writes_neither_effect_nor_record(journal: Journal) -> None:
    journal.condemn("order-3")
    with (
        pytest.raises(CompensatedRunError),
        saga("order-3", journal=journal, tools={"charge": charge_tool([])}) as run,
    ):
        run.call("charge", {"amount": 30})
    assert payments(journal) == [] and journal.get_record("order-3", "call-1") is None


def test_in_transaction_is_refused_for_a_cross_run_or_read_only_tool() -> None:
    from saga_worker import InvalidInputError

    with pytest.raises(InvalidInputError, match="in_transaction"):
        Tool(lambda i, o: None, in_transaction=True, side_effect=False)
    with pytest.raises(InvalidInputError, match="in_transaction"):
        Tool(lambda i, o: None, in_transaction=True, idempotency="cross-run", window_s=5)
