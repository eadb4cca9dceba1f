"""Sending an unwind request to the workers, and asking which workers listen: what the operator's
actions (``operating/actions.py``) are handed by the layers that know the Celery app (the console,
the Django admin, the CLI, the sweeper's task), so that the actions never reach up for Celery."""

from __future__ import annotations

import logging
from typing import Any

from ..operating.actions import Enqueue, Workers

log = logging.getLogger(__name__)


def celery_enqueue(task: Any) -> Enqueue:
    """Enqueue on the workers through ``task`` (``saga.compensate_run`` of the app to send with:
    ``saga_worker.celery.compensate_run``, or the sweeper's own app's task)."""

    def enqueue(
        run_id: str,
        dry_run: bool,
        *,
        actor: str,
        reason: str,
        via: str,
        task_id: str | None = None,
        parallel: bool = False,
    ) -> str:
        kwargs: dict[str, Any] = {"dry_run": dry_run, "actor": actor, "reason": reason, "via": via}
        if parallel:  # only when asked for: the previous release's task has no such argument
            kwargs["parallel"] = True
        result = task.apply_async((run_id,), kwargs, task_id=task_id)
        return str(result.id)

    return enqueue


def celery_workers(task: Any, queue: str, timeout: float = 1.0) -> Workers:
    """The names of the workers that consume ``queue`` (asked over the broker of ``task``'s app,
    answering within ``timeout`` seconds), or None when the broker cannot tell (its transport has no
    broadcast, as the embedded SQLite broker)."""

    def alive() -> list[str] | None:
        app = task.app
        try:
            with app.connection_for_read() as connection:
                if "fanout" not in connection.transport.implements.exchange_type:
                    return None  # a broadcast would go nowhere and read as "no worker"
            replies = app.control.inspect(timeout=timeout).active_queues() or {}
        except Exception:  # noqa: BLE001 - broker down: "cannot tell", not an error page
            log.debug("cannot ask the workers which queues they consume", exc_info=True)
            return None
        return sorted(w for w, queues in replies.items() if any(q.get("name") == queue for q in queues or []))

    return alive


__all__ = ["celery_enqueue", "celery_workers"]
