"""The class every saga task is made from: the app's own ``Task`` class, kept, with what a saga task
adds around its body (redacted errors, waiting for timed-out hooks after the result is stored)."""

from __future__ import annotations

from typing import Any, cast

from celery import Celery, Task
from celery.exceptions import Ignore, Reject, Retry

from .. import executor
from ..core.redact import redact_exception


class _RedactedErrors:
    """Task mixin: an exception leaving a saga task is redacted (its message, its chain) before Celery
    logs it and stores it in the result backend, where a client's ``.get()`` would show it."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)  # type: ignore[misc]
        except (Ignore, Reject, Retry):  # Celery's control flow (replace, retry), not errors
            raise
        except Exception as exc:
            raise redact_exception(exc)  # noqa: B904 - the same exception, its chain kept


class _HoldsTimedOutHooks:
    """Task mixin: after the task's result is stored and its callbacks sent (``after_return``), wait
    for the hooks that timed out in this pool child, so that the step's hard time limit, not the
    hook, decides when they stop. Waiting in the task's body instead, the limit could kill the child
    before the report was stored under the coordinator's id (steps run under it with replace())."""

    def after_return(self, *args: Any, **kwargs: Any) -> None:
        super().after_return(*args, **kwargs)  # type: ignore[misc]
        executor.hold_for_timed_out_hooks(cast(Task[Any, Any], self).request)


def saga_task_base(app: Celery) -> type[Task[Any, Any]]:
    """The base class of the saga tasks on ``app``: its own Task class, with the two mixins."""
    return type("SagaTask", (_RedactedErrors, _HoldsTimedOutHooks, app.Task), {})


__all__ = ["saga_task_base"]
