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

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
import tenacity

from ..errors import (
    JournalError,
)
from ..redact import redact_url
from . import driver, migrate
from .base import Journal
from .dialects import POLICIES, policy_for
from .records import (
    NewAudit,
    RecordStatus,
    ReportView,
    UnwindInfo,
    WorklistView,
    every_step_has_an_entry,
)
from .sql_parts.audit import SqlAudit
from .sql_parts.claims import SqlClaims, claim_row
from .sql_parts.gate import run_row
from .sql_parts.records import SqlRecords
from .sql_parts.runs import SqlRuns, stamped_or_raise
from .sql_parts.shared import SqlShared
from .sql_parts.sweeps import SqlSweeps
from .sql_parts.unwinds import SqlUnwinds, entries_by_position, unwind_row
from .statements import Statements, shared_statements

T = TypeVar("T")
# A worklist as read: the run row (with who condemned it), its record rows, their claims' rows.
WorklistRows = tuple[driver.Row | None, list[driver.Row], list[driver.Row]]


class SqlJournal(SqlRuns, SqlRecords, SqlSweeps, SqlUnwinds, SqlAudit, SqlShared, SqlClaims, Journal):
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
            if current != migrate.head_revision():
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

    # -- rows to values ---------------------------------------------------------------------------
    def read_worklist(self, run_id: str, statuses: Sequence[RecordStatus]) -> WorklistView:
        return self._worklist_view(self._fetch(self._worklist_reads(run_id)), statuses)

    def read_report(self, unwind_id: str, run_id: str, statuses: Sequence[RecordStatus]) -> ReportView:
        q, by_unwind = self._q, {"unwind": unwind_id}
        first = [(q.unwind_get, by_unwind), (q.entries_of_unwind, by_unwind)]

        def work(tx: driver.Tx) -> tuple[UnwindInfo | None, dict[int, dict[str, Any]], WorklistRows]:
            found, rows, run = self._reads(tx, [*first, (q.run_with_condemner, {"run": run_id})])
            unwind = unwind_row(found[0]) if found else None
            entries = entries_by_position(rows, unwind_id)
            read: WorklistRows = (run[0] if run else None, [], [])
            # The run's records and claims only when some step has no entry (one read more after a halt).
            if unwind is None or not every_step_has_an_entry(unwind, entries):
                read = self._read_with_worklist(tx, run_id, [])[1]
            return unwind, entries, read

        unwind, entries, read = self._fetch(work)
        return ReportView(unwind, entries, self._worklist_view(read, statuses))

    def condemn_and_read(
        self, run_id: str, statuses: Sequence[RecordStatus], *, audit: NewAudit | None = None
    ) -> WorklistView:
        condemn, atomic, (stamp, params) = self._condemn_work(run_id, audit)
        reads = self._worklist_reads(run_id)
        if self.policy.transactions_cost_round_trips:
            if atomic:  # an audit row that must commit with the stamp in a transaction of its own
                return super().condemn_and_read(run_id, statuses, audit=audit)
            return self._condemn_and_read_pipelined(run_id, statuses, condemn, reads, (stamp, params))
        # SQLite: a transaction costs no round trip, so the reads ride in the tombstone's (one BEGIN and
        # one COMMIT fewer per unwind). The commit is synced before this returns, as condemn's; the rows
        # are parsed after it, so a malformed one fails the unwind with its tombstone standing.

        def work(tx: driver.Tx) -> tuple[float | None, WorklistRows | None]:
            stamped = condemn(tx)
            return stamped, None if stamped is None else reads(tx)

        stamped, rows = self._write(work, atomic=True, durable=True)
        stamped_or_raise(run_id, stamped)
        assert rows is not None
        return self._worklist_view(rows, statuses)

    def _condemn_and_read_pipelined(
        self,
        run_id: str,
        statuses: Sequence[RecordStatus],
        condemn: Callable[[driver.Tx], float | None],
        reads: Callable[[driver.Tx], WorklistRows],
        first: tuple[driver.Prepared, dict[str, Any]],
    ) -> WorklistView:
        """PostgreSQL: a durable transaction's BEGIN, the stamp, the three reads and the COMMIT in one
        pipeline: one round trip instead of four.

        The COMMIT waits for the WAL flush (the policy's ``durable_frame``) and the pipeline's results
        only come back after it, so the tombstone is durable before this returns, as ``condemn``'s; the
        reads, in its transaction, see it and everything committed before it. A stamp that wrote
        nothing (a run already condemned, or never started) falls back to ``condemn``'s own statements
        in a durable transaction of their own, and reads the worklist afresh after them."""
        frame = self.policy.durable_frame

        def work(tx: driver.Tx) -> tuple[float | None, WorklistRows | None]:
            (stamped,), read = self._read_with_worklist(tx, run_id, [first], framed=frame)
            if not stamped or stamped[0]["condemned_at"] is None:
                return None, None
            return float(stamped[0]["condemned_at"]), read

        def fallback(tx: driver.Tx) -> tuple[float | None, WorklistRows | None]:
            at = condemn(tx)
            return at, None if at is None else reads(tx)

        at, rows = self._write(work) if frame is not None else (None, None)
        if at is None:
            at, rows = self._write(fallback, durable=True)
        stamped_or_raise(run_id, at)
        assert rows is not None
        return self._worklist_view(rows, statuses)

    def _worklist_reads(self, run_id: str) -> Callable[[driver.Tx], WorklistRows]:
        return lambda tx: self._read_with_worklist(tx, run_id, [])[1]

    def _read_with_worklist(
        self,
        tx: driver.Tx,
        run_id: str,
        first: list[tuple[driver.Prepared, dict[str, Any]]],
        *,
        framed: driver.Frame | None = None,
    ) -> tuple[list[list[driver.Row]], WorklistRows]:
        """The rows of each of ``first``'s reads, then the run's worklist rows (the run with who
        condemned it, its records, their claims): in one pipeline where a round trip costs
        (PostgreSQL: the run's own claims read with them, a fork's copied steps' after; ``framed``
        as ``driver.Tx.batch``), else one statement after the other."""
        q, by_run = self._q, {"run": run_id}
        reads = [*first, (q.run_with_condemner, by_run), (q.records_of_run, by_run)]
        if self.policy.transactions_cost_round_trips:
            *before, run, rows, claims = tx.batch(
                [*reads, (q.claims_of_origin, {"origin": run_id})], framed=framed
            )
            origins = sorted({r["origin_run_id"] for r in rows} - {run_id})
        else:
            *before, run, rows = self._reads(tx, reads)
            claims, origins = [], sorted({r["origin_run_id"] for r in rows})
        claims += [c for o in origins for c in tx.all(q.claims_of_origin, {"origin": o})]
        return before, (run[0] if run else None, rows, claims)

    def _reads(
        self, tx: driver.Tx, reads: list[tuple[driver.Prepared, dict[str, Any]]]
    ) -> list[list[driver.Row]]:
        """Each read's rows: in one pipeline where a round trip costs, else one after the other."""
        if self.policy.transactions_cost_round_trips:
            return tx.batch(reads)
        return [tx.all(stmt, params) for stmt, params in reads]

    def _worklist_view(self, read: WorklistRows, statuses: Sequence[RecordStatus]) -> WorklistView:
        run, rows, claim_rows = read
        found = self._records(rows, statuses)
        wanted = {(r.origin_run_id, r.suffix) for r in found}
        owned = [c for c in map(claim_row, claim_rows) if (c.origin_run_id, c.suffix) in wanted]
        claims = {(c.origin_run_id, c.suffix): c for c in owned}
        if run is None:
            return WorklistView(None, found, claims)
        who = (run["condemner_actor"], run["condemner_reason"] or None)
        return WorklistView(run_row(run), found, claims, who)


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
