"""A database's refusals that are about its storage, not about the work: said in words an operator
can act on (:class:`~saga_worker.JournalUnavailableError`) rather than as the driver's text.

A full or failing disk, a read-only database (a standby, ``default_transaction_read_only``), a
server out of a resource: nothing is wrong with the statement, and the same work succeeds once the
cause is fixed (every journal write is insert-if-absent or a compare-and-set), so the saga tasks
retry these with backoff. Any other driver error keeps SQLAlchemy's class (``driver.py``).
"""

from __future__ import annotations

from ..errors import JournalUnavailableError

# SQLite's primary result codes (an extended code keeps its primary in the low byte).
_SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_FULL, _SQLITE_CANTOPEN = 8, 10, 13, 14
_SQLITE_WHAT = {
    _SQLITE_FULL: (
        "the disk holding it is full",
        "free space on that disk (or raise the file system's quota); the work is retried",
    ),
    _SQLITE_IOERR: (
        "the disk refused a read or write (a full disk, or a failing one)",
        "free space on that disk or check it; the work is retried",
    ),
    _SQLITE_READONLY: (
        "its file cannot be written (a read-only file, folder or mount)",
        "give the worker's user write access to the file and its folder",
    ),
    _SQLITE_CANTOPEN: (
        "its file, or its -wal or -shm file beside it, cannot be opened",
        "check the folder exists and the worker's user may write there",
    ),
}
# PostgreSQL's SQLSTATEs: a read-only transaction, then class 53 (insufficient resources).
_PG_READ_ONLY = "25006"
_PG_WHAT = {
    _PG_READ_ONLY: (
        "the database is read-only (a standby, or default_transaction_read_only is on)",
        "point SAGA_JOURNAL_URL at the primary, writable server; the work is retried",
    ),
    "53100": (
        "the database server's disk is full",
        "free space on the server's disk; the work is retried",
    ),
    "53200": ("the database server is out of memory", "the work is retried"),
    "53300": (
        "the database server takes no more connections",
        "raise its max_connections or lower the workers' concurrency; the work is retried",
    ),
}


def storage_refusal(driver_error: BaseException, shown_url: str) -> JournalUnavailableError | None:
    """The error to raise instead of ``driver_error`` (the DBAPI's own exception) when it is a refusal
    of the journal's storage; None when it is not (it is then raised as SQLAlchemy's)."""
    what = _what(driver_error)
    if what is None:
        return None
    cause, todo = what
    text = (
        str(driver_error).strip().splitlines()[0]
        if str(driver_error).strip()
        else type(driver_error).__name__
    )
    return JournalUnavailableError(
        f"journal {shown_url} cannot be written: {cause} ({text}): {todo}", url=shown_url
    )


def _what(driver_error: BaseException) -> tuple[str, str] | None:
    code = getattr(driver_error, "sqlite_errorcode", None)
    if isinstance(code, int):
        return _SQLITE_WHAT.get(code & 0xFF)
    state = getattr(driver_error, "sqlstate", None)
    if isinstance(state, str):
        return _PG_WHAT.get(state)
    return None


__all__ = ["storage_refusal"]
