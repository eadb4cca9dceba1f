"""The worker-side half of "JSON only" for the saga tasks on an app that accepts more, and the refusal
of any message a saga task could never process (too large, a task id that cannot be an unwind id).

``accept_content`` is a worker-wide setting, and an app the tasks are installed on may accept
pickle for its own tasks. The saga tasks trust nothing in a message but ids, and refuse any message
that is not JSON: this Request class (set per task) rejects such a message before it runs, without
requeueing it, and stores the refusal as the task's result so a caller waiting on it learns why.
"""

from __future__ import annotations

import json
import logging
from contextlib import suppress
from typing import Any

from celery.exceptions import InvalidTaskError

from .timeouts import KeepsAStoredResult

log = logging.getLogger(__name__)
JSON = "application/json"


# A saga task's message carries ids, a flag, an actor and a reason (reasons are capped, audit.py):
# a few kilobytes, headers included. One larger than this, body and headers counted, is refused on
# receipt, in the worker's main process, before any pool child decodes or logs it (a 1 MB run id used
# to wedge a worker).
MAX_MESSAGE_BYTES = 64 * 1024
# The coordinator's task id is its unwind's id (saga_unwinds.unwind_id); a step's names the run, the
# step and the coordinator (under 610 characters).
TASK_ID_MAX = {"saga.compensate_run": 200}
OTHER_TASK_ID_MAX = 1024


class JsonOnlyRequest(KeepsAStoredResult):
    """Set on every saga task: a message the task could never process is refused here, acknowledged
    (never handed back, so never redelivered forever) with the refusal stored as the task's result;
    a hard time limit that ends the task after its result was stored keeps that result (timeouts.py)."""

    def __init__(self, message: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(message, *args, **kwargs)
        problem = _refusal(message, str(self.name), str(self.id))
        if problem is not None:
            shown = self.id if len(str(self.id)) <= 60 else f"{str(self.id)[:60]}…"
            error = InvalidTaskError(f"{self.name} [{shown}]: {problem}; refused, nothing was done")
            with suppress(Exception):  # best effort: the refusal itself is what matters
                self.task.backend.mark_as_failure(self.id, error, request=None)
            log.error("%s", error)
            raise error  # Celery's consumer rejects it without requeueing (an ack on Redis)


def message_bytes(message: Any) -> int:
    """What a message weighs against ``MAX_MESSAGE_BYTES``: its body and its headers, as JSON. The
    headers count because a worker reads and keeps them with the task (a tracing ``baggage`` or
    ``traceparent`` header of a megabyte weighs on the worker as a megabyte of body would)."""
    body = getattr(message, "body", b"") or b""
    headers = getattr(message, "headers", None) or {}
    return len(body) + len(json.dumps(headers, ensure_ascii=False, default=str).encode())


def _refusal(message: Any, name: str, task_id: str) -> str | None:
    content_type = getattr(message, "content_type", None)
    if content_type is not None and content_type != JSON:
        return f"saga tasks accept JSON messages only, this one is {content_type}"
    size = message_bytes(message)
    if size > MAX_MESSAGE_BYTES:
        return (
            f"a saga task's message carries ids only, its body and headers are {size} bytes (at most "
            f"{MAX_MESSAGE_BYTES})"
        )
    limit = TASK_ID_MAX.get(name, OTHER_TASK_ID_MAX)
    if len(task_id) > limit:
        why = ": the task id is the unwind id" if name in TASK_ID_MAX else ""
        return f"its task id is {len(task_id)} characters (at most {limit}{why})"
    if not task_id.isprintable():
        # The journal keys a redelivery's count (and a coordinator's unwind) by the task id.
        at = next(i for i, c in enumerate(task_id) if not c.isprintable())
        return (
            f"its task id holds a control character at index {at}: a journal keeps task ids, so they "
            "are 1-1024 printable characters"
        )
    return None


__all__ = ["JSON", "MAX_MESSAGE_BYTES", "JsonOnlyRequest", "message_bytes"]
