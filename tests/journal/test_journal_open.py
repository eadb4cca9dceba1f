"""open_journal: URLs that cannot be opened are named in a JournalError; schemas come from migrations."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from saga_worker import (
    JournalError,
    MemoryJournal,
    SqlJournal,
    Tool,
    ToolCall,
    compensate_run,
    open_journal,
    run_durable,
    scripted,
)
from saga_worker.core.redact import redact_url
from saga_worker.journal import migrate, prepare_journal
from saga_worker.journal.dialects import policy_for
from saga_worker.journal.schema import metadata
from tests.procs.run_child import finish, spawn
from tests.services import PG_ADMIN_URL, require

TABLES = {"saga_runs", "saga_decisions", "saga_tool_records", "saga_compensations"}


@pytest.fixture
def empty_pg_url() -> Iterator[str]:
    """A PostgreSQL database of its own with no schema at all, dropped afterwards."""
    require("postgres")
    name = f"saga_empty_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    yield sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def schema_drift(engine: sa.Engine) -> list[object]:
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"version_table": migrate.VERSION_TABLE, "include_object": migrate.include_object}
        )
        return list(compare_metadata(context, metadata))


# -- bad URLs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, named",
    [
        ("mysql://user@127.0.0.1/saga", "mysql://user@127.0.0.1/saga"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("not a url at all", "not a url at all"),
        ("sqlite://", "sqlite://"),
        ("sqlite:///:memory:", "sqlite:///:memory:"),
        (
            "postgresql+psycopg2://postgres@127.0.0.1:5432/test",
            "postgresql+psycopg2://postgres@127.0.0.1:5432/test",
        ),
    ],
)
@pytest.mark.parametrize("opening", [open_journal, prepare_journal])
def test_a_url_that_cannot_be_a_journal_gives_a_journal_error_naming_it(
    url: str, named: str, opening: Callable[[str], object]
) -> None:
    with pytest.raises(JournalError) as info:
        opening(url)
    assert named in str(info.value) and info.value.detail["url"] == named


@pytest.mark.parametrize("url", ["", "   ", None, 5])
@pytest.mark.parametrize("opening", [open_journal, prepare_journal])
def test_an_empty_or_non_string_url_gives_a_journal_error(
    url: object, opening: Callable[[str], object]
) -> None:
    with pytest.raises(JournalError, match="journal URL"):
        opening(url)  # type: ignore[arg-type]  # the wrong type is the point


# -- preparing ahead (a worker's main process, before its pool forks) ----------------------------


def test_preparing_a_journal_connects_to_nothing() -> None:
    url = "postgresql+psycopg://postgres:s3cret@127.0.0.1:1/test"  # nothing listens on loopback port 1
    prepare_journal(url)  # the driver imported and the statements compiled: no connection tried
    with pytest.raises(JournalError, match="127.0.0.1:1"):
        open_journal(url)


def test_preparing_an_in_process_journal_does_nothing() -> None:
    prepare_journal("memory://")
    assert isinstance(open_journal("memory://"), MemoryJournal)


def test_journals_of_one_kind_share_their_compiled_statements_and_one_on_a_callers_engine_has_its_own(
    tmp_path: Path,
) -> None:
    urls = [f"sqlite:///{tmp_path / name}" for name in ("a.db", "b.db")]
    prepare_journal(urls[0])
    first, second = (SqlJournal(url) for url in urls)
    engine = sa.create_engine(urls[0])
    own = SqlJournal(urls[0], engine=engine)  # a caller's engine may carry dialect options of its own
    try:
        assert first._q is second._q and own._q is not first._q
        assert own._q.run_get.sql == first._q.run_get.sql
    finally:
        for journal in (first, second, own):
            journal.close()


def test_an_unreachable_postgres_gives_a_journal_error_naming_the_url_without_its_password() -> None:
    url = "postgresql+psycopg://postgres:s3cret@127.0.0.1:1/test"  # nothing listens on loopback port 1
    with pytest.raises(JournalError) as info:
        open_journal(url, migrate=True)
    assert "postgresql+psycopg://postgres:***@127.0.0.1:1/test" in str(info.value)
    assert "s3cret" not in str(info.value)


def _engine_whose_connections_are_killed(url: str, killed: int) -> sa.Engine:
    """A journal's engine on which the server terminates the first ``killed`` connections, each as
    soon as it is made (``pg_terminate_backend``, as an administrator or a failover would)."""
    engine = policy_for("postgresql").create_engine(sa.engine.make_url(url), url)
    left = [killed]

    @sa.event.listens_for(engine, "connect")
    def terminate(dbapi_conn: Any, _record: object) -> None:
        if left[0] > 0:
            left[0] -= 1
            with contextlib.suppress(Exception), dbapi_conn.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    return engine


def test_a_journal_whose_connection_is_killed_while_it_opens_retries_and_else_says_what_happened(
    pg_database_url: str,
) -> None:
    """Issue 43: the sweeper (and every worker) opens its journal on its first task; a connection the
    server closed then is tried again, and an error after the retries says the server closed it."""
    once = SqlJournal(pg_database_url, engine=_engine_whose_connections_are_killed(pg_database_url, 1))
    try:
        assert once.get_run("never-journaled") is None  # opened, and reads
    finally:
        once.close()
    with pytest.raises(JournalError) as refused:
        SqlJournal(pg_database_url, engine=_engine_whose_connections_are_killed(pg_database_url, 100))
    message = str(refused.value)
    assert message.startswith(
        f"cannot open journal {redact_url(pg_database_url)}: the database server closed"
    )
    assert "terminated by an administrator, or the server restarted or shut down" in message
    assert "tried 3 times" in message


def test_a_sqlite_file_in_a_folder_that_cannot_be_made_gives_a_journal_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(JournalError, match="cannot"):
        open_journal(f"sqlite:///{blocker}/sub/journal.db")


def test_each_url_picks_its_backend(sqlite_url: str) -> None:
    assert isinstance(open_journal("memory://"), MemoryJournal)
    with open_journal(sqlite_url) as journal:
        assert isinstance(journal, SqlJournal) and journal.url == sqlite_url


def test_plain_postgresql_urls_mean_psycopg_3(empty_pg_url: str) -> None:
    plain = empty_pg_url.replace("postgresql+psycopg://", "postgresql://")
    with open_journal(plain, migrate=True) as journal:
        assert isinstance(journal, SqlJournal) and journal.engine.dialect.driver == "psycopg"


# -- migrations -----------------------------------------------------------------------------------


def test_a_fresh_sqlite_file_is_migrated_on_open(sqlite_url: str) -> None:
    with open_journal(sqlite_url) as journal:
        assert isinstance(journal, SqlJournal)
        assert migrate.current_revision(journal.engine) == migrate.head_revision()
        assert schema_drift(journal.engine) == []
    assert tables(sqlite_url) >= TABLES


def test_a_sqlite_journal_opened_with_migrate_false_refuses_an_unmigrated_file(sqlite_url: str) -> None:
    with pytest.raises(JournalError, match="saga-worker db upgrade"):
        open_journal(sqlite_url, migrate=False)


def test_an_unmigrated_postgres_refuses_to_open_and_names_the_upgrade_command(empty_pg_url: str) -> None:
    with pytest.raises(JournalError, match="saga-worker db upgrade") as info:
        open_journal(empty_pg_url)
    assert "revision none" in str(info.value)
    assert not TABLES & tables(empty_pg_url)  # refusing wrote no schema
    with open_journal(empty_pg_url, migrate=True) as journal:
        assert isinstance(journal, SqlJournal) and schema_drift(journal.engine) == []
    open_journal(empty_pg_url).close()  # migrated once, it opens without being asked to migrate


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_downgrade_to_base_then_upgrade_round_trips_the_schema(
    backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "empty_pg_url")
    with open_journal(url, migrate=True) as journal:
        assert isinstance(journal, SqlJournal)
        run_durable(
            "before-downgrade",
            journal=journal,
            tools={"t": Tool(lambda i, o: 1)},
            planner=scripted(ToolCall("t", {})),
        )
        migrate.downgrade(journal.engine, "base")
        assert migrate.current_revision(journal.engine) is None
        assert not TABLES & set(sa.inspect(journal.engine).get_table_names())
        migrate.upgrade(journal.engine)
        assert migrate.current_revision(journal.engine) == migrate.head_revision()
        assert schema_drift(journal.engine) == []
        assert journal.get_run("before-downgrade") is None  # the tables are new and empty
        result = run_durable(
            "after-upgrade",
            journal=journal,
            tools={"t": Tool(lambda i, o: 2)},
            planner=scripted(ToolCall("t", {})),
        )
        assert result.status == "finished"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_processes_migrating_a_fresh_journal_at_once_all_open_it(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "empty_pg_url")
    start = tmp_path / "go"
    children = [spawn(url, "s", "r", mode="show", migrate=True, start_file=start) for _ in range(4)]
    start.touch()
    assert [finish(child)["run"] for child in children] == [None] * 4
    engine = sa.create_engine(url)
    try:
        assert migrate.current_revision(engine) == migrate.head_revision() and schema_drift(engine) == []
    finally:
        engine.dispose()


def test_opening_a_migrated_journal_logs_no_alembic_lines(tmp_path: Path) -> None:
    """A Celery pool child opens the journal on its first task: alembic's plugin set-up and context
    lines used to flood that task's log (issue 22)."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'j.db'}"
    open_journal(url).close()
    code = (
        "import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stdout); "
        "from saga_worker import open_journal; open_journal(sys.argv[1]).close(); print('opened')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, url], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "opened", out.stdout


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_journal_a_later_release_expanded_still_opens_and_runs_here(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """A rolling upgrade migrates the journal (expand) while this release's workers still run: a worker
    of this release started or restarted then must open it, not refuse a revision it does not know
    nor try to migrate it back (docs/guides/upgrading.md)."""
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "empty_pg_url")
    open_journal(url, migrate=True).close()
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # what a later release's additive migration leaves
        conn.execute(sa.text("ALTER TABLE saga_compensations ADD COLUMN later_release_note VARCHAR(20)"))
        conn.execute(sa.text(f"UPDATE {migrate.VERSION_TABLE} SET version_num = 'later-0099'"))
    engine.dispose()
    tools = {"t": Tool(lambda i, o: 2, lambda i, out, o: None)}
    for migrate_on_open in (None, False, True):
        with open_journal(url, migrate=migrate_on_open) as journal:
            result = run_durable(
                f"after-expand-{migrate_on_open}",
                journal=journal,
                tools=tools,
                planner=scripted(ToolCall("t", {})),
            )
            assert result.status == "finished"
            report = compensate_run(f"after-expand-{migrate_on_open}", journal=journal, tools=tools)
            assert [e.status.value for e in report.entries] == ["compensated"]
            assert isinstance(journal, SqlJournal)
            # Left as the later release set it: nothing migrated back or forth.
            assert migrate.current_revision(journal.engine) == "later-0099"


def _claims_table(engine: sa.Engine) -> tuple[str, list[tuple[object, ...]]]:
    with engine.connect() as conn:
        ddl = conn.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'saga_compensations'"
        ).scalar_one()
        rows = conn.exec_driver_sql("SELECT * FROM saga_compensations ORDER BY origin_run_id, suffix").all()
    return ddl, [tuple(r) for r in rows]


