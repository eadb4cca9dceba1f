"""The app's open transaction vs the journal (docs/guides/django.md: never ``succeeded`` for an
effect that rolled back).

The journal records a call on its own connection. A tool whose effect is a write in the app's open
transaction (a Django view under ``atomic()`` or ``ATOMIC_REQUESTS``, a SQLAlchemy session that has
not committed) would be journaled ``succeeded`` although its effect may still roll back, and an
unwind would then "refund" a payment that never existed. So a side-effecting call made while the app
holds a transaction open on another connection is refused before anything is claimed or executed,
and the error says what to do instead: send the step once the transaction has committed
(``transaction.on_commit``), or make the call outside the transaction.

Which transactions count is told by *probes*: ``saga_worker.contrib.django`` registers one for
Django's connections, :func:`watch_sqlalchemy` one for a SQLAlchemy engine of the app's.

One kind of call may be made inside the app's transaction: a ``Tool(in_transaction=True)`` whose
effect is a write to the journal's own database, while the journal can *join* that transaction
(``journal/hosts.py``: Django's ``atomic()`` on ``SAGA_DATABASE``). Such a call is settled under
:func:`joining`: the probes leave out the transaction it joins, and the journal writes the call's
rows (its run, decision, gate, claim and record) in it, so its effect and its record commit together.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import OpenTransactionError

# A probe answers "which open app transaction is this thread inside?" (a description) or None.
Probe = Callable[[], str | None]
_probes: list[Probe] = []
_lock = threading.Lock()


def add_probe(probe: Probe) -> None:
    """Refuse side-effecting calls while ``probe()`` names an open transaction (idempotent)."""
    with _lock:
        if probe not in _probes:
            _probes.append(probe)


def remove_probe(probe: Probe) -> None:
    with _lock:
        if probe in _probes:
            _probes.remove(probe)


def open_transaction() -> str | None:
    """The first open app transaction a probe sees in this thread, or None."""
    for probe in list(_probes):
        seen = probe()
        if seen:
            return seen
    return None


_joining = threading.local()


@contextmanager
def joining(journal: object) -> Iterator[None]:
    """Settle a ``Tool(in_transaction=True)`` call on ``journal``: it joins the app's open
    transaction on its own database, if there is one it can join (a host says so), and probes leave
    that one out (they ask :func:`joining_journal` which journal it is)."""
    before = getattr(_joining, "journal", None)
    _joining.journal = journal
    try:
        yield
    finally:
        _joining.journal = before


def joining_journal() -> object | None:
    """The journal of the call this thread settles under :func:`joining`, or None."""
    return getattr(_joining, "journal", None)


def is_joining() -> bool:
    """Is this thread settling a call that joins the app's transaction (:func:`joining`)?"""
    return joining_journal() is not None


def refuse_inside_open_transaction(run_id: str, tool_call_id: str, tool_name: str) -> None:
    seen = open_transaction()
    if seen is not None:
        raise OpenTransactionError(run_id, tool_call_id, tool_name, seen)


class _SqlAlchemyWatch:
    """Counts, per thread, the transactions open on one engine's connections."""

    def __init__(self, engine: Any, name: str) -> None:
        self.engine, self.name = engine, name
        self.local = threading.local()

    def _delta(self, step: int) -> None:
        self.local.open = max(0, getattr(self.local, "open", 0) + step)

    def begin(self, conn: Any) -> None:
        self._delta(+1)

    def end(self, conn: Any) -> None:
        self._delta(-1)

    def __call__(self) -> str | None:
        if getattr(self.local, "open", 0) > 0:
            return f"a transaction of SQLAlchemy engine {self.name!r}"
        return None


def watch_sqlalchemy(engine: Any, *, name: str | None = None) -> Probe:
    """Refuse side-effecting calls made while a transaction of ``engine`` (the app's own, a ``Session``
    bound to it included) is open in the calling thread. Returns the probe (for :func:`remove_probe`)."""
    import sqlalchemy as sa

    watch = _SqlAlchemyWatch(engine, name or sa.engine.make_url(engine.url).render_as_string())
    sa.event.listen(engine, "begin", watch.begin)
    sa.event.listen(engine, "commit", watch.end)
    sa.event.listen(engine, "rollback", watch.end)
    add_probe(watch)
    return watch


__all__ = [
    "Probe",
    "add_probe",
    "is_joining",
    "joining",
    "joining_journal",
    "open_transaction",
    "refuse_inside_open_transaction",
    "remove_probe",
    "watch_sqlalchemy",
]
