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
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import sqlalchemy as sa

from ...recording import transactions

# The app transaction this thread's journal joined: (alias, its outermost atomic block or _UNMANAGED).
# Joined as long as that block is open (autocommit off: as long as it is off).
_joined = threading.local()
_UNMANAGED = object()  # a transaction of the app's with autocommit off, outside atomic()


def journal_alias() -> str | None:
    """The Django database alias the journal lives in, or None (``SAGA_JOURNAL_URL`` elsewhere)."""
    from ...settings import get_settings

    settings = get_settings()
    if settings.journal_url is not None:
        return None
    alias = getattr(settings, "database", None)
    return alias if isinstance(alias, str) else None


def same_database(url: sa.URL, alias: str) -> bool:
    """Is the journal at ``url`` Django's database ``alias``?"""
    from . import database_url

    theirs = sa.engine.make_url(database_url(alias))
    if url.get_backend_name() != theirs.get_backend_name():
        return False
    if url.get_backend_name() == "sqlite":
        return os.path.realpath(url.database or "") == os.path.realpath(theirs.database or "")
    return (url.host, url.port or 5432, url.database) == (theirs.host, theirs.port or 5432, theirs.database)


def open_app_transaction(conn: Any) -> object | None:
    """The app's open transaction on Django connection ``conn``: its outermost atomic block, or the
    transaction of a connection whose autocommit is off; None in autocommit."""
    if conn.connection is None:
        return None
    if conn.in_atomic_block:
        blocks = list(getattr(conn, "atomic_blocks", ()))
        return blocks[0] if blocks else _UNMANAGED
    return None if conn.get_autocommit() else _UNMANAGED


def joinable(alias: str) -> bool:
    """May a joining call leave out the app's transaction on ``alias`` (it is the journal's)?"""
    return alias == journal_alias()


def lend(url: sa.URL) -> AbstractContextManager[Any] | None:
    """The host: Django's connection to ``SAGA_DATABASE``, lent while this thread joins its open
    transaction (an in_transaction call made in it, and everything after it there; always on SQLite)."""
    from django.db import connections

    alias = journal_alias()
    if alias is None or alias not in connections:
        return None
    conn = connections[alias]
    txn = open_app_transaction(conn)
    if txn is None:
        return None
    joined = getattr(_joined, "txn", None)
    again = joined is not None and joined[0] == alias and joined[1] is txn
    if not (again or transactions.is_joining() or conn.vendor == "sqlite"):
        return None
    if not same_database(url, alias):
        return None
    _joined.txn = (alias, txn)  # held, not its id: a later block must not pass for this one
    return _savepoint(alias)


@contextmanager
def _savepoint(alias: str) -> Iterator[Any]:
    from django.db import connections, transaction

    conn = connections[alias]
    raw = conn.connection
    if conn.vendor == "sqlite" and not raw.in_transaction:
        # Autocommit off outside atomic(): Python's sqlite3 has not begun the app's transaction yet
        # (it begins one before a write only), and a SAVEPOINT outside one is a transaction of its
        # own, committed by its RELEASE. Begin the app's, which it then commits or rolls back.
        raw.execute("BEGIN")
    with transaction.atomic(using=alias):
        yield raw


__all__ = ["journal_alias", "joinable", "lend", "open_app_transaction", "same_database"]
