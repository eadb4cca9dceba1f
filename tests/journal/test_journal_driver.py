"""The SQL journal's driver path (saga_worker.journal.driver): statements SQLAlchemy compiled once, run
straight on the database driver. What a user sees must not change: errors come out as SQLAlchemy's
exception classes, and connections killed under a live journal (a database restart) cost no call."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite

from saga_worker import (
    JournalUnavailableError,
    Tool,
    ToolCall,
    compensate_run,
    open_journal,
    run_durable,
    scripted,
)
from saga_worker.journal import driver
from saga_worker.journal.dialects import policy_for
from saga_worker.journal.driver import Prepared
from saga_worker.journal.schema import runs
from saga_worker.journal.sql import SqlJournal
from tests.services import PG_ADMIN_URL


def test_a_prepared_statement_binds_its_own_literals_and_names_a_missing_parameter() -> None:
    stmt = Prepared(
        sa.select(runs.c.run_id).where(runs.c.run_id == sa.bindparam("rid"), runs.c.status == "running"),
        sqlite.dialect(),
    )
    assert stmt.bind({"rid": "r1"}) == ("r1", "running")
    with pytest.raises(TypeError, match="'rid'"):
        stmt.bind({})


def test_an_in_list_cannot_be_prepared_once() -> None:
    with pytest.raises(ValueError, match="IN-list"):
        Prepared(sa.select(runs).where(runs.c.run_id.in_(["a", "b"])), sqlite.dialect())


def test_a_driver_error_is_raised_as_sqlalchemys_and_names_the_cause(sqlite_url: str) -> None:
    journal = open_journal(sqlite_url, migrate=True)
    assert isinstance(journal, SqlJournal)
    with journal.engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE saga_compensations"))
    with pytest.raises(sa.exc.OperationalError, match="saga_compensations"):
        journal.get_claim("r", "call-1")
    journal.start_run("r", "p")  # the failed transaction left nothing open behind it
    assert journal.get_run("r") is not None
    journal.close()


def test_a_sqlite_thread_between_transactions_holds_no_snapshot_a_checkpoint_would_wait_for(
    sqlite_url: str,
) -> None:
    # Each thread keeps its connection and its cursor between transactions: the last statement of each
    # (a read, a write returning rows, a failed one) must leave no read open behind it.
    with _journal_and_another_connection(sqlite_url, timeout=5) as (journal, other):
        journal.start_run("r", "p")
        assert journal.get_run("r") is not None
        assert [r.run_id for r in journal.list_runs()] == ["r"]
        assert journal.condemn("r") > 0
        assert journal.claim_compensation(
            "r", "s", via_run_id="r", owner="o", ttl=30, idempotency_key="k"
        ).acquired
        other.execute("DROP TABLE saga_compensations")
        with pytest.raises(sa.exc.OperationalError):
            journal.get_claim("r", "s")
        busy, _, _ = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0


def test_a_sqlite_write_in_autocommit_whose_returned_rows_go_unread_is_committed_when_it_returns(
    sqlite_url: str,
) -> None:
    # Work that is not atomic runs each statement as its own transaction; a write's RETURNING rows left
    # unread (``Tx.execute``) would keep its statement, its transaction and the write lock open until
    # the thread's cursor ran its next statement.
    with _journal_and_another_connection(sqlite_url, timeout=0) as (journal, other):
        journal.start_run("r", "p")
        journal._write(lambda tx: tx.execute(journal._q.run_end, {**_ended("r"), "now": 1.0}))
        assert other.execute("SELECT status FROM saga_runs WHERE run_id = 'r'").fetchone() == ("completed",)
        other.execute("BEGIN IMMEDIATE")  # the write lock is free: no wait (timeout 0)
        other.rollback()


@contextlib.contextmanager
def _journal_and_another_connection(
    sqlite_url: str, *, timeout: float
) -> Iterator[tuple[SqlJournal, sqlite3.Connection]]:
    """A SQLite journal, and a plain connection of another reader or writer to the same file."""
    journal = open_journal(sqlite_url, migrate=True)
    assert isinstance(journal, SqlJournal)
    other = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), timeout=timeout)
    try:
        yield journal, other
    finally:
        other.close()
        journal.close()


def _ended(run_id: str) -> dict[str, object]:
    return {"run": run_id, "new_status": "completed", "new_text": "done", "new_error": None}


def test_postgres_connections_killed_under_a_live_journal_cost_no_call(pg_url: str, run_id: str) -> None:
    journal = open_journal(pg_url)
    assert isinstance(journal, SqlJournal)
    journal.start_run(run_id, "p")
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    database = journal.engine.url.database

    def kill_all() -> int:
        with admin.connect() as conn:
            return len(
                conn.execute(
                    sa.text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = :db AND pid <> pg_backend_pid()"
                    ),
                    {"db": database},
                ).all()
            )

    try:
        assert kill_all() >= 1  # the journal's pooled connection, as a database restart would
        assert journal.condemn(run_id) > 0  # a write: retried once on a fresh connection
        assert kill_all() >= 1
        run = journal.get_run(run_id)
        assert run is not None and run.condemned
        assert journal.list_runs(condemned_only=True)[0].run_id == run_id
        # The unwind's first move, the tombstone and the worklist reads in one pipeline (issue 26): a
        # dead connection found at its end costs no call either, and the retry finds the run condemned.
        other = f"{run_id}-b"
        journal.start_run(other, "p")
        assert kill_all() >= 1
        view = journal.condemn_and_read(other, [])
        assert view.run is not None and view.run.condemned
        assert kill_all() >= 1
        again = journal.condemn_and_read(other, [])  # a re-drive: the stamp writes nothing, condemn's dance
        assert again.run is not None and again.run.condemned_at == view.run.condemned_at
    finally:
        admin.dispose()
        journal.close()


def _sessions(url: str, app: str) -> list[tuple[int, str]]:
    """(pid, state) of the server sessions named ``app``."""
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT pid, state FROM pg_stat_activity WHERE application_name = :app"), {"app": app}
            ).all()
        return [(int(pid), str(state)) for pid, state in rows]
    finally:
        admin.dispose()


def _named(pg_url: str, app: str) -> str:
    return f"{pg_url}{'&' if '?' in pg_url else '?'}application_name={app}"


@contextlib.contextmanager
def _started_under_name(pg_url: str, app: str, run_id: str) -> Iterator[SqlJournal]:
    """A PostgreSQL journal whose sessions carry ``app`` as their name (so ``_sessions`` finds them),
    with ``run_id`` started on it; closed afterwards."""
    journal = open_journal(_named(pg_url, app))
    assert isinstance(journal, SqlJournal)
    try:
        journal.start_run(run_id, "p")
        yield journal
    finally:
        journal.close()


def test_a_postgres_connection_given_back_with_a_transaction_open_is_rolled_back_not_kept(
    pg_url: str, run_id: str
) -> None:
    # Between transactions a connection waits in the journal's idle list for any thread; one that
    # comes back with a transaction open must go back through the pool (which rolls it back) instead.
    app = f"clean-{run_id}"[:60]
    with _started_under_name(pg_url, app, run_id) as journal:
        raw, driver, cursor = journal._connections.take()
        driver.autocommit = False  # as a transaction's begin leaves it (the idle list keeps either mode)
        with driver.cursor() as cur:
            cur.execute("SELECT txid_current()")  # opens a transaction
        journal._connections.give_back(raw, driver, cursor)
        assert all(state == "idle" for _, state in _sessions(pg_url, app))
        assert journal.get_run(run_id) is not None
        assert all(state == "idle" for _, state in _sessions(pg_url, app))


def test_a_postgres_connection_the_journal_left_in_autocommit_goes_back_to_the_pool_out_of_it(
    pg_url: str, run_id: str
) -> None:
    # The idle list keeps a connection in autocommit after autocommit work (the next such work then
    # switches nothing); the engine's pool, whose other users expect transactions, never gets one so.
    journal = open_journal(pg_url)
    assert isinstance(journal, SqlJournal)
    try:
        journal.start_run(run_id, "p")
        assert journal.get_run(run_id) is not None
        drivers = [driver for _raw, driver, _cursor in journal._connections._idle]
        assert drivers and any(driver.autocommit for driver in drivers)
        journal._connections.close()
        assert not any(driver.autocommit for driver in drivers if not driver.closed)
        with journal.engine.connect() as conn:
            conn.exec_driver_sql("CREATE TEMPORARY TABLE t (n int)")
            conn.rollback()  # in a transaction, as the pool's users expect: the table is gone with it
            assert conn.exec_driver_sql("SELECT to_regclass('pg_temp.t')").scalar() is None
        assert journal.get_run(run_id) is not None  # the journal goes on, on a fresh connection
    finally:
        journal.close()


def test_postgres_connections_idle_between_transactions_keep_to_the_pools_bound(
    pg_url: str, run_id: str
) -> None:
    # 40 threads at once: never more server sessions than the pool allows (5 + 10 overflow), every call
    # answered; afterwards at most the pool's idle connections and the journal's own idle list (5 each).
    app = f"bound-{run_id}"[:60]
    journal = open_journal(_named(pg_url, app))
    journal.start_run(run_id, "p")
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(len(_sessions(pg_url, app)))

    def calls() -> int:
        return sum(journal.get_run(run_id) is not None for _ in range(25))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(40) as pool:
            answered = sum(pool.map(lambda _: calls(), range(40)))
    finally:
        done.set()
        watcher.join()
    try:
        assert answered == 40 * 25
        assert max(seen) <= 15
        # The server lists a closed session for a moment after its client has gone.
        assert _settles(lambda: len(_sessions(pg_url, app)) <= 10)
    finally:
        journal.close()
    assert _settles(lambda: _sessions(pg_url, app) == [])


def _settles(check: Callable[[], bool], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_forked_child_never_uses_the_parents_idle_postgres_connection(pg_url: str, run_id: str) -> None:
    journal = open_journal(pg_url)
    assert isinstance(journal, SqlJournal)
    try:
        journal.start_run(run_id, "p")
        assert journal.get_run(run_id) is not None  # its connection now waits in the idle list
        parents = {driver.info.backend_pid for _, driver, _ in journal._connections._idle}
        assert parents
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the child, which reports through the pipe
            try:
                os.close(read)
                _, driver, _ = journal._connections.take()
                os.write(write, f"{driver.info.backend_pid}".encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            used = int(pipe.read())
        os.waitpid(child, 0)
        assert used not in parents
        assert journal.get_run(run_id) is not None  # the parent's own connection still answers
    finally:
        journal.close()


def test_at_the_pools_limit_a_connection_given_back_goes_to_a_waiting_thread_not_the_idle_list(
    pg_url: str,
) -> None:
    # Every connection the pool allows is out (5 + 10 overflow): one given back must reach a thread
    # waiting at the pool's limit, not wait in the journal's idle list while that thread times out.
    journal = open_journal(pg_url)
    assert isinstance(journal, SqlJournal)
    conns = journal._connections
    held = [conns.take() for _ in range(15)]
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(journal.engine.raw_connection()))
    try:
        waiter.start()
        time.sleep(0.2)  # it waits at the pool's limit
        raw, driver, cursor = held.pop()
        conns.give_back(raw, driver, cursor or conns.cursor_for(raw, driver))
        waiter.join(timeout=5)
        assert got, "the thread waiting at the pool's limit got no connection"
    finally:
        for raw, _driver, _cursor in held:
            raw.close()
        waiter.join()
        for raw in got:
            raw.close()  # type: ignore[attr-defined]
        journal.close()


def test_a_failed_durable_postgres_pipeline_commits_nothing_and_leaves_its_connection_idle(
    pg_url: str, run_id: str
) -> None:
    # A durable transaction sent as one pipeline (BEGIN, its statements, COMMIT): when a statement fails,
    # the server skips the rest, the COMMIT too, and the transaction stays open on the connection; it
    # must be rolled back before the connection serves anything else.
    app = f"framed-{run_id}"[:60]
    with _started_under_name(pg_url, app, run_id) as journal:
        q, frame = journal._q, journal.policy.durable_frame
        assert frame is not None
        failing = Prepared(sa.select(sa.literal_column("1") / sa.literal_column("0")), journal.engine.dialect)
        stamp = (
            q.unwind_insert,
            journal._unwind_params("u-1", run_id, False, ["s1"], "", "", "worker", None),
        )

        def work(tx: driver.Tx) -> object:
            return tx.batch([stamp, (failing, {})], framed=frame)

        with pytest.raises(sa.exc.DataError, match="division by zero"):
            driver.transaction(journal._connections, work, write=True, atomic=False)
        assert [state for _, state in _sessions(pg_url, app)] == ["idle"]
        # The same connection, as any transaction expects it: an atomic one still commits all or nothing.
        second = (
            q.unwind_insert,
            journal._unwind_params("u-2", run_id, False, ["s1"], "", "", "worker", None),
        )
        with pytest.raises(sa.exc.DataError, match="division by zero"):
            driver.transaction(
                journal._connections,
                lambda tx: [tx.one(*second), tx.one(failing, {})],
                write=True,
                atomic=True,
            )
        assert journal.get_unwind("u-2") is None
        assert journal.get_unwind("u-1") is None  # the insert before the first failure was not committed
        journal.record_unwind("u-1", run_id, dry_run=False, suffixes=["s1"])  # the connection serves on
        assert journal.get_unwind("u-1") is not None


def test_a_postgres_pipeline_reads_each_statements_own_rows_on_the_cursors_kept_with_its_connection(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    journal = open_journal(pg_url)
    assert isinstance(journal, SqlJournal)
    dialect = journal.engine.dialect

    def number(n: int, *, none: bool = False) -> Prepared:
        stmt: sa.Select[tuple[object]] = sa.select(sa.literal_column(str(n)).label("n"))
        return Prepared(stmt.where(sa.false()) if none else stmt, dialect)

    def batch(*stmts: Prepared) -> object:
        items: list[tuple[Prepared, dict[str, object]]] = [(stmt, {}) for stmt in stmts]
        return driver.transaction(journal._connections, lambda tx: tx.batch(items), write=False, atomic=False)

    made: list[object] = []
    cursor = psycopg.Connection.cursor

    def counted(*args: object, **kwargs: object) -> object:
        made.append(args)
        return cursor(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(psycopg.Connection, "cursor", counted)
    try:
        assert batch(number(1), number(2), number(3)) == [[{"n": 1}], [{"n": 2}], [{"n": 3}]]
        made.clear()
        # The same connection (the idle list's last), its cursors used again: none made, and a
        # statement without rows reads none, not what its cursor held from the pipeline before.
        assert batch(number(4), number(5, none=True)) == [[{"n": 4}], []]
        assert batch(number(6), number(7), number(8)) == [[{"n": 6}], [{"n": 7}], [{"n": 8}]]
        assert made == []
    finally:
        journal.close()


# -- the journal's storage refusing work: said as JournalUnavailableError (journal/refusals.py) -------

ORDER = [ToolCall("charge", {"amount": 10}), ToolCall("reserve", {"sku": "A1"})]


def test_a_postgres_pipeline_adds_kept_cursors_for_a_longer_batch_and_keeps_them_usable_after_a_failed_one(
    pg_url: str,
) -> None:
    # A pipelined batch reads each statement's rows from a cursor of its own once the pipeline is
    # through; the cursors stay with the pooled connection for its next batch, which must still read
    # each statement's own rows (a longer batch adds cursors, a failed one leaves them usable).
    journal = open_journal(pg_url)
    assert isinstance(journal, SqlJournal)
    dialect = journal.engine.dialect

    def value(v: int) -> tuple[Prepared, dict[str, object]]:
        return Prepared(sa.select(sa.literal(v).label("v")), dialect), {}

    none: dict[str, object] = {}
    nothing = (Prepared(sa.select(sa.literal(1)).where(sa.false()), dialect), none)
    failing = (Prepared(sa.select(sa.literal_column("1") / sa.literal_column("0")), dialect), none)

    def batch(items: list[tuple[Prepared, dict[str, object]]]) -> list[list[dict[str, object]]]:
        return driver.transaction(journal._connections, lambda tx: tx.batch(items), write=False, atomic=False)

    def kept() -> list[object]:
        (raw, _driver, _cursor), *_ = journal._connections._idle  # one transaction at a time: one connection
        return list(raw.info.get(driver._PIPELINE_CURSORS, []))

    try:
        assert batch([value(1), nothing, value(3)]) == [[{"v": 1}], [], [{"v": 3}]]
        first = kept()
        assert len(first) == 3
        assert batch([value(4), value(5)]) == [[{"v": 4}], [{"v": 5}]]
        assert kept() == first, "the second batch made cursors of its own"
        assert batch([nothing, value(7), value(8), value(9)]) == [[], [{"v": 7}], [{"v": 8}], [{"v": 9}]]
        assert kept()[:3] == first and len(kept()) == 4
        with pytest.raises(sa.exc.DataError, match="division by zero"):
            batch([value(10), failing])
        assert batch([value(11), value(12)]) == [[{"v": 11}], [{"v": 12}]]
    finally:
        journal.close()


# -- the journal's storage refusing work: said as JournalUnavailableError (journal/refusals.py) -------

ORDER = [ToolCall("charge", {"amount": 10}), ToolCall("reserve", {"sku": "A1"})]


def _undoable_tools(undone: list[str]) -> dict[str, Tool]:
    def make(name: str) -> Tool:
        return Tool(lambda input, opts: {"id": name}, lambda input, output, opts: undone.append(name))

    return {"charge": make("charge"), "reserve": make("reserve")}


def _sqlite_journal_capped_at(url: str, pages: int) -> SqlJournal:
    """A journal whose every connection lets the file grow to ``pages`` pages and no further: SQLite's
    own "database or disk is full", as a full disk gives it."""
    engine = policy_for("sqlite").create_engine(sa.engine.make_url(url), url)

    @sa.event.listens_for(engine, "connect")
    def cap(dbapi_conn: sqlite3.Connection, _record: object) -> None:
        dbapi_conn.execute(f"PRAGMA max_page_count = {pages}")

    return SqlJournal(url, engine=engine)


def test_a_full_sqlite_disk_is_a_journal_error_saying_so_and_the_same_work_succeeds_once_there_is_room(
    sqlite_url: str,
) -> None:
    open_journal(sqlite_url, migrate=True).close()
    with contextlib.closing(sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))) as db:
        (pages,) = db.execute("PRAGMA page_count").fetchone()
    full = _sqlite_journal_capped_at(sqlite_url, pages)
    try:
        with pytest.raises(JournalUnavailableError) as refused:
            for n in range(100_000):  # the disk fills up
                full.start_run(f"filler-{n}", "x" * 500)
        message = str(refused.value)
        assert message.startswith(f"journal {sqlite_url} cannot be written: the disk holding it is full")
        assert "database or disk is full" in message and "free space" in message and "[SQL:" not in message
        assert full.get_run(f"filler-{n}") is None  # the refused write left nothing behind
    finally:
        full.close()
    with open_journal(sqlite_url) as journal:  # room again: the same work goes through
        journal.start_run(f"filler-{n}", "x" * 500)
        assert journal.get_run(f"filler-{n}") is not None


def test_a_read_only_postgresql_journal_is_a_journal_error_naming_the_primary_and_condemns_nothing(
    read_only_pg_url: tuple[str, Callable[[bool], None]],
) -> None:
    url, read_only = read_only_pg_url
    undone: list[str] = []
    tools = _undoable_tools(undone)
    with open_journal(url) as journal:
        run_durable("order-7", journal=journal, tools=tools, planner=scripted(*ORDER))
    read_only(True)
    with open_journal(url) as journal:
        with pytest.raises(JournalUnavailableError) as refused:
            compensate_run("order-7", journal=journal, tools=tools)
        message = str(refused.value)
        assert "the database is read-only" in message and "point SAGA_JOURNAL_URL at the primary" in message
        assert "ReadOnlySqlTransaction" not in message and "[SQL:" not in message
        run = journal.get_run("order-7")  # reads still work
        assert run is not None and not run.condemned and undone == []
    read_only(False)
    with open_journal(url) as journal:  # the primary again: the same unwind goes through
        report = compensate_run("order-7", journal=journal, tools=tools)
        assert [e.status.value for e in report.entries] == ["compensated", "compensated"]
