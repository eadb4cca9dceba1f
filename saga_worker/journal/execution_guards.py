"""Execution guards for SQL journals: held while a tool's ``execute`` runs, released when the holder dies.

SQLite: an open-file-description byte lock on one file next to the database (Linux ``F_OFD_SETLK``);
the kernel drops it when the file is closed, also by a dying process, and by nothing else: a free
guard proves its holder is gone. PostgreSQL: a session advisory lock, on a connection held for the
guard's life; the server drops it when that connection closes, also when the process is killed, but
also when the connection alone is cut (``pg_terminate_backend``, a failover, a proxy timeout) while
its holder still executes. So on PostgreSQL the lock only keeps two live processes apart; whether a
``running`` record's executor is gone is the record's execute lease's to say (``Journal.executor_gone``).
Both are keyed by a 63-bit hash of ``(run_id, suffix)``.
"""

from __future__ import annotations

import errno
import hashlib
import os
import struct
from dataclasses import dataclass

import sqlalchemy as sa

try:
    import fcntl

    _OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None)
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]
    _OFD_SETLK = None


def guard_key(run_id: str, suffix: str) -> int:
    """A stable signed 63-bit number for one tool record (PostgreSQL bigint, file byte offset)."""
    digest = hashlib.sha256(f"saga-exec\0{run_id}\0{suffix}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass
class PgGuard:
    conn: sa.Connection
    key: int


def pg_try(engine: sa.Engine, run_id: str, suffix: str) -> PgGuard | None:
    key = guard_key(run_id, suffix)
    # Autocommit: the connection sits idle for as long as execute runs, never idle in a transaction.
    conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        got = conn.execute(sa.select(sa.func.pg_try_advisory_lock(key))).scalar()
    except BaseException:
        conn.close()
        raise
    if not got:
        conn.close()
        return None
    return PgGuard(conn, key)


def pg_release(guard: PgGuard) -> None:
    try:
        guard.conn.execute(sa.select(sa.func.pg_advisory_unlock(guard.key)))
    except sa.exc.DBAPIError:
        guard.conn.invalidate()  # a broken connection has lost the lock already; never pool it
    finally:
        guard.conn.close()


def file_guards_supported() -> bool:
    return _OFD_SETLK is not None


def file_try(path: str, run_id: str, suffix: str) -> int | None:
    """Lock one byte of ``path`` at the record's offset; the open descriptor is the token."""
    assert fcntl is not None and _OFD_SETLK is not None
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    lock = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, guard_key(run_id, suffix), 1, 0)
    try:
        fcntl.fcntl(fd, _OFD_SETLK, lock)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


def file_release(fd: int) -> None:
    os.close(fd)  # closing the descriptor drops its lock
