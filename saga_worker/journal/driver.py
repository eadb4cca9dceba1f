"""The journal's statements, compiled once by SQLAlchemy and run straight on the database driver.

Why: a ``Connection.execute`` costs its Python (execution context, result objects, events) and a
pool pre-ping a round trip: together more than SQLite's whole commit, on every step of every
unwind. The journal's statements are fixed, so
SQLAlchemy still writes each one (once per dialect, from the Core tables in ``schema.py``), and
this module only executes the result on a pooled DBAPI connection.

What it keeps from SQLAlchemy's own execution: errors are raised as SQLAlchemy's exception classes
(so a caller's ``except OperationalError`` sees one family, whichever path ran), but for a refusal
of the journal's storage (a full disk, a read-only database: ``refusals.py``), raised as
``JournalUnavailableError`` saying what is wrong and what to do; and a connection
the driver reports as disconnected is invalidated, the pool emptied, and the transaction retried
once on a fresh connection when the failure came before anything could have been written.
"""

from __future__ import annotations

import contextlib
import operator
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.engine.interfaces import DBAPIModule
from sqlalchemy.sql.compiler import SQLCompiler

from ..core import process_id
from .dialects import DialectPolicy
from .refusals import storage_refusal
from .write_gate import WriteGate

Row = dict[str, Any]
# Plain statements sent before and after a batch's own, in its round trip (``Tx.batch``).
Frame = tuple[Sequence[str], Sequence[str]]
T = TypeVar("T")


