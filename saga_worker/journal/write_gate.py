"""The SQLite journal's writers take turns at a file lock the kernel hands on, not at SQLite's busy handler.

Why: SQLite has one writer at a time, and a writer that finds the lock taken calls its busy handler,
which sleeps and tries again with a growing delay (1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, then
100 ms), while a journal transaction holds the lock for tens of microseconds. With 8 or 32
processes unwinding on one journal, the waiters slept far longer than anyone held the lock: most of
the time nobody wrote. Here a write transaction first takes an exclusive ``flock`` on a file next to
the database and keeps it until it has committed or rolled back; a writer that waits for it blocks
in the kernel and wakes the moment the holder lets go. SQLite's own lock still decides who writes
(every writer that does not take this gate, another release's or an app's, waits as before); the
gate only makes the journal's writers queue instead of sleeping.

Each thread takes the gate through an open file of its own (``flock`` locks belong to an open
file, so two threads of one process wait for each other as two processes do); a forked child opens
its own, never the parent's (unlocking an inherited one would unlock the parent's), and closes the
copies it inherited (``_close_inherited``). No deadlock: a writer never waits for the gate while
holding SQLite's lock (one journal transaction at a time per thread, and the gate is taken before
``BEGIN``), and a holder waits only for SQLite's lock, which its busy timeout bounds. Where the
file cannot be opened (a read-only folder) or ``flock`` is missing (not POSIX), writers go straight
to SQLite's lock, as before.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref

from ..core import process_id

try:
    import fcntl
except ImportError:  # pragma: no cover - not on POSIX
    fcntl = None  # type: ignore[assignment]


class _Opened:
    """One thread's open gate file, closed when the thread ends (its locals go) or the journal closes."""

    __slots__ = ("fd", "pid", "__weakref__")

    def __init__(self, fd: int) -> None:
        self.fd, self.pid = fd, process_id.current()

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0 and self.pid == process_id.current():
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        self.close()


_ALL_OPENED: weakref.WeakSet[_Opened] = weakref.WeakSet()


def _close_inherited() -> None:
    """In a forked child, close the gate files it inherited. Their locks belong to the open file, which
    the child's copies keep open: a parent killed while holding the gate would otherwise leave it
    held for as long as its child lives, and every writer waiting."""
    for opened in list(_ALL_OPENED):
        fd, opened.fd = opened.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_inherited)


class WriteGate:
    """An exclusive ``flock`` on ``path``, held by one writer at a time across threads and processes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()
        self._opened: weakref.WeakSet[_Opened] = weakref.WeakSet()
        self._unusable = False

    def enter(self) -> int:
        """Wait for the gate and hold it: the descriptor to give ``leave``, or -1 if there is no gate."""
        opened: _Opened | None = getattr(self._local, "opened", None)
        if opened is None or opened.pid != process_id.current() or opened.fd < 0:
            opened = self._open()
            if opened is None:
                return -1
        fcntl.flock(opened.fd, fcntl.LOCK_EX)  # waits without the GIL
        return opened.fd

    def leave(self, fd: int) -> None:
        if fd >= 0:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        for opened in list(self._opened):
            opened.close()

    def _open(self) -> _Opened | None:
        if self._unusable:
            return None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            self._unusable = True  # a read-only folder, say: SQLite's own lock alone, as before
            return None
        opened = self._local.opened = _Opened(fd)
        self._opened.add(opened)
        _ALL_OPENED.add(opened)
        return opened


def for_sqlite_file(database: str | None) -> WriteGate | None:
    """The gate of the SQLite journal at ``database`` (a file path), or None where there can be none."""
    if fcntl is None or not database or database == ":memory:" or database.startswith("file:"):
        return None
    return WriteGate(f"{database}.write-gate")
