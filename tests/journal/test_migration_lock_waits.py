"""A schema change on PostgreSQL while workers run (step 1 of docs/guides/upgrading.md): their open
transactions hold the tables it alters, or wait for a table it altered already. The change waits a
bounded time for each lock, is rolled back whole when it cannot have it (or PostgreSQL ends a deadlock
by rolling it back), and is tried again; the workers' transactions go on meanwhile."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from saga_worker.errors import JournalError
from saga_worker.journal import migrate
from tests.conftest import fresh_pg_database

pytestmark = pytest.mark.postgres

WAITING_ALTER = (
    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
    "AND query LIKE 'ALTER TABLE saga_runs%' AND datname = current_database()"
)


@pytest.fixture
def url() -> Iterator[str]:
    yield from fresh_pg_database("saga_locks_")


@pytest.fixture
def engine(url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(url)
    yield engine
    engine.dispose()


def at(engine: sa.Engine, revision: str) -> None:
    migrate.downgrade(engine, revision)
    assert migrate.current_revision(engine) == revision


class Upgrade(threading.Thread):
    """``migrate.upgrade`` in a thread, as ``saga-worker db upgrade`` runs beside the workers."""

    def __init__(self, engine: sa.Engine, *, lock_wait: float, patience: float) -> None:
        super().__init__(daemon=True)
        self.engine, self.lock_wait, self.patience = engine, lock_wait, patience
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            migrate.upgrade(self.engine, lock_wait=self.lock_wait, patience=self.patience)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc


def wait_for_the_alter_to_queue(monitor: sa.Connection) -> None:
    """Poll pg_stat_activity (a transaction sees it as it was when the transaction began: one each)."""
    deadline = time.monotonic() + 30
    while monitor.execute(sa.text(WAITING_ALTER)).scalar_one() == 0:
        monitor.rollback()
        assert time.monotonic() < deadline, "the upgrade never waited for saga_runs"
        time.sleep(0.01)


def test_a_deadlock_with_a_workers_transaction_rolls_the_upgrade_back_and_it_is_tried_again(
    engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """As a 0.1.0 worker met `db upgrade` in the fleet: the worker read a run, the upgrade altered the
    calls table (0010) and waits for the runs table (0012); the worker now reads calls. PostgreSQL ends
    the deadlock by rolling back the upgrade, whose wait began first; the worker's reads return, and
    once it commits the upgrade's next try reaches the head.

    PostgreSQL looks for a deadlock once per wait, ``deadlock_timeout`` after it began, and rolls back
    the side that looks. The upgrade's sessions look after 5 s here and the worker's never, so the
    worker has 5 s to start waiting however loaded the machine is."""
    with engine.begin() as conn:
        conn.execute(sa.text(f"ALTER DATABASE \"{engine.url.database}\" SET deadlock_timeout = '5s'"))
    engine.dispose()
    at(engine, "0009")
    caplog.set_level(logging.WARNING, logger="saga_worker.journal.migrate")
    with engine.connect() as worker, engine.connect() as monitor:
        worker.execute(sa.text("SET deadlock_timeout = '1h'"))
        worker.execute(sa.text("SELECT count(*) FROM saga_runs"))
        upgrade = Upgrade(engine, lock_wait=30.0, patience=120.0)
        upgrade.start()
        wait_for_the_alter_to_queue(monitor)
        assert worker.execute(sa.text("SELECT count(*) FROM saga_tool_records")).scalar_one() == 0
        worker.commit()
    upgrade.join(120)
    assert not upgrade.is_alive() and upgrade.error is None, upgrade.error
    assert migrate.current_revision(engine) == migrate.head_revision()
    retried = [r.getMessage() for r in caplog.records if "rolled back" in r.getMessage()]
    assert retried and "deadlock with a running transaction" in retried[0], retried


def test_while_the_upgrade_waits_for_a_long_transaction_other_workers_statements_still_run(
    engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """An ALTER waiting for its lock makes every later statement on the table wait behind it. The
    upgrade gives its wait up after ``lock_wait``, so a worker reading runs is served while a long
    transaction holds the table; the upgrade lands once that transaction ends."""
    at(engine, "0010")
    caplog.set_level(logging.WARNING, logger="saga_worker.journal.migrate")
    with engine.connect() as long, engine.connect() as monitor, engine.connect() as reader:
        long.execute(sa.text("SELECT count(*) FROM saga_runs"))
        upgrade = Upgrade(engine, lock_wait=0.3, patience=120.0)
        upgrade.start()
        wait_for_the_alter_to_queue(monitor)
        reader.execute(sa.text("SET statement_timeout = '30s'"))
        assert reader.execute(sa.text("SELECT count(*) FROM saga_runs")).scalar_one() == 0
        reader.commit()
        deadline = time.monotonic() + 30
        while not any("lock wait timed out" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the upgrade never gave a lock wait up"
            time.sleep(0.05)
        assert migrate.current_revision(engine) == "0010"
        long.commit()
    upgrade.join(120)
    assert not upgrade.is_alive() and upgrade.error is None, upgrade.error
    assert migrate.current_revision(engine) == migrate.head_revision()


def test_an_upgrade_held_up_past_its_patience_changes_nothing_and_says_what_to_look_for(
    engine: sa.Engine,
) -> None:
    at(engine, "0010")
    with engine.connect() as long:
        long.execute(sa.text("SELECT count(*) FROM saga_runs"))
        with pytest.raises(JournalError) as raised:
            migrate.upgrade(engine, lock_wait=0.2, patience=1.0)
        long.commit()
    message = str(raised.value)
    assert "schema upgrade to head gave up" in message and "pg_stat_activity" in message, message
    assert "lock wait timed out" in message, message
    assert migrate.current_revision(engine) == "0010"
