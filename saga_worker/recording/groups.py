"""Which group of concurrent calls a call is recorded in (docs/reference/compensation.md, "Groups").

A group is declared, not observed: the code (``SagaRun.parallel()``) or an agent adapter (the tool
calls of one turn) says its calls are independent, and each call claimed inside the declaration is
written with the group's token, in the same write as its claim. The declaration lives in a context
variable so that it follows the calls into the threads and tasks that make them (``asyncio.to_thread``,
``asyncio.gather``, a framework's own task group), and names its run so that a call of another run
made meanwhile is not swept into it.

A token is random: the same block run again after a crash records its remaining calls in a new group,
which can only make the unwind more sequential (two groups, the later undone first), never merge
calls that were not declared together.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# (run id, token) of the group being recorded in this context, or None outside any group.
_current: ContextVar[tuple[str, str] | None] = ContextVar("saga_worker_call_group", default=None)


def new_token() -> str:
    """A fresh group token (what the journal stores; the report numbers groups instead)."""
    return uuid.uuid4().hex


@contextmanager
def recorded_as_group(run_id: str, token: str | None = None) -> Iterator[str]:
    """Record the calls of run ``run_id`` claimed inside this block as one group. Nested inside a
    group of the same run, the block adds to it (its calls are independent of the outer ones too)."""
    outer = _current.get()
    if outer is not None and outer[0] == run_id:
        yield outer[1]
        return
    mark = _current.set((run_id, token or new_token()))
    try:
        yield _current.get()[1]  # type: ignore[index]
    finally:
        _current.reset(mark)


def group_of(run_id: str) -> str | None:
    """The token of the group a call of ``run_id`` claimed here is recorded in, or None (alone)."""
    current = _current.get()
    return current[1] if current is not None and current[0] == run_id else None
