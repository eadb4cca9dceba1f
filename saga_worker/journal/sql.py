"""The SQL journal: SQLite for the embedded default, PostgreSQL for production.

Its statements are written once in SQLAlchemy Core (``statements.py``) and run straight on the
driver (``driver.py``): the per-call machinery of ``Connection.execute`` cost more than SQLite's
whole commit. Concurrency rests on two habits. Every insert is insert-if-absent judged by
``RETURNING`` (with psycopg 3, ``ON CONFLICT DO NOTHING`` reports a row count of -1, so a row count
cannot tell who won). Every state change is an ``UPDATE … WHERE <expected state>``, which PostgreSQL
re-checks after taking the row lock and SQLite runs inside ``BEGIN IMMEDIATE`` (one writer at a
time, with a busy timeout).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import sqlalchemy as sa
import tenacity

from ..core.redact import redact_url
from ..errors import (
    JournalError,
)
from . import driver, migrate
from .base import Journal
from .dialects import POLICIES, policy_for
from .group_commit import GroupCommit
from .sql_parts.audit import SqlAudit
from .sql_parts.claims import SqlClaims
from .sql_parts.records import SqlRecords
from .sql_parts.retention import SqlRetention
from .sql_parts.runs import SqlRuns
from .sql_parts.shared import SqlShared
from .sql_parts.sweeps import SqlSweeps
from .sql_parts.tombstone import SqlTombstone
from .sql_parts.unwinds import SqlUnwinds
from .statements import Statements, shared_statements

T = TypeVar("T")
_LOG = logging.getLogger(__name__)


class SqlJournal(
    SqlTombstone,
    SqlRuns,
    SqlRecords,
    SqlSweeps,
    SqlUnwinds,
    SqlAudit,
    SqlShared,
    SqlClaims,
    SqlRetention,
    Journal,
):
    """A journal in a SQL database. Every process that opens the same URL sees the same journal."""

    def __init__(
        self,
        url: str,
        *,
        migrate_schema: bool | None = None,
        engine: sa.Engine | None = None,
        create: bool = True,
    ) -> None:
        self.url = url
        if not create and engine is None:
            _refuse_missing_sqlite_file(url)
        self.engine = engine if engine is not None else _create_engine(url)
        self.dialect = self.engine.dialect.name
        self.policy = policy_for(self.dialect)
        self._connections = driver.Connections(self.engine, self.policy)
        # One writer at a time per journal in this process shares its commit with the others ready.
        self._group = GroupCommit() if self.policy.groups_commits else None
        # A caller's engine may carry dialect options of its own: its statements are compiled for it.
        self._q: Statements = (
            Statements(self.engine.dialect) if engine is not None else shared_statements(self.engine.dialect)
        )
        self.guard_bound_to_process = self.policy.guard_proves_holder_gone(self.engine)
        if migrate_schema is None:
            migrate_schema = self.policy.migrates_on_open
        try:
            current = _retried_if_cut(lambda: migrate.current_revision(self.engine))
            if current is None and not create:
                self.engine.dispose()
                raise JournalError(
                    f"{redact_url(url)} holds no saga-worker journal (no schema): check SAGA_JOURNAL_URL; "
                    "a command that reads never creates one",
                    url=redact_url(url),
                )
            if migrate.from_a_later_release(current):
                _LOG.warning(
                    "journal at %s has schema revision %s, from a later release than this one (head %s): "
                    "opened as a rolling upgrade does; roll this worker forward before the contract migration",
                    redact_url(url),
                    current,
                    migrate.head_revision(),
                )
            elif current != migrate.head_revision():
                if not migrate_schema:
                    raise JournalError(
                        f"journal at {redact_url(url)} has schema revision {current or 'none'}, expected "
                        f"{migrate.head_revision()}: run `saga-worker db upgrade`",
                        url=redact_url(url),
                    )
                _retried_if_cut(lambda: migrate.upgrade(self.engine))
        except sa.exc.OperationalError as exc:
            self.engine.dispose()
            why = (
                f"the database server closed the connection (terminated by an administrator, or the "
                f"server restarted or shut down; tried {OPEN_ATTEMPTS} times): {exc.orig}"
                if exc.connection_invalidated
                else str(exc.orig)
            )
            raise JournalError(f"cannot open journal {redact_url(url)}: {why}", url=redact_url(url)) from exc

    def close(self) -> None:
        self._connections.close()
        self.engine.dispose()

    def reset_after_fork(self) -> None:
        # A fresh pool for this process; the kept per-thread connections notice the new pid themselves.
        self.engine.dispose(close=False)

    def __repr__(self) -> str:
        return f"SqlJournal({redact_url(self.url)!r})"

    # -- execution guards (see Journal.execution_guard) -------------------------------------------
    def _try_guard(self, run_id: str, suffix: str) -> object | None:
        if self.policy.guards_across_processes(self.engine):
            return self.policy.try_guard(self.engine, run_id, suffix)
        return super()._try_guard(run_id, suffix)  # in-process only, where the OS offers no such lock

    def _release_guard(self, token: object) -> None:
        if self.policy.guards_across_processes(self.engine):
            self.policy.release_guard(token)
        else:
            super()._release_guard(token)


def normalize_url(url: str) -> str:
    """``postgres://`` and ``postgresql://`` mean psycopg 3 here (the driver we install)."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


# Opening a journal reads its schema's revision on a new connection: one the server closes meanwhile
# (an administrator's pg_terminate_backend, a failover, a restart) is tried again on a fresh one.
OPEN_ATTEMPTS = 3


def _cut(exc: BaseException) -> bool:
    return isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated


def _retried_if_cut(work: Callable[[], T]) -> T:
    """``work``, done again (up to ``OPEN_ATTEMPTS`` times in all, briefly apart) while the database
    closes its connection under it; any other error at once."""
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(_cut),
        stop=tenacity.stop_after_attempt(OPEN_ATTEMPTS),
        wait=tenacity.wait_exponential(multiplier=0.1, max=1.0),
        reraise=True,
    )
    return retrying(work)


def _refuse_missing_sqlite_file(url: str) -> None:
    """SQLite creates a missing file on connect: a read of a mistyped path would make an empty journal
    and list ``runs (0)``. A reader asks for the file to exist first."""
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return
    if parsed.database.startswith("file:") or Path(parsed.database).exists():
        return
    raise JournalError(
        f"no journal at {redact_url(url)}: the file does not exist (check SAGA_JOURNAL_URL, or SAGA_HOME "
        "for the embedded default); a command that reads never creates one",
        url=redact_url(url),
    )


def prepare(url: str) -> None:
    """What opening a journal at ``url`` costs but its connections, paid now: the database driver
    imported, the statements compiled, the schema's newest revision read. Opens no connection."""
    engine = _create_engine(url)
    try:
        shared_statements(engine.dialect)
        migrate.head_revision()
    finally:
        engine.dispose()


def _create_engine(url: str) -> sa.Engine:
    parsed = sa.engine.make_url(normalize_url(url))
    backend = parsed.get_backend_name()
    if backend not in POLICIES:
        raise JournalError(
            f"no journal backend for {redact_url(url)}: use memory://, sqlite:///path.db or postgresql+psycopg://…",
            url=redact_url(url),
        )
    return policy_for(backend).create_engine(parsed, redact_url(url))
