"""Journals: where runs, decisions, tool records and compensation claims live."""

from __future__ import annotations

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
    if not isinstance(url, str) or not url.strip():
        raise JournalError(f"journal URL must be a non-empty string, got {url!r}", url=url)
    if url.startswith("memory:"):
        return MemoryJournal(url)
    from ..redact import redact_text, redact_url
    from .sql import SqlJournal  # SQLAlchemy is only imported for SQL journals

    try:
        return SqlJournal(url, migrate_schema=migrate, create=create)
    except JournalError:
        raise
    except Exception as exc:  # sqlalchemy.exc.ArgumentError and friends for a URL that does not parse
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
]
