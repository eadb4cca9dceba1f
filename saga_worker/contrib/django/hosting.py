"""The journal joins the app's open transaction on ``SAGA_DATABASE`` (``journal/hosts.py``'s host).

Inside ``atomic()`` (or with autocommit off) on the database the journal lives in, a
``Tool(in_transaction=True)`` call's rows (its run, decision, gate, claim and record) are written on
Django's own connection, each journal transaction in a savepoint (``transaction.atomic``), so the
tool may write with the ORM and its effect and its record commit, or roll back, together.

Once joined, the rest of the journal's work in that thread joins too, until the app's transaction
ends: the joined rows are locked by it (the run's row, by the tombstone gate), and the journal's own
connection, waiting for them in the same thread, would wait for ever. On SQLite the journal always
joins an open transaction of the app's on its file: one writer at a time, and the app's transaction
may hold the write lock the journal's own connection would wait for ("database is locked").

An unwind's writes (its tombstone, claims, leases) are the exception: lent a connection here, the
journal refuses them before anything is written (``SqlPlumbing._write``'s ``alone``), as they must
commit on their own and the journal's own connection would wait as above.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import sqlalchemy as sa
from django.db import connections, transaction

from ...errors import JournalError
from ...recording import transactions
from ...settings import get_settings

# The PostgreSQL transaction this thread's journal joined: (alias, its transaction id). Joined for as
# long as that transaction is open: a later one (after a commit, a rollback) has another id.
_joined = threading.local()


def journal_alias() -> str | None:
    """The Django database alias the journal lives in, or None (``SAGA_JOURNAL_URL`` elsewhere)."""
    settings = get_settings()
    if settings.journal_url is not None:
        return None
    alias = getattr(settings, "database", None)
    return alias if isinstance(alias, str) else None


def same_database(url: sa.URL, alias: str) -> bool:
    """Is the journal at ``url`` Django's database ``alias``?"""
    from . import database_url

    try:
        theirs = sa.engine.make_url(database_url(alias))
    except JournalError:  # a database no journal can be in (in-memory SQLite, another engine)
        return False
    if url.get_backend_name() != theirs.get_backend_name():
        return False
    if url.get_backend_name() == "sqlite":
        return os.path.realpath(url.database or "") == os.path.realpath(theirs.database or "")
    return (url.host, url.port or 5432, url.database) == (theirs.host, theirs.port or 5432, theirs.database)


def in_app_transaction(conn: Any) -> bool:
    """Has the app a transaction open on Django connection ``conn`` (``atomic()``, the test case's
    included, or autocommit off)?"""
    if conn.connection is None:
        return False
    return bool(conn.in_atomic_block) or not conn.get_autocommit()


def transaction_id(raw: Any) -> str | None:
    """The id of the PostgreSQL transaction open on driver connection ``raw``, once it has written."""
    with raw.cursor() as cursor:
        cursor.execute("SELECT txid_current_if_assigned()")
        row = cursor.fetchone()
    return None if row is None or row[0] is None else str(row[0])


def still_joined(alias: str, conn: Any) -> bool:
    """Is the transaction open on ``conn`` the one this thread's journal joined (and wrote in)?"""
    joined = getattr(_joined, "txn", None)
    if joined is None or joined[0] != alias:
        return False
    try:
        same = bool(transaction_id(conn.connection) == joined[1])
    except Exception:  # noqa: BLE001 - an aborted transaction: the journal's work fails in it, clearly
        return True
    if not same:
        _joined.txn = None  # that transaction has ended: this thread's journal work is its own again
    return same


def joinable(alias: str, journal: object) -> bool:
    """May a call joining on ``journal`` leave out the app's transaction on ``alias``: is ``journal``
    (a SQL journal's engine) Django's database ``alias``, the journal's?"""
    engine = getattr(journal, "engine", None)
    url = getattr(engine, "url", None)
    return alias == journal_alias() and isinstance(url, sa.URL) and same_database(url, alias)


def lend(url: sa.URL) -> AbstractContextManager[Any] | None:
    """The host: Django's connection to ``SAGA_DATABASE``, lent while this thread joins its open
    transaction (an in_transaction call made in it, and everything after it there; always on SQLite)."""
    sqlite = url.drivername.startswith("sqlite")
    if not (sqlite or transactions.is_joining() or getattr(_joined, "txn", None) is not None):
        return None  # every journal transaction asks: PostgreSQL's, with nothing joined, ends here
    alias = journal_alias()
    if alias is None:
        return None
    try:
        conn = connections[alias]
    except Exception:  # noqa: BLE001 - no such alias (ConnectionDoesNotExist): nothing to join
        return None
    if not in_app_transaction(conn):
        _joined.txn = None  # whatever this thread joined has ended
        return None
    if not (sqlite or transactions.is_joining() or still_joined(alias, conn)):
        return None
    if not same_database(url, alias):
        return None
    return _savepoint(alias, remember=not sqlite)


@contextmanager
def _savepoint(alias: str, *, remember: bool) -> Iterator[Any]:
    """A savepoint on Django's connection ``alias``, yielding its driver connection; ``remember``:
    the transaction's id is noted afterwards, so the journal's later work in it joins it too."""
    conn = connections[alias]
    raw = conn.connection
    if conn.vendor == "sqlite" and not raw.in_transaction:
        # Autocommit off outside atomic(): Python's sqlite3 has not begun the app's transaction yet
        # (it begins one before a write only), and a SAVEPOINT outside one is a transaction of its
        # own, committed by its RELEASE. Begin the app's, which it then commits or rolls back.
        raw.execute("BEGIN")
    try:
        with transaction.atomic(using=alias):
            yield raw
    finally:
        if remember:
            try:
                _joined.txn = (alias, transaction_id(raw))
            except Exception:  # noqa: BLE001 - an aborted transaction: what aborted it is the error to see
                _joined.txn = None


__all__ = ["in_app_transaction", "joinable", "journal_alias", "lend", "same_database", "still_joined"]
