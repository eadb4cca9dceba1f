"""Group commit: concurrent unwinds in one process share the SQLite journal's commits.

Why: SQLite has one writer at a time, and an unwind's writes are short transactions whose fixed
costs (the write lock taken and handed on, ``BEGIN``, the commit's WAL append, the tombstone's
fsync) are most of their time. When threads of one process unwind at once, the one that finds no
commit under way leads: it takes every write that is ready, runs each in a savepoint of one
transaction on its own connection, commits once (synced if any of them must be), and only then
tells each waiting writer its result. A write that arrives meanwhile waits for the next commit,
which the first of them leads.

The safety rules hold for each write as for a transaction of its own: nobody hears its result
before the commit that holds it returned (so a claim is committed, visible to every process, before
its hook runs; an outcome before the report says it; a tombstone synced before the first hook:
the shared commit is synced whenever one write of it must be). A write that fails (its own error, a
constraint, a Python exception) is rolled back to its savepoint alone, and its caller gets the
error; the others' writes commit. Only a failure of the transaction as a whole (``BEGIN`` or
``COMMIT`` refused, a full disk that rolls everything back) fails every write of it, and none of
them committed.

Only writes whose work is the journal's own statements are grouped (``SqlPlumbing._write``'s
``grouped``: the unwind's hot path); a write that runs the app's code in the transaction (an
effect) keeps a transaction of its own. Alone (no other write waiting), a write runs exactly as an
ungrouped one: no savepoint, its own ``atomic``, no thread handed anything.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..core import process_id
from ..errors import JournalError
from . import driver

_MEMBER = "SAVEPOINT saga_group_member"
_MEMBER_RELEASE = "RELEASE SAVEPOINT saga_group_member"
_MEMBER_UNDO = "ROLLBACK TO SAVEPOINT saga_group_member"


class _Write:
    """One caller's write, waiting for (or part of) a shared commit."""

    __slots__ = ("work", "durable", "atomic", "done", "lead", "result", "error")

    def __init__(self, work: Callable[[driver.Tx], Any], durable: bool, atomic: bool) -> None:
        self.work, self.durable, self.atomic = work, durable, atomic
        self.done: threading.Event | None = None
        self.lead = False  # woken to lead the next commit, not with a result
        self.result: Any = None
        self.error: BaseException | None = None


class GroupCommit:
    """The writes waiting for one journal's next commit in this process, and whether one is under way."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._pid = process_id.current()
        self._lock = threading.Lock()
        self._waiting: list[_Write] = []
        self._leading = False

    def waiting(self) -> int:
        """How many writes wait for the next commit (for tests and the bench)."""
        return len(self._waiting)

    def write(
        self,
        connections: driver.Connections,
        work: Callable[[driver.Tx], Any],
        *,
        atomic: bool,
        durable: bool,
    ) -> Any:
        """``work``'s result once it is committed (as ``driver.transaction``), possibly with others'."""
        if self._pid != process_id.current():
            self._reset()  # forked: the parent's waiters and leader are not this process's
        mine = _Write(work, durable, atomic)
        with self._lock:
            if self._leading:
                mine.done = threading.Event()
                self._waiting.append(mine)
            else:
                self._leading = True
        if mine.done is not None:
            mine.done.wait()
            if not mine.lead:
                if mine.error is not None:
                    raise mine.error
                return mine.result
        return self._lead(connections, mine)

    def _lead(self, connections: driver.Connections, mine: _Write) -> Any:
        with self._lock:
            batch, self._waiting = [mine, *self._waiting], []
        try:
            if len(batch) == 1:
                return driver.transaction(
                    connections, work=mine.work, write=True, atomic=mine.atomic, durable=mine.durable
                )
            self._commit_together(connections, batch)
        finally:
            self._hand_on(batch)
        if mine.error is not None:
            raise mine.error
        return mine.result

    @staticmethod
    def _commit_together(connections: driver.Connections, batch: list[_Write]) -> None:
        """One transaction, each write in a savepoint of its own; every write's result or error set."""

        def together(tx: driver.Tx) -> None:
            for item in batch:  # run again from the start if the driver retries on a fresh connection
                item.result, item.error = None, None
            for item in batch:
                tx.plain(_MEMBER)
                try:
                    item.result = item.work(tx)
                except Exception as exc:  # this write's alone: undone, and its caller told
                    if not tx.connection.in_transaction:
                        raise  # the database rolled the whole transaction back (a full disk, say)
                    tx.plain(_MEMBER_UNDO)
                    item.error = exc
                tx.plain(_MEMBER_RELEASE)

        try:
            driver.transaction(
                connections, together, write=True, atomic=True, durable=any(w.durable for w in batch)
            )
        except Exception as exc:  # nothing of the batch committed: every caller hears why
            for item in batch:
                item.result, item.error = None, exc
        except BaseException as exc:  # the leader interrupted: nothing committed, the others told so
            for item in batch:
                item.result, item.error = None, JournalError(f"a shared commit was interrupted ({exc!r})")
            raise

    def _hand_on(self, batch: list[_Write]) -> None:
        """Wake the batch's callers with their results, and the first writer waiting (if any) to lead."""
        with self._lock:
            if self._waiting:
                following = self._waiting.pop(0)
                following.lead = True
            else:
                following = None
                self._leading = False
        for item in batch[1:]:
            assert item.done is not None
            item.done.set()
        if following is not None:
            assert following.done is not None
            following.done.set()
