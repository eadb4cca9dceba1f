"""Journals: where runs, decisions, tool records and compensation claims live."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import JournalError
from .base import Journal
from .memory import MemoryJournal
from .records import (
    ClaimStatus,
    CompensationClaim,
    RecordStatus,
    RunInfo,
    RunStatus,
    ToolRecord,
    UnwindState,
)


def open_journal(url: str, *, migrate: bool | None = None, create: bool = True) -> Journal:
    """Open the journal a URL names: ``memory://``, ``sqlite:///path.db`` or ``postgresql+psycopg://…``.

    SQLite journals are migrated to the newest schema on open; PostgreSQL ones only with
    ``migrate=True`` (production runs ``saga-worker db upgrade`` once, before the workers).
    ``create=False`` (what commands that read use) opens only a journal that exists: a SQLite path
    with no file, or a database with no saga-worker schema, is a :class:`JournalError`, nothing made.
    """
    _check_url(url)
    if url.startswith("memory:"):
        return MemoryJournal(url)
    from .sql import SqlJournal  # SQLAlchemy is only imported for SQL journals

    with _named_errors(url):
        return SqlJournal(url, migrate_schema=migrate, create=create)


def prepare_journal(url: str) -> None:
    """Do ahead what opening a journal at ``url`` costs but its connections: import its database
    driver and the migrations' machinery, compile its statements. A Celery worker's main process does
    it before its pool forks, so that no pool child pays it (about a quarter of a second here) on its
    first task; every journal this process or its children open at such a URL afterwards shares the
    compiled statements. Opens no connection; a URL no journal can open raises :class:`JournalError`
    as ``open_journal`` would."""
    _check_url(url)
    if url.startswith("memory:"):
        return
    from .sql import prepare

    with _named_errors(url):
        prepare(url)


def _check_url(url: object) -> None:
    if not isinstance(url, str) or not url.strip():
        raise JournalError(f"journal URL must be a non-empty string, got {url!r}", url=url)


@contextmanager
def _named_errors(url: str) -> Iterator[None]:
    """Any error but a JournalError (sqlalchemy.exc.ArgumentError and friends for a URL that does not
    parse) as a JournalError naming the journal, never with a password."""
    from ..core.redact import redact_text, redact_url

    try:
        yield
    except JournalError:
        raise
    except Exception as exc:
        shown = redact_url(url)  # never a password in a message, whether the URL parses or not
        raise JournalError(f"cannot open journal {shown!r}: {redact_text(str(exc))}", url=shown) from exc


__all__ = [
    "ClaimStatus",
    "CompensationClaim",
    "Journal",
    "MemoryJournal",
    "RecordStatus",
    "RunInfo",
    "RunStatus",
    "ToolRecord",
    "UnwindState",
    "open_journal",
    "prepare_journal",
]
