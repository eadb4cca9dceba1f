"""What SQLite and PostgreSQL do differently, in one place: one small policy class per dialect.

The rest of the SQL journal (its statements, its transactions, its execution guards, its migrations)
is written once for both and asks the policy wherever the two differ. To support another database,
write its policy here and name it in ``POLICIES``.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from ..errors import JournalError
from . import boot_clock, execution_guards
from .records import CompensationClaim
from .write_gate import WriteGate, for_sqlite_file

SQLITE_BUSY_TIMEOUT_S = 30.0
# Any fixed number: the PostgreSQL advisory lock that lets one process at a time migrate a database.
MIGRATION_LOCK = 0x5A6A_0001
# What a durable transaction runs first: the server's own synchronous_commit (``on`` unless configured
# otherwise) for this transaction, where the session's is ``off`` (_pg_on_connect).
DURABLE_COMMIT = "SET LOCAL synchronous_commit TO DEFAULT"
# The SQLSTATEs PostgreSQL ends a schema change's transaction with when running transactions hold the
# tables it alters, and how a log line names them.
LOCK_CONFLICTS = {"40P01": "deadlock with a running transaction", "55P03": "lock wait timed out"}


@dataclass(frozen=True)
class LeaseColumns:
    """A lease's columns on one table: ``expires_at``, its deadline on the journal's clock (the one
    every release reads and writes), and where a policy whose clock can step keeps a deadline that
    cannot (SQLite: ``boot_clock``): the boot, the deadline on its monotonic clock, and the value of
    ``attempts`` they were written at. Each claim or take adds one to ``attempts``, so a take by a
    release that does not write the boot columns leaves them stale, and its wall-clock lease decides."""

    expires_at: sa.Column[Any]
    attempts: sa.Column[Any]
    boot_id: sa.Column[Any]
    boot_expires_at: sa.Column[Any]
    boot_attempt: sa.Column[Any]


class LeaseWritten(NamedTuple):
    """A lease's values as ``DialectPolicy.lease_values`` writes them (``LeaseColumns``' order)."""

    expires_at: float
    boot_id: str | None
    boot_expires_at: float | None
    boot_attempt: int | None


_TTL = sa.bindparam("ttl", type_=sa.Double)
# This process's boot and the reading of its monotonic clock (``boot_clock.reading``).
_BOOT = sa.bindparam("boot", type_=sa.String)
_MONO = sa.bindparam("mono", type_=sa.Double)


class DialectPolicy(abc.ABC):
    """Where one database differs: each attribute and method says what the journal asks of it."""

    name: ClassVar[str]
    # Each thread keeps its driver connection from one transaction to the next (driver.Connections).
    keeps_connection_per_thread: ClassVar[bool]
    # Opening a journal migrates it to the newest schema unless the caller says otherwise.
    migrates_on_open: ClassVar[bool]
    # The journal's clock is the database server's, so skewed worker clocks cannot shorten a lease.
    clock_is_the_servers: ClassVar[bool]
    # The planner cannot tell an id prefix most runs share from a rare one: SqlJournal asks the index.
    counts_common_prefixes: ClassVar[bool]
    # A statement may carry a second write in its WITH clause (PostgreSQL's data-modifying CTEs): a
    # write and its audit row, or a step's outcome and its unwind entry, are then one statement,
    # atomic alone, in one round trip with no BEGIN/COMMIT. Otherwise two statements, one transaction.
    writes_in_with_clause: ClassVar[bool]
    # BEGIN and COMMIT are each a round trip to a server: work that reads after a write pipelines
    # its statements instead of riding in the write's transaction.
    transactions_cost_round_trips: ClassVar[bool]
    # Whether concurrent writes of one process share commits (group_commit.py): where one writer at
    # a time holds the database, commits are the queue every unwind waits in.
    groups_commits: ClassVar[bool]
    # A statement that fails inside a transaction is undone alone and the transaction goes on (SQLite's
    # statement journal), rather than aborting the whole transaction (PostgreSQL): a write after
    # others in one transaction needs no savepoint of its own to fail alone (``claims.claim_after``).
    statements_fail_alone: ClassVar[bool]
    # A RETURNING costs a temporary table per statement (SQLite collects its rows in one before the
    # first is read): a write whose row is read back by the same transaction's SELECT costs less.
    returning_builds_a_table: ClassVar[bool] = False
    # Where a driver pipelines: the plain statements that open a durable transaction and commit it,
    # sent with its statements in one round trip (``Tx.batch(framed=...)``); None elsewhere.
    durable_frame: ClassVar[tuple[tuple[str, ...], tuple[str, ...]] | None] = None

    @abc.abstractmethod
    def insert(self, table: sa.Table) -> Any:
        """An INSERT with ``on_conflict_do_nothing`` (insert-if-absent, judged by RETURNING)."""

    @abc.abstractmethod
    def clock(self) -> sa.ColumnElement[float]:
        """The clock leases and the tombstone are judged by, inside a statement."""

    @abc.abstractmethod
    def lease_values(self, lease: LeaseColumns, attempt: Any) -> dict[str, Any]:
        """The values that set a lease of ``ttl`` seconds, from now, written at ``attempt``."""

    @abc.abstractmethod
    def lease_expired(self, lease: LeaseColumns) -> sa.ColumnElement[bool]:
        """Whether the lease has lapsed, inside a statement."""

    def lease_clock(self) -> dict[str, object]:
        """The bound parameters ``lease_values`` and ``lease_expired`` read besides ``now`` and ``ttl``."""
        return {}

    def lease_written(self, params: Mapping[str, Any], attempt: int) -> LeaseWritten | None:
        """What ``lease_values`` writes when bound with ``params`` at ``attempt``, computed here as the
        database computes it; None where it reads a clock of its own (the server's: read it back)."""
        return None

    def lease_left(self, claim: CompensationClaim, now: Callable[[], float]) -> float:
        """``lease_expired``'s judgement in Python: seconds until ``claim``'s lease lapses; ``now``
        reads the journal's clock (``Journal.now``)."""
        return claim.lease_expires_at - now()

    @abc.abstractmethod
    def byte_ordered(self, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
        """``column`` compared byte by byte, so that a prefix range is exact whatever the collation."""

    # -- transactions (driver.transaction) ---------------------------------------------------------
    @abc.abstractmethod
    def autocommits(self, *, atomic: bool) -> bool:
        """Whether this work runs each statement as its own transaction, without BEGIN/COMMIT."""

    @abc.abstractmethod
    def begin(self, driver: Any, cursor: Any, *, write: bool, autocommit: bool, durable: bool) -> None:
        """Open the transaction on the driver connection, through ``cursor`` (the transaction's own)
        where it runs a statement (``durable``: the commit reaches stable storage before it returns);
        with ``autocommit``, make each statement its own transaction instead."""

    def commit(self, driver: Any, cursor: Any) -> None:
        """Commit the transaction ``begin`` opened (``cursor``: the transaction's own)."""
        driver.commit()

    def is_clean(self, driver: Any) -> bool:
        """Whether a pooled connection may wait in the journal's idle list for its next transaction
        (no transaction open; ``begin`` sets the mode that transaction runs in)."""
        return True

    def for_the_pool(self, driver: Any) -> bool:
        """Make a connection going back to the engine's pool as the pool expects it (not in
        autocommit); whether it is (if not, it is dropped rather than handed to the pool)."""
        return True

    @abc.abstractmethod
    def end_autocommit(self, driver: Any, cursor: Any) -> None:
        """After work run with ``autocommit`` (however it ended): every statement of it committed,
        and the connection back as the pool expects it."""

    def after(  # noqa: B027 - only SQLite changes anything
        self, driver: Any, cursor: Any, *, durable: bool
    ) -> None:
        """Put back what ``begin`` changed for one durable transaction, however it ended (the driver
        calls it for durable transactions only: nothing else changes the connection's settings)."""

    def write_gate(self, engine: sa.Engine) -> WriteGate | None:
        """Where this journal's write transactions queue for the database's write lock (SQLite:
        ``write_gate.py``), or None where they wait at the database itself."""
        return None

    # -- execution guards (Journal.execution_guard) -------------------------------------------------
    @abc.abstractmethod
    def guards_across_processes(self, engine: sa.Engine) -> bool:
        """Whether this database offers a guard its holder's death releases (else: in-process only)."""

    @abc.abstractmethod
    def try_guard(self, engine: sa.Engine, run_id: str, suffix: str) -> object | None:
        """Take the guard without waiting: a token for ``release_guard``, or None if it is held."""

    @abc.abstractmethod
    def release_guard(self, token: object) -> None: ...

    @abc.abstractmethod
    def guard_proves_holder_gone(self, engine: sa.Engine) -> bool:
        """Whether a free guard alone proves nobody executes the record (``Journal.guard_bound_to_process``)."""

    # -- migrations and engines -----------------------------------------------------------------------
    @abc.abstractmethod
    def serialise_migrations(self, conn: sa.Connection) -> None:
        """Make concurrent migrations take turns: the next one then reads the revision the first
        wrote and has nothing to do."""

    def bound_lock_waits(self, conn: sa.Connection, seconds: float) -> None:  # noqa: B027 - PostgreSQL only
        """Make a statement of this transaction that waits longer than ``seconds`` for a table lock
        fail instead (``lock_conflict`` then names it): a schema change queued behind a worker's open
        transaction would otherwise hold up every worker's statements on that table."""

    def lock_conflict(self, exc: BaseException) -> str | None:
        """What kept a schema change from its locks, if that is why ``exc`` was raised (the
        transaction was rolled back and may be tried again); else None."""
        return None

    @abc.abstractmethod
    def create_engine(self, parsed: sa.URL, shown: str) -> sa.Engine:
        """The engine for ``parsed``; ``shown`` is the URL as messages may print it (no password)."""


class PostgresPolicy(DialectPolicy):
    """A server shared by many machines; row locks and READ COMMITTED."""

    name = "postgresql"
    keeps_connection_per_thread = False  # a connection is a server process: back to the pool
    migrates_on_open = False  # production runs `saga-worker db upgrade` once, before the workers
    clock_is_the_servers = True
    counts_common_prefixes = False  # its statistics tell the planner
    writes_in_with_clause = True  # a transaction would cost BEGIN and COMMIT round trips
    transactions_cost_round_trips = True
    durable_frame = (("BEGIN", DURABLE_COMMIT), ("COMMIT",))
    groups_commits = False  # its writes are pipelined statements on pooled connections
    statements_fail_alone = False  # an error aborts the transaction: only a savepoint keeps what came before

    def insert(self, table: sa.Table) -> Any:
        return postgresql.insert(table)

    def clock(self) -> sa.ColumnElement[float]:
        return sa.cast(sa.func.extract("epoch", sa.func.clock_timestamp()), sa.Double)

    def lease_values(self, lease: LeaseColumns, attempt: Any) -> dict[str, Any]:
        # The server's clock, one for every worker: a worker's own clock, stepped or skewed, is never read.
        return {lease.expires_at.name: self.clock() + _TTL}

    def lease_expired(self, lease: LeaseColumns) -> sa.ColumnElement[bool]:
        return lease.expires_at < self.clock()

    def byte_ordered(self, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
        return sa.collate(column, "C")

    def autocommits(self, *, atomic: bool) -> bool:
        # Work whose statements are each atomic alone, and which allows for writers between them:
        # BEGIN and COMMIT would only add two round trips to the server.
        return not atomic

    def begin(self, driver: Any, cursor: Any, *, write: bool, autocommit: bool, durable: bool) -> None:
        # The journal's sessions commit without waiting for the WAL flush (_pg_on_connect); a durable
        # transaction waits as the server is configured to (synchronous_commit=on unless the DBA says
        # otherwise). It never autocommits (driver.transaction): SET LOCAL needs a transaction.
        # A connection of the journal's idle list keeps the mode of its last work: autocommit, for
        # most of the journal's (a step's read with its claim, its outcome), so that the next such
        # work switches nothing (each switch is psycopg Python: ~10 calls, twice per transaction).
        if durable or not autocommit:
            if driver.autocommit:
                driver.autocommit = False
            if durable:
                cursor.execute(DURABLE_COMMIT)
        elif not driver.autocommit:
            driver.autocommit = True

    def end_autocommit(self, driver: Any, cursor: Any) -> None:
        # psycopg ran each statement to its end, and committed it; a transaction still open is a framed
        # batch's (``durable_frame``) that failed: rolled back, so the connection is idle again. It
        # stays in autocommit (``begin``), until a transaction or the pool needs it otherwise.
        if driver.pgconn.transaction_status != _pg_idle():
            driver.execute("ROLLBACK")

    def is_clean(self, driver: Any) -> bool:
        # The status read off libpq's connection (``pgconn``), as ``driver.info.transaction_status``
        # reads it, without a ConnectionInfo made for each read.
        return not driver.closed and driver.pgconn.transaction_status == _pg_idle()

    def for_the_pool(self, driver: Any) -> bool:
        # The pool's other users (SQLAlchemy connections: migrations, the console's reads) expect a
        # connection whose statements run in a transaction.
        if driver.closed or not driver.autocommit:
            return True
        try:
            driver.autocommit = False  # refused with a transaction open (a failed ROLLBACK)
        except Exception:  # noqa: BLE001 - dropped instead: the pool opens a fresh one when asked
            return False
        return True

    def guards_across_processes(self, engine: sa.Engine) -> bool:
        return True

    def try_guard(self, engine: sa.Engine, run_id: str, suffix: str) -> object | None:
        # A session advisory lock, dropped by the server when its connection closes.
        return execution_guards.pg_try(engine, run_id, suffix)

    def release_guard(self, token: object) -> None:
        assert isinstance(token, execution_guards.PgGuard)
        execution_guards.pg_release(token)

    def guard_proves_holder_gone(self, engine: sa.Engine) -> bool:
        # A cut connection drops the advisory lock with its holder alive: the execute lease decides.
        return False

    def serialise_migrations(self, conn: sa.Connection) -> None:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(MIGRATION_LOCK)))
        conn.execute(sa.text(DURABLE_COMMIT))  # a schema change is flushed before `db upgrade` returns

    def bound_lock_waits(self, conn: sa.Connection, seconds: float) -> None:
        conn.execute(sa.text(f"SET LOCAL lock_timeout = {max(1, round(seconds * 1000))}"))

    def lock_conflict(self, exc: BaseException) -> str | None:
        state = (
            getattr(getattr(exc, "orig", None), "sqlstate", None)
            if isinstance(exc, sa.exc.DBAPIError)
            else None
        )
        return LOCK_CONFLICTS.get(state) if isinstance(state, str) else None

    def create_engine(self, parsed: sa.URL, shown: str) -> sa.Engine:
        if parsed.get_driver_name() != "psycopg":
            raise JournalError(
                f"PostgreSQL journals use psycopg 3: write the URL as postgresql+psycopg://… (got {shown})",
                url=shown,
            )
        try:
            import psycopg  # noqa: F401
        except ImportError as exc:
            raise JournalError(
                f"PostgreSQL journal {shown} needs psycopg 3: pip install 'saga-worker[postgres]'", url=shown
            ) from exc
        # No pre-ping (a round trip on every checkout, half a commit): the journal's transactions notice a
        # dead connection themselves, drop the pool and retry once (see driver.transaction).
        engine = sa.create_engine(parsed, pool_size=5, max_overflow=10)
        sa.event.listen(engine, "connect", _pg_on_connect)
        return engine


@functools.cache
def _pg_idle() -> Any:
    """psycopg's status of a connection with no transaction open (psycopg is an extra: imported late)."""
    from psycopg.pq import TransactionStatus

    return TransactionStatus.IDLE


def _pg_on_connect(dbapi_conn: Any, _record: Any) -> None:
    """The journal's sessions commit asynchronously: a commit returns once its WAL record is written,
    and the WAL writer flushes it within a few hundred milliseconds. Only what a crash of the server
    could not be allowed to lose waits for the flush: the tombstone, a non-idempotent call's claim (the
    ``durable`` transactions, as on SQLite, whose other commits are synced at checkpoints). A crash
    loses at most the last moments' other commits, never one before a durable commit (the WAL is
    flushed in order), and what it loses is redone with the same keys (docs/reference/safety.md)."""
    with dbapi_conn.cursor() as cursor:
        cursor.execute("SET synchronous_commit TO off")
    dbapi_conn.commit()


class SqlitePolicy(DialectPolicy):
    """One file shared by the processes of one machine; one writer at a time."""

    name = "sqlite"
    keeps_connection_per_thread = True  # a SQLite connection is an open file: keeping it is cheap
    migrates_on_open = True  # the embedded default needs no `saga-worker db upgrade`
    clock_is_the_servers = False  # one machine: its clock, bound as ``now``
    counts_common_prefixes = True
    writes_in_with_clause = False  # no INSERT in a WITH; a transaction is no round trip here
    transactions_cost_round_trips = False
    groups_commits = True  # one writer at a time: threads' ready writes share its commits (group_commit.py)
    statements_fail_alone = True  # a failed statement is rolled back by its statement journal alone
    returning_builds_a_table = True

    def insert(self, table: sa.Table) -> Any:
        return sqlite.insert(table)

    def clock(self) -> sa.ColumnElement[float]:
        return sa.bindparam("now", type_=sa.Double)

    def lease_values(self, lease: LeaseColumns, attempt: Any) -> dict[str, Any]:
        # The wall-clock deadline too: the previous release's workers read it (a rolling upgrade).
        return {
            lease.expires_at.name: self.clock() + _TTL,
            lease.boot_id.name: _BOOT,
            lease.boot_expires_at.name: _MONO + _TTL,
            lease.boot_attempt.name: attempt,
        }

    def lease_expired(self, lease: LeaseColumns) -> sa.ColumnElement[bool]:
        # The boot clock's deadline decides when this process has a boot id and the lease's boot
        # columns belong to its current attempt; a lease of another boot died with that boot.
        # Otherwise (no boot id here, a row from before migration 0009 or from the previous
        # release) the wall-clock deadline decides, as it always did.
        on_boot_clock = sa.and_(
            _BOOT.is_not(None),
            lease.boot_id.is_not(None),
            sa.func.coalesce(lease.boot_attempt, -1) == lease.attempts,
        )
        on_wall_clock = sa.or_(
            _BOOT.is_(None),
            lease.boot_id.is_(None),
            sa.func.coalesce(lease.boot_attempt, -1) != lease.attempts,
        )
        return sa.or_(
            sa.and_(on_boot_clock, sa.or_(lease.boot_id != _BOOT, lease.boot_expires_at < _MONO)),
            sa.and_(on_wall_clock, lease.expires_at < self.clock()),
        )

    def lease_clock(self) -> dict[str, object]:
        return boot_clock.reading()

    def lease_written(self, params: Mapping[str, Any], attempt: int) -> LeaseWritten | None:
        # ``lease_values`` above, on bound values only: SQLite adds two REALs as Python adds two floats,
        # and NULL plus anything is NULL.
        ttl, mono = params["ttl"], params["mono"]
        return LeaseWritten(
            params["now"] + ttl, params["boot"], None if mono is None else mono + ttl, attempt
        )

    def lease_left(self, claim: CompensationClaim, now: Callable[[], float]) -> float:
        boot, expires = boot_clock.boot_id(), claim.lease_boot_expires_at
        stale = claim.lease_boot_id is None or claim.lease_boot_attempt != claim.attempts
        if boot is None or expires is None or stale:
            return claim.lease_expires_at - now()  # the wall-clock lease, as ``lease_expired`` judges it
        if claim.lease_boot_id != boot:
            return 0.0  # a lease of another boot: its holders ended with it
        return expires - time.monotonic()

    def byte_ordered(self, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
        return column  # SQLite compares bytes already

    def autocommits(self, *, atomic: bool) -> bool:
        # As on PostgreSQL: work whose statements are each atomic alone. A statement that writes takes
        # the write lock before it reads anything (waiting out other writers as BEGIN IMMEDIATE does),
        # so it can never be overtaken between its read and its write; BEGIN and COMMIT around it
        # would cost two more statements for nothing.
        return not atomic

    def begin(self, driver: Any, cursor: Any, *, write: bool, autocommit: bool, durable: bool) -> None:
        # WAL with synchronous=NORMAL syncs only at checkpoints; FULL syncs the WAL (and every commit
        # before it) before this commit returns. It must be set outside the transaction.
        if durable:
            cursor.execute("PRAGMA synchronous=FULL")
        # IMMEDIATE takes the write lock up front: a read-then-write can never be overtaken between
        # its read and its write, which is what the journal's compare-and-set relies on. In
        # autocommit (the connection's mode between transactions: isolation_level None), nothing.
        if not autocommit:
            cursor.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def commit(self, driver: Any, cursor: Any) -> None:
        # As pysqlite's ``commit`` (nothing when no transaction is open), but through the cursor:
        # ``Connection.commit`` prepares its COMMIT afresh each time, the cursor's statement cache
        # keeps it prepared.
        if driver.in_transaction:
            cursor.execute("COMMIT")

    def end_autocommit(self, driver: Any, cursor: Any) -> None:
        # A statement commits when it runs to its end. Each statement of the work did, but the last
        # one if its rows were left unread (a RETURNING under ``Tx.execute``): read them, so that it
        # commits now rather than at the cursor's next use, holding the write lock meanwhile.
        cursor.fetchall()

    def after(self, driver: Any, cursor: Any, *, durable: bool) -> None:
        if durable:
            with contextlib.suppress(Exception):  # the original error, if any, is the one worth raising
                cursor.execute("PRAGMA synchronous=NORMAL")  # back to the lazy default

    def write_gate(self, engine: sa.Engine) -> WriteGate | None:
        # Its busy handler sleeps with a growing delay when the lock is taken: the gate queues instead.
        return for_sqlite_file(engine.url.database)

    def guards_across_processes(self, engine: sa.Engine) -> bool:
        return bool(engine.url.database) and execution_guards.file_guards_supported()

    def try_guard(self, engine: sa.Engine, run_id: str, suffix: str) -> object | None:
        """A byte lock on a file next to the database, dropped by the kernel when its holder dies."""
        return execution_guards.file_try(f"{engine.url.database}.exec-guards", run_id, suffix)

    def release_guard(self, token: object) -> None:
        assert isinstance(token, int)
        execution_guards.file_release(token)

    def guard_proves_holder_gone(self, engine: sa.Engine) -> bool:
        # The open-file lock dies with its holder's process and with nothing else.
        return self.guards_across_processes(engine)

    def serialise_migrations(self, conn: sa.Connection) -> None:
        pass  # BEGIN IMMEDIATE makes migrations take turns already

    def create_engine(self, parsed: sa.URL, shown: str) -> sa.Engine:
        database = parsed.database
        if not database or database == ":memory:":
            # An in-memory SQLite database lives and dies with one connection: no other process could share it.
            raise JournalError(
                f"SQLite journal {shown} is in memory: a SQLite journal needs a file "
                "(sqlite:///path.db); use memory:// for an in-process one",
                url=shown,
            )
        path = Path(database)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JournalError(
                f"cannot create the folder of SQLite journal {shown}: {exc}", url=shown
            ) from exc
        # Each thread keeps a connection of its own (driver.Connections): no cap on how many threads.
        engine = sa.create_engine(
            parsed,
            pool_size=5,
            max_overflow=-1,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False},
        )
        sa.event.listen(engine, "connect", _sqlite_on_connect)
        sa.event.listen(engine, "begin", _sqlite_on_begin)
        return engine


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    # Let us issue BEGIN ourselves (pysqlite's own BEGIN is deferred and comes too late).
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
    cursor.close()


def _sqlite_on_begin(conn: sa.Connection) -> None:
    # The same IMMEDIATE for transactions through SQLAlchemy (migrations, tests), straight on the
    # driver: going through SQLAlchemy's execute costs more than the BEGIN itself. (The journal's own
    # transactions bypass this: see driver.transaction.)
    dbapi = conn.connection.driver_connection
    assert dbapi is not None
    dbapi.execute("BEGIN IMMEDIATE")


POLICIES: dict[str, DialectPolicy] = {p.name: p for p in (PostgresPolicy(), SqlitePolicy())}


def policy_for(name: str) -> DialectPolicy:
    """The policy of a SQLAlchemy dialect or backend name (``"sqlite"``, ``"postgresql"``)."""
    policy = POLICIES.get(name)
    if policy is None:
        known = ", ".join(sorted(POLICIES))
        raise JournalError(f"no journal backend for SQL dialect {name!r} (one of: {known})")
    return policy
