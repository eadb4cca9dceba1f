"""An app's open transaction the journal joins: its transactions run on the app's connection.

A *host* (``saga_worker.contrib.django`` registers Django's) is asked, for each transaction of a SQL
journal, whether the calling thread has an open transaction of the app's on the journal's own
database that the journal's work must join. If so it lends the connection, as a context manager that
opens a savepoint around the work (rolled back alone if the work raises) and yields the DBAPI
connection; the work's writes then commit, or roll back, with the app's transaction. That is how a
``Tool(in_transaction=True)`` call made inside Django's ``atomic()`` has its effect (the ORM's) and its
record commit together: the host decides which work joins (docs/guides/django.md).

A loan does nothing until it is entered, so the journal may refuse it: an unwind's writes (a
tombstone, a compensation's claim or lease) must commit on their own, and are refused, with
``UnwindInTransactionError``, before anything is written wherever a host would lend a connection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import sqlalchemy as sa

# Given the journal's URL: a context manager lending this thread's app connection, or None.
Host = Callable[[sa.URL], AbstractContextManager[Any] | None]
_hosts: list[Host] = []
_lock = threading.Lock()


def add_host(host: Host) -> None:
    """Ask ``host`` before each transaction of a SQL journal (idempotent)."""
    with _lock:
        if host not in _hosts:
            _hosts.append(host)


def remove_host(host: Host) -> None:
    with _lock:
        if host in _hosts:
            _hosts.remove(host)


def lent(url: sa.URL) -> AbstractContextManager[Any] | None:
    """The first host's loan of a connection for a journal at ``url``, or None (the journal's own)."""
    if not _hosts:  # every transaction asks: nothing to copy when no app registered one
        return None
    for host in list(_hosts):
        loan = host(url)
        if loan is not None:
            return loan
    return None


__all__ = ["Host", "add_host", "lent", "remove_host"]