class Prepared:
    """One statement, compiled for one dialect; ``bind(params)`` gives the driver's parameters."""

    __slots__ = ("sql", "_names", "_pick", "_positional", "_defaults", "known_columns", "_pickers")

    def __init__(self, statement: sa.ClauseElement, dialect: sa.Dialect) -> None:
        compiled = cast(SQLCompiler, statement.compile(dialect=dialect))
        if compiled.literal_execute_params or compiled.post_compile_params:
            raise ValueError("an expanding (IN-list) parameter cannot be prepared once")
        self.sql = compiled.string
        # Values fixed in the statement itself (a status literal, ``attempts + 1``) are bound too.
        self._defaults = {
            name: bind.effective_value for bind, name in compiled.bind_names.items() if not bind.required
        }
        self._positional = bool(compiled.positional)
        names = compiled.positiontup if compiled.positional else sorted(set(compiled.bind_names.values()))
        self._names: tuple[str, ...] = tuple(names or ())
        # The values in the statement's order, picked in C (``bind`` runs for every statement).
        self._pick: Callable[[Mapping[str, Any]], tuple[Any, ...]] = _picker(self._names)
        # The columns it returns once ``columns`` has read them (empty until then).
        self.known_columns: tuple[str, ...] = ()
        # ``picker``'s, by the names picked.
        self._pickers: dict[tuple[str, ...], Callable[[Sequence[Any]], tuple[Any, ...]]] = {}

    def columns(self, cursor: Any) -> tuple[str, ...]:
        """The names of the columns the statement returns, read from the driver once.

        Why once: a statement's columns are fixed by its text, and psycopg builds a ``Column`` object
        per column each time ``cursor.description`` is read (a step's wide read has dozens)."""
        columns = self.known_columns
        if not columns:
            columns = self.known_columns = tuple(d[0] for d in cursor.description)
        return columns

    def picker(self, cursor: Any, names: tuple[str, ...]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
        """What picks the columns ``names``, in that order, out of a row of this statement as the
        driver returns it (a tuple), made once: a row read this way is never made a dict first."""
        pick = self._pickers.get(names)
        if pick is None:
            columns = self.known_columns or self.columns(cursor)
            positions = [columns.index(name) for name in names]  # ValueError: a column it does not return
            pick = self._pickers[names] = operator.itemgetter(*positions)  # (two names at least)
        return pick

    def bind(self, params: Mapping[str, Any]) -> tuple[Any, ...] | dict[str, Any]:
        """The driver's parameters: positional (SQLite) or by name (psycopg), just the ones used."""
        merged = {**self._defaults, **params} if self._defaults else params
        try:
            if self._positional:
                return self._pick(merged)
            return dict(zip(self._names, self._pick(merged), strict=True))
        except KeyError as exc:
            raise TypeError(f"statement needs parameter {exc.args[0]!r}: {self.sql}") from None


def _picker(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """``lambda m: tuple(m[n] for n in names)``, without a Python frame per value where it can."""
    if len(names) > 1:
        return operator.itemgetter(*names)
    if names:
        (name,) = names
        return lambda merged: (merged[name],)
    return lambda merged: ()


class Tx:
    """One open transaction on a driver connection."""

    __slots__ = ("_cursor", "_kept", "statements_run")

    def __init__(self, cursor: Any, kept: dict[str, Any] | None = None) -> None:
        self._cursor = cursor
        # What is kept with a pooled connection across its transactions (the pool's ``info``): a
        # pipeline's cursors (``batch``). None: nothing is (one is made per statement instead).
        self._kept = kept
        self.statements_run = 0

    @property
    def connection(self) -> Any:
        """The DBAPI connection this transaction is on (for an effect written in it)."""
        return self._cursor.connection

    def execute(self, stmt: Prepared, params: Mapping[str, Any]) -> Any:
        self._cursor.execute(stmt.sql, stmt.bind(params))
        self.statements_run += 1
        return self._cursor

    def changed(self, stmt: Prepared, params: Mapping[str, Any]) -> int:
        """How many rows a write wrote (0 for an INSERT ... ON CONFLICT DO NOTHING that conflicted),
        for a caller that needs no more than whether it matched: no RETURNING, which on SQLite costs
        a temporary table per statement."""
        return int(self.execute(stmt, params).rowcount)

    def plain(self, sql: str) -> None:
        """Run a fixed statement that takes no parameters and returns no rows (a savepoint's)."""
        self._cursor.execute(sql)

    def one(self, stmt: Prepared, params: Mapping[str, Any]) -> Row | None:
        """The first row the statement returns, by column name, or None."""
        cursor = self.execute(stmt, params)
        row = cursor.fetchone()
        if row is None:
            return None
        names = stmt.known_columns or stmt.columns(cursor)
        cursor.fetchall()  # drain, so the driver can reuse the cursor
        return dict(zip(names, row, strict=True))

    def picked(
        self, stmt: Prepared, params: Mapping[str, Any], names: tuple[str, ...]
    ) -> tuple[Any, ...] | None:
        """``one``'s row as the values of the columns ``names``, in that order (``Prepared.picker``)."""
        cursor = self.execute(stmt, params)
        row = cursor.fetchone()
        if row is None:
            return None
        cursor.fetchall()  # drain, so the driver can reuse the cursor
        return stmt.picker(cursor, names)(row)

    def all_picked(
        self, stmt: Prepared, params: Mapping[str, Any], names: tuple[str, ...]
    ) -> list[tuple[Any, ...]]:
        """``all``'s rows, each as the values of the columns ``names``, in that order (``picked``)."""
        cursor = self.execute(stmt, params)
        rows = cursor.fetchall()
        if not rows:
            return []
        pick = stmt.picker(cursor, names)
        return [pick(row) for row in rows]

    def all(self, stmt: Prepared, params: Mapping[str, Any]) -> list[Row]:
        cursor = self.execute(stmt, params)
        rows = cursor.fetchall()
        if not rows:
            return []
        names = stmt.known_columns or stmt.columns(cursor)
        return [dict(zip(names, row, strict=True)) for row in rows]

    def batch(
        self, items: Sequence[tuple[Prepared, Mapping[str, Any]]], *, framed: Frame | None = None
    ) -> list[list[Row]]:
        """Each statement's rows, in order. A driver that pipelines (psycopg 3) gets them all in one
        round trip; they then run as one implicit transaction, committed (or, in error, rolled back)
        before this returns. Any other runs them one after the other in this transaction. Only for
        statements that may run again: a connection that dies mid-pipeline has the work retried.

        ``framed`` (pipelining drivers only, in autocommit work): plain statements sent before and
        after the items in the same round trip, such as a transaction's ``BEGIN`` with its settings
        and its ``COMMIT``. In error the server skips the rest, the ``COMMIT`` too, and the transaction
        stays open until ``DialectPolicy.end_autocommit`` rolls it back."""
        connection = self._cursor.connection
        pipeline = getattr(connection, "pipeline", None)
        if pipeline is None:
            if framed is not None:
                raise ValueError("a framed batch needs a driver that pipelines")
            return [self.all(stmt, params) for stmt, params in items]
        before, after = framed or ((), ())
        # One cursor per statement whose rows are read (a cursor holds its last statement's result),
        # kept with the connection for its next pipeline: psycopg builds each in Python. The plain
        # statements around them, whose results nobody reads, share the transaction's own.
        kept = self._kept
        cursors = [] if kept is None else kept.setdefault(_PIPELINE_CURSORS, [])
        while len(cursors) < len(items):
            cursors.append(connection.cursor())
        plain = self._cursor
        with pipeline():
            for sql in before:
                plain.execute(sql)
            for (stmt, params), cursor in zip(items, cursors, strict=False):
                cursor.execute(stmt.sql, stmt.bind(params))
            for sql in after:
                plain.execute(sql)
        # Counted once the pipeline is through: a connection found dead before that ran nothing that
        # the retry could not run again (see ``transaction``).
        self.statements_run += len(items)
        out: list[list[Row]] = []
        for (stmt, _), cursor in zip(items, cursors, strict=False):
            # Whether it returned rows, from the result's column count: ``description`` would build
            # a Column object per column, for every statement of every pipeline.
            result = cursor.pgresult
            rows = cursor.fetchall() if result is not None and result.nfields else []
            names = stmt.columns(cursor) if rows else ()
            out.append([dict(zip(names, row, strict=True)) for row in rows])
            if kept is None:
                cursor.close()
        return out


class LentTx(Tx):
    """A transaction on a connection an app's open transaction lends (``hosts.py``): its batches run
    one statement after the other, never pipelined nor framed (a framed ``COMMIT`` would commit the
    app's transaction)."""

    __slots__ = ()

    def batch(
        self, items: Sequence[tuple[Prepared, Mapping[str, Any]]], *, framed: Frame | None = None
    ) -> list[list[Row]]:
        return [self.all(stmt, params) for stmt, params in items]


def on_lent(
    connections: Connections, loan: contextlib.AbstractContextManager[Any], work: Callable[[Tx], T]
) -> T:
    """Run ``work`` on the connection ``loan`` lends, inside the savepoint it opens: the writes commit
    with the app's transaction (or roll back with it), not here. Errors are raised as ``transaction``
    raises them."""
    dbapi_error = connections.engine.dialect.loaded_dbapi.Error
    try:
        with loan as connection:
            cursor = connection.cursor()
            try:
                return work(LentTx(cursor))
            finally:
                cursor.close()
    except dbapi_error as exc:
        refused = storage_refusal(exc, connections.shown_url)
        if refused is not None:
            raise refused from exc
        raise sa.exc.DBAPIError.instance(None, None, exc, dbapi_error) from exc


class Connections:
    """Where a transaction gets its driver connection: out of the engine's pool for each transaction,
    or, with ``per_thread`` (SQLite), kept by each thread from one transaction to the next.

    Why keep them: the pool's checkout and check-in cost about a third of a whole SQLite
    transaction, and a SQLite connection is only an open file. A PostgreSQL connection is a server
    process, so those go back to the pool after each transaction, for other threads to use.

    A kept connection keeps its driver connection and one cursor too, which every transaction on it
    uses, its ``BEGIN`` included: a SQLite cursor is reusable once its rows are read (``Tx`` reads
    them all), and a new one per transaction, with one more inside ``Connection.execute``, was a
    cost of every transaction. Only one transaction at a time runs on a thread's connection. A
    pooled connection keeps its cursor in the pool's ``info`` for the same reason (psycopg builds a
    cursor in Python), and one transaction at a time holds it out of the pool.

    Between transactions a pooled connection waits in this process's idle list, for any thread, rather
    than going back through the pool: the pool's checkout and check-in (its bookkeeping, its reset)
    cost about a tenth of an in-process PostgreSQL unwind's CPU. No thread holds one between its
    transactions (a hook runs with none). The list keeps at most as many as the pool keeps idle, and
    only while no more are out of the pool than it keeps (past that, a thread may be waiting at the
    pool's limit: the connection goes back to the pool for it); each is checked clean (no transaction
    open) before it goes there, else handed back to the pool, which rolls it back."""

    def __init__(self, engine: sa.Engine, policy: DialectPolicy) -> None:
        self.engine = engine
        self.policy = policy
        self.shown_url = engine.url.render_as_string(hide_password=True)  # for errors: no password
        self._local = threading.local() if policy.keeps_connection_per_thread else None
        # ``policy.autocommits(atomic=...)`` for False and True, asked once: it is fixed per dialect.
        self.autocommits = (policy.autocommits(atomic=False), policy.autocommits(atomic=True))
        self._kept: weakref.WeakSet[_Kept] = weakref.WeakSet()
        self.returns_to_pool = self._local is None
        # Pooled connections between transactions, as (pool connection, driver connection, cursor),
        # last in first out; those of the process that made the list (a forked child starts its own).
        self._idle: list[tuple[Any, Any, Any]] = []
        self._idle_pid = process_id.current()
        self._inherited: list[list[tuple[Any, Any, Any]]] = []
        size = getattr(engine.pool, "size", None)
        self._idle_max = size() if callable(size) else 0
        # Where the journal's writers queue for SQLite's one write lock (write_gate.py); None: no queue.
        self.write_gate: WriteGate | None = policy.write_gate(engine)

    def take(self) -> tuple[Any, Any, Any]:
        """A connection for one transaction: the pool's, its driver connection, and the cursor kept
        with it (None if it has none yet: the transaction asks ``cursor_for``)."""
        local = self._local
        kept: _Kept | None = None if local is None else getattr(local, "kept", None)
        if kept is not None:
            if kept.pid == process_id.current() and kept.raw is not None:
                return kept.raw, kept.driver, kept.cursor
            kept.raw = None  # inherited across a fork: the parent's to close, not ours
        elif self._idle:
            if self._idle_pid == process_id.current():
                try:
                    return self._idle.pop()
                except IndexError:  # another thread took the last one meanwhile
                    pass
            else:  # inherited across a fork: the parent's connections, never this child's to use
                self._empty_idle()
        error = self.engine.dialect.loaded_dbapi.Error
        try:
            raw = self.engine.raw_connection()
        except error as exc:  # the pool hands the driver's own error through: name it ours
            raise sa.exc.DBAPIError.instance(None, None, exc, error) from exc
        driver: Any = raw.driver_connection
        if local is None:
            return raw, driver, raw.info.get(_CURSOR)
        fresh = local.kept = _Kept(raw, driver, driver.cursor())
        self._kept.add(fresh)
        return raw, driver, fresh.cursor

    def cursor_for(self, raw: Any, driver: Any) -> Any:
        """A new cursor on a pooled connection, kept with it for its later transactions: the pool's
        ``info`` belongs to the driver connection and is emptied when that connection is replaced."""
        cursor = driver.cursor()
        if self.returns_to_pool:
            raw.info[_CURSOR] = cursor
        return cursor

    def give_back(self, raw: Any, driver: Any, cursor: Any) -> None:
        """The end of a transaction on a pooled connection: to the idle list if it is clean and the
        list has room, else back to the pool (which also rolls back anything left open)."""
        if not self.returns_to_pool:
            return
        idle = self._idle
        if (
            len(idle) < self._idle_max
            and self._idle_pid == process_id.current()
            and self._pool_within_its_size()
            and self.policy.is_clean(driver)
        ):
            idle.append((raw, driver, cursor))
        else:
            self._to_pool(raw, driver)

    def _to_pool(self, raw: Any, driver: Any) -> None:
        """Back to the engine's pool, as it expects a connection (``for_the_pool``), else dropped."""
        if self.policy.for_the_pool(driver):
            raw.close()
        else:
            raw.invalidate()

    def _pool_within_its_size(self) -> bool:
        """Whether no more connections are out of the pool than it keeps: past that (overflow), a
        thread may be waiting at the pool's limit for one to come back, so it goes back there."""
        pool: Any = self.engine.pool  # read each time: ``engine.dispose()`` puts a new pool in its place
        try:
            return bool(pool.checkedout() <= pool.size())
        except AttributeError:  # a pool that keeps no count (only a sized pool's come to the idle list)
            return False

    def discard(self, raw: Any, exc: BaseException) -> None:
        """Drop a dead connection and every pooled sibling: a database restart kills them all."""
        raw.invalidate(exc)
        if self._local is not None:
            self._local.kept = None
        for sibling, _driver, _cursor in self._empty_idle():
            with contextlib.suppress(Exception):
                sibling.invalidate(exc)
        self.engine.pool.dispose()

    def close(self) -> None:
        """Give every kept and idle connection back (the journal is closing)."""
        for kept in list(self._kept):
            kept.release()
        for raw, driver, _cursor in self._empty_idle():
            with contextlib.suppress(Exception):
                self._to_pool(raw, driver)
        if self.write_gate is not None:
            self.write_gate.close()

    def _empty_idle(self) -> list[tuple[Any, Any, Any]]:
        """This process's idle connections, taken out of the list; a parent's (inherited across a
        fork) are kept alive untouched instead: dropped, the pool would take them back."""
        idle, self._idle = self._idle, []
        if self._idle_pid != process_id.current():
            self._inherited.append(idle)
            self._idle_pid = process_id.current()
            return []
        return idle


_CURSOR = "saga_worker.cursor"  # the key of a pooled connection's kept cursor in the pool's ``info``
_PIPELINE_CURSORS = "saga_worker.pipeline_cursors"  # and of its pipelines' cursors (``Tx.batch``)


class _Kept:
    """A thread's kept connection (with its driver connection and cursor); given back to the pool
    when the thread ends (its locals go)."""

    __slots__ = ("raw", "driver", "cursor", "pid", "__weakref__")

    def __init__(self, raw: Any, driver: Any, cursor: Any) -> None:
        self.raw, self.driver, self.cursor, self.pid = raw, driver, cursor, process_id.current()

    def release(self) -> None:
        raw, self.raw = self.raw, None
        if raw is not None and self.pid == process_id.current():
            with contextlib.suppress(Exception):
                raw.close()

    def __del__(self) -> None:
        self.release()


def transaction(
    connections: Connections,
    work: Callable[[Tx], T],
    *,
    write: bool,
    atomic: bool = True,
    durable: bool = False,
) -> T:
    """Run ``work`` in a transaction on a driver connection; commit if it returns.

    ``durable``: on SQLite, whose connections run WAL with ``synchronous=NORMAL`` (a commit is not
    fsynced until the next checkpoint), this one commit runs with ``synchronous=FULL``, which in WAL
    mode syncs the WAL before the commit returns (and with it every commit before it: the WAL is
    append-only). On PostgreSQL the journal's sessions commit with ``synchronous_commit=off`` (the WAL
    writer flushes within a few hundred milliseconds), and a durable transaction waits for the flush as
    the server is configured to (``SET LOCAL synchronous_commit TO DEFAULT``).

    ``atomic=False`` runs each statement as its own transaction (autocommit): for work whose
    statements are each atomic on their own and whose logic already allows for other writers
    between them (insert-if-absent then read, compare-and-set then read, plain reads), where
    ``BEGIN`` and ``COMMIT`` would only add two round trips to a PostgreSQL server, and two
    statements to SQLite's few microseconds of work. Each statement sees a fresh snapshot, as under
    PostgreSQL's READ COMMITTED. An atomic write transaction on SQLite is ``BEGIN IMMEDIATE`` (the
    write lock up front, so a read-then-write can never be overtaken between its read and its write);
    a single SQLite statement that writes takes that lock before it reads anything, as a whole.

    ``work`` may run twice: once more, on a fresh connection, if the first attempt's connection
    turned out dead before any statement of it completed."""
    policy = connections.policy
    dbapi_error = connections.engine.dialect.loaded_dbapi.Error
    autocommit = connections.autocommits[atomic] and not durable  # a durable commit is a transaction's
    gate = connections.write_gate if write else None
    for attempt in (1, 2):
        # Held from before BEGIN until after the commit or rollback (write_gate.py).
        gated = gate.enter() if gate is not None else -1
        try:
            raw, driver, cursor = connections.take()
            tx: Tx | None = None
            try:
                if cursor is None:
                    cursor = connections.cursor_for(raw, driver)
                policy.begin(driver, cursor, write=write, autocommit=autocommit, durable=durable)
                tx = Tx(cursor, raw.info if connections.returns_to_pool else None)
                result = work(tx)
                # What _commit, policy.after and give_back do, written out: this runs for every transaction.
                if autocommit:
                    policy.end_autocommit(driver, cursor)  # each statement committed itself
                else:
                    policy.commit(driver, cursor)
                if durable:
                    policy.after(driver, cursor, durable=durable)
                if connections.returns_to_pool:
                    connections.give_back(raw, driver, cursor)
                return result
            except dbapi_error as exc:
                nothing_ran = attempt == 1 and (tx is None or tx.statements_run == 0)
                error = _driver_error(
                    connections, exc, (raw, driver, cursor), autocommit, durable, nothing_ran
                )
                if error is None:
                    continue  # nothing reached the database: the same work on a fresh connection
                raise error from exc
            except BaseException:
                _abandon(connections, raw, driver, cursor, autocommit=autocommit, durable=durable)
                raise
        finally:
            if gate is not None:
                gate.leave(gated)
    raise AssertionError("unreachable")  # pragma: no cover


def _driver_error(
    connections: Connections,
    exc: DBAPIModule.Error,
    kept: tuple[Any, Any, Any],
    autocommit: bool,
    durable: bool,
    nothing_ran: bool,
) -> Exception | None:
    """After the driver raised ``exc``: the connection discarded if it is dead, else rolled back and
    given back; then None if the work may run again on a fresh connection (the connection was dead
    and ``nothing_ran`` on it), else the error to raise: a storage refusal said as such, or the
    driver's error as SQLAlchemy's (``connection_invalidated`` when the connection was dead)."""
    raw, driver, cursor = kept
    dialect = connections.engine.dialect
    gone = bool(dialect.is_disconnect(exc, driver, None))
    if gone:
        connections.discard(raw, exc)
    else:
        _abandon(connections, raw, driver, cursor, autocommit=autocommit, durable=durable)
    if gone and nothing_ran:
        return None
    refused = storage_refusal(exc, connections.shown_url)
    if refused is not None:
        return refused
    return sa.exc.DBAPIError.instance(
        None, None, exc, dialect.loaded_dbapi.Error, connection_invalidated=gone
    )


def _abandon(
    connections: Connections, raw: Any, driver: Any, cursor: Any, *, autocommit: bool, durable: bool
) -> None:
    """Roll back a failed transaction on a live connection and give the connection back."""
    _rollback(connections.policy, driver, cursor, autocommit)
    if durable:
        connections.policy.after(driver, cursor, durable=durable)
    connections.give_back(raw, driver, cursor)


def _rollback(policy: DialectPolicy, driver: Any, cursor: Any, autocommit: bool) -> None:
    """Leave the connection idle (no transaction open), for the idle list or the pool (``give_back``)."""
    with contextlib.suppress(Exception):  # the original error is the one worth raising
        if autocommit:
            policy.end_autocommit(driver, cursor)
        else:
            driver.rollback()
