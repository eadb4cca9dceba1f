"""A hard time limit that ends a saga task after its result is stored leaves that result alone.

A step task whose hook timed out hands its report on, then waits in its pool child for the hook
(``executor.hold_for_timed_out_hooks``, from the task's ``after_return``): the pool's hard time
limit ends that wait by killing the child, and the hook with it, so it can no longer land. By then
the task's result is stored and its callbacks sent. When the steps go on under the coordinator's
task id (``replace()``: an unwind sent with ``link``/``link_error``, or inside a chain, group or
chord) that result is the unwind's report, the one its caller reads. Celery would record
``TimeLimitExceeded`` under the same id and call its errbacks; this request class keeps a stored
``SUCCESS`` instead (the limit cut only the wait for a hook), acknowledges the message as Celery
would, and logs what the limit ended. A task with nothing stored under its id (a step under its
own id) ends with ``TimeLimitExceeded`` as ever.
"""

from __future__ import annotations

import logging
from typing import Any

from billiard.einfo import ExceptionWithTraceback  # type: ignore[attr-defined]  # not in celery-types' stubs
from billiard.exceptions import TimeLimitExceeded
from celery import states
from celery.backends.rpc import RPCBackend
from celery.worker.request import Request
from celery.worker.state import task_ready

log = logging.getLogger(__name__)


class KeepsAStoredResult(Request):
    """A request whose hard time limit, after a ``SUCCESS`` was stored under its id, keeps it."""

    def on_failure(self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False) -> None:
        exc = exc_info.exception
        if isinstance(exc, ExceptionWithTraceback):
            exc = exc.exc
        if isinstance(exc, TimeLimitExceeded) and self._ended_with_success(exc):
            return
        super().on_failure(exc_info, send_failed_event=send_failed_event, return_ok=return_ok)

    def on_timeout(self, soft: bool, timeout: float) -> None:
        if not soft and self._ended_with_success(TimeLimitExceeded(timeout)):
            return
        super().on_timeout(soft, timeout)

    def _ended_with_success(self, exc: BaseException) -> bool:
        """Was a ``SUCCESS`` stored under this task's id? Then the task is over, its message acked."""
        if not stored_success(self):
            return False
        task_ready(self)
        if not self.acknowledged:
            log.warning(
                "%s[%s]: its result was stored before %r ended it (the limit cut its wait for a "
                "timed-out hook, which can no longer land); the stored result stays",
                self.name,
                self.id,
                exc,
            )
        if self.task.acks_late:
            self.acknowledge()
        return True


def stored_success(request: Any) -> bool:
    """Is a ``SUCCESS`` stored under ``request``'s task id? False where nothing can be read: results
    ignored, an ``rpc://`` backend (its results live on the caller's queue), or a backend error."""
    backend = request.task.backend
    if request.ignore_result or isinstance(backend, RPCBackend):
        return False
    try:
        meta = backend.get_task_meta(request.id, cache=False)
    except Exception:  # an unreachable backend: Celery records the timeout, as without this class
        log.warning("could not read the stored result of task %s", request.id, exc_info=True)
        return False
    return bool(meta.get("status") == states.SUCCESS)


__all__ = ["KeepsAStoredResult", "stored_success"]
