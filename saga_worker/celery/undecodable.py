"""A saga message whose body cannot be decoded ends with a stored error, not only a log line.

Celery decodes a message's body in the worker's main process, before any Request exists: a body that
is not what its content type says goes to the consumer's ``on_decode_error``, which logs it and acks
it, and a caller waiting on the task id waits forever. For a ``saga.*`` message this step stores the
refusal as that task's result (when its id is readable), logs one line naming the task, the id and
what was wrong, and acks it (never handed back, so never redelivered forever). Any other message
keeps Celery's own handling.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from celery import bootsteps
from celery.exceptions import InvalidTaskError

from .request import OTHER_TASK_ID_MAX, TASK_ID_MAX

log = logging.getLogger(__name__)
OUR_TASKS = "saga."


class UndecodableSagaMessages(bootsteps.StartStopStep):
    """A consumer step: wraps the consumer's ``on_decode_error`` for ``saga.*`` messages."""

    def __init__(self, consumer: Any, **kwargs: Any) -> None:
        super().__init__(consumer, **kwargs)
        celery_own = consumer.on_decode_error

        def on_decode_error(message: Any, exc: BaseException) -> None:
            headers = getattr(message, "headers", None)
            name = headers.get("task") if isinstance(headers, Mapping) else None
            if not (isinstance(name, str) and name.startswith(OUR_TASKS)):
                celery_own(message, exc)
                return
            refuse(consumer.app, name, headers.get("id"), exc)  # type: ignore[union-attr]
            message.ack()

        consumer.on_decode_error = on_decode_error


def refuse(app: Any, name: str, task_id: object, exc: BaseException) -> None:
    readable = isinstance(task_id, str) and 0 < len(task_id) <= TASK_ID_MAX.get(name, OTHER_TASK_ID_MAX)
    shown = task_id if readable else "no readable task id"
    content = type(exc).__name__
    error = InvalidTaskError(
        f"{name} [{shown}]: its body is not valid JSON ({content}: {str(exc)[:200]}); refused, nothing was done"
    )
    log.error("%s", error)
    if readable:
        try:
            app.backend.mark_as_failure(task_id, error, request=None)
        except Exception:  # the log line above is what is left: a caller's .get() waits on
            log.error(
                "could not store the refusal of %s [%s] in the result backend", name, shown, exc_info=True
            )


__all__ = ["UndecodableSagaMessages"]