def test_migration_0014_clusters_sqlite_claims_on_their_key_keeping_every_row_both_ways(
    sqlite_url: str,
) -> None:
    """0014 rebuilds saga_compensations WITHOUT ROWID on SQLite (one page per claim written, not two):
    every claim and column kept, up and down, and a journal held open across it goes on claiming."""
    from saga_worker.journal.schema import sweepable_clause

    tools = {"t": Tool(lambda i, o: 1, compensate=lambda i, o, c: None)}
    with open_journal(sqlite_url, migrate=True) as journal:
        assert isinstance(journal, SqlJournal)
        migrate.downgrade(journal.engine, "0013")
        ddl, _ = _claims_table(journal.engine)
        assert "WITHOUT ROWID" not in ddl
        for run in ("before-a", "before-b"):
            run_durable(
                run, journal=journal, tools=tools, planner=scripted(ToolCall("t", {}), ToolCall("t", {}))
            )
            assert compensate_run(run, journal=journal, tools=tools).complete
        _, before = _claims_table(journal.engine)
        assert len(before) == 4

        migrate.upgrade(journal.engine)
        ddl, after = _claims_table(journal.engine)
        assert ddl.rstrip().endswith("WITHOUT ROWID") and after == before
        assert schema_drift(journal.engine) == []
        with journal.engine.connect() as conn:
            index = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE name = 'ix_saga_runs_sweep_due'"
            ).scalar_one()
            plan = conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN " + journal._q.runs_due.sql, (0.0, 1.0, 100, 0)
            ).all()
        assert index.endswith(f"WHERE {sweepable_clause()}")  # the sweeper's query's own words
        assert "USING INDEX ix_saga_runs_sweep_due" in plan[0][3]

        run_durable("after", journal=journal, tools=tools, planner=scripted(ToolCall("t", {})))
        assert compensate_run("after", journal=journal, tools=tools).complete  # on the same open journal
        assert journal.get_claim("after", "call-1") is not None

        migrate.downgrade(journal.engine, "0013")
        ddl, back = _claims_table(journal.engine)
        assert "WITHOUT ROWID" not in ddl and len(back) == 5 and set(before) <= set(back)


