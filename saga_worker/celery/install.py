"""``install(app)``: the ``saga.*`` tasks and the sweeper's beat entry on a Celery app that already
exists (docs/reference/integration.md).

The host app keeps its broker, its result backend and its own tasks' settings. What the saga tasks
rely on is set on them alone: JSON messages (sent as JSON, and a non-JSON message refused by the
worker), acknowledged late and handed back when the worker is lost, on their own queue
(``SAGA_QUEUE``, routed by a ``saga.*`` task route, which also carries the JSON serializer, so a message
sent by name lands there as JSON too).
``SAGA_BROKER_URL`` / ``SAGA_RESULT_BACKEND``, when set, say otherwise for the whole app: Celery has
one broker per app.
"""

from __future__ import annotations

import threading
from typing import Any

from celery import Celery, Task

from .. import executor
from ..errors import InvalidInputError
from ..executor import ToolsSource
from ..settings import SagaSettings, get_settings
from . import worker_signals
from .config import SWEEP_ENTRY, prune_entries, sweep_entry
from .tasks import register

SAGA_ROUTE = "saga.*"

_lock = threading.Lock()
_installed: Celery | None = None


def task_options(settings: SagaSettings) -> dict[str, Any]:
    """The per-task settings every saga task carries, whatever the host app's defaults are."""
    return {
        "queue": settings.queue,
        "serializer": "json",
        "acks_late": True,
        "reject_on_worker_lost": True,
        "acks_on_failure_or_timeout": True,  # a failure is an outcome (stored), not a lost message
        "track_started": False,  # a STARTED write per step that nothing reads
        "Request": "saga_worker.celery.request:JsonOnlyRequest",
    }


def _check_accepts_json(app: Celery) -> None:
    accept = app.conf.accept_content
    if accept is not None and not {"json", "application/json"} & {str(a) for a in accept}:
        raise InvalidInputError(
            f"install(app): app {app.main!r} does not accept JSON messages (accept_content={list(accept)!r}); "
            "the saga tasks send JSON only: add 'json' to accept_content"
        )


def _route(app: Celery, queue: str) -> None:
    # The serializer too: send_task("saga.compensate_run", ...) from an app whose task_serializer is
    # pickle would otherwise go out as pickle, which every saga task refuses.
    ours = {SAGA_ROUTE: {"queue": queue, "serializer": "json"}}
    routes = app.conf.task_routes
    if routes is None:
        app.conf.task_routes = (ours,)
    elif isinstance(routes, list | tuple):
        app.conf.task_routes = (ours, *[r for r in routes if r != ours])
    else:
        app.conf.task_routes = (ours, routes)


def _beat(app: Celery, settings: SagaSettings) -> None:
    schedule = dict(app.conf.beat_schedule or {})
    schedule[SWEEP_ENTRY] = sweep_entry(settings, queue=settings.queue)
    schedule.update(prune_entries(settings, queue=settings.queue))
    app.conf.beat_schedule = schedule


def install(
    app: Celery,
    *,
    settings: SagaSettings | None = None,
    tools: ToolsSource | None = None,
    beat: bool = True,
) -> dict[str, Task[Any, Any]]:
    """Register ``saga.compensate_run``, ``saga.compensate_step``, ``saga.finalize_unwind`` and
    ``saga.retry_uncertain`` on ``app`` (and, with ``beat``, the sweeper's entry in its beat schedule).

    ``settings`` default to the ``SAGA_*`` environment; ``tools`` (a mapping of name to Tool, a
    ``"package.module:attribute"`` string or a callable returning the mapping; the last two are
    loaded on first use, so tools that import Django models can be named before ``django.setup()``)
    default to ``SAGA_TOOLS``. With neither, a worker of ``app`` refuses to start (the check, and the
    rest of what a worker of ``app`` does at its start, are connected here: importing saga-worker
    connects no Celery signal). From now on
    ``saga_worker.celery.compensate_run`` (and its siblings) send through ``app``. Returns the four
    tasks by name."""
    if not isinstance(app, Celery):
        raise InvalidInputError(f"install(app) needs a Celery app, got {type(app).__name__}")
    s = settings if settings is not None else get_settings()
    _check_accepts_json(app)
    if s.broker_url is not None:
        app.conf.update(broker_url=s.broker_url)
    if s.result_backend is not None:
        app.conf.update(result_backend=s.result_backend)
    registered = register(app, **task_options(s))
    worker_signals.connect()  # what a worker of ``app`` does at its start (celery/worker_signals.py)
    _route(app, s.queue)
    if beat:
        _beat(app, s)
    executor.configure(s if settings is not None else None, tools)
    _set_installed(app)
    return registered


def installed_app() -> Celery | None:
    """The app :func:`install` was last given in this process, if any."""
    return _installed


def _set_installed(app: Celery | None) -> None:
    global _installed
    with _lock:
        _installed = app


__all__ = ["install", "installed_app", "task_options"]
