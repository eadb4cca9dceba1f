"""What the saga tasks read and write in the result backend besides their own results: the report
stored under an unwind's id once, a withdrawal (``saga-worker revoke``) read back, whether an id
has a final answer. Without a result backend, nothing can be stored or read there."""

from __future__ import annotations

from typing import Any, cast

from celery import Task, states

WITHDRAWN = "REVOKED"


def store_once(backend: Any, task_id: str, result: Any) -> bool:
    """Store ``result`` as the ``SUCCESS`` of ``task_id`` unless a final state (a report, an error,
    a withdrawal) is stored there already; whether it was stored."""
    try:
        if backend.get_task_meta(task_id, cache=False).get("status") in states.READY_STATES:
            return False
    except NotImplementedError:  # no result backend: nobody can read an answer anyway
        return False
    backend.store_result(task_id, result, states.SUCCESS)
    return True


def withdrawn(task: Task[Any, Any]) -> bool:
    """Was this unwind request withdrawn (``saga-worker revoke``) while it waited in the queue? Read
    from the result backend, where the withdrawal is stored: a revoke broadcast reaches only the
    workers running at the time, and a request queued while none ran must stay withdrawn."""
    if task.request.is_eager:
        return False
    try:
        # The read ``AsyncResult(id).state`` makes, without a result object built and dropped per unwind.
        meta = task.backend.get_task_meta(cast(str, task.request.id))
        return bool(meta.get("status") == WITHDRAWN)
    except NotImplementedError:  # no result backend: nothing can have been stored there
        return False


def answered(task: Task[Any, Any], task_id: str) -> bool:
    """Is a final state (a report, an error, a withdrawal) stored under ``task_id``?"""
    try:
        return task.AsyncResult(task_id).state in states.READY_STATES
    except NotImplementedError:  # no result backend: nothing can have been stored there
        return False


__all__ = ["WITHDRAWN", "answered", "store_once", "withdrawn"]