def test_migration_0015_lets_sqlite_update_a_run_without_building_a_temporary_table_both_ways(
    sqlite_url: str,
) -> None:
    """0015 writes the sweeper's partial index condition as ``!=`` terms: SQLite checks it on every
    update of a run's row (the tombstone, an unwind's end), and checked 0014's ``NOT IN`` list by
    building a temporary table each time. The sweeper's read still uses the index."""
    from saga_worker.journal.schema import sweepable_clause

    update = "EXPLAIN UPDATE saga_runs SET unwind_state = ?, updated_at = ? WHERE run_id = ?"

    def temporary_tables(engine: sa.Engine) -> int:
        with engine.connect() as conn:
            return sum(
                1
                for op in conn.exec_driver_sql(update, ("pending", 1.0, "r")).all()
                if op[1] == "OpenEphemeral"
            )

    with open_journal(sqlite_url, migrate=True) as journal:
        assert isinstance(journal, SqlJournal)
        assert temporary_tables(journal.engine) == 0
        with journal.engine.connect() as conn:
            plan = conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN " + journal._q.runs_due.sql, (0.0, 1.0, 100, 0)
            ).all()
            index = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE name = 'ix_saga_runs_sweep_due'"
            ).scalar_one()
        assert "USING INDEX ix_saga_runs_sweep_due" in plan[0][3]
        assert index.endswith(f"WHERE {sweepable_clause()}")

        migrate.downgrade(journal.engine, "0014")
        assert temporary_tables(journal.engine) == 2  # the old row's check and the new row's
        migrate.upgrade(journal.engine)
        assert temporary_tables(journal.engine) == 0
        assert schema_drift(journal.engine) == []
