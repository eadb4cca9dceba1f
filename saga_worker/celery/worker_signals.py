"""What a worker of an app with the saga tasks does at its start, in its pool children and with its
logs: Celery signal handlers, connected by :func:`connect` when saga-worker's app is made
(``make_app``) or installed on an app (``install(app)``), never by importing a module.

Celery's signals are global to the process, so each handler that is given the worker checks that it
serves the saga tasks (``serves_saga_tasks``) before it acts; the ones Celery gives no app (a pool
child's start and exit, the loggers it sets up) do only what is right for any worker of a process
that has saga-worker's tasks: fresh journal connections in a forked child, its metrics file closed,
saga-worker's own log records redacted.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    celeryd_after_setup,
    task_received,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
)
from celery.utils.dispatch import Signal

from .. import executor
from ..core.redact import redact_text, redact_url
from ..errors import InvalidInputError, ToolsNotConfiguredError
from ..observing import metrics
from ..observing.logjson import json_if_asked
from ..settings import get_settings
from .logs import redact_saga_logs
from .result_text import speed_up_result_text
from .tasks import COMPENSATE_STEP, EVENTS_FLAG


def serves_saga_tasks(worker: Any) -> bool:
    """Is ``worker`` (a worker, its consumer: anything with ``.app``) one of an app with the saga tasks?"""
    app = getattr(worker, "app", None)
    return app is not None and COMPENSATE_STEP in app.tasks


def _refuse_without_tools(sender: Any = None, **_: Any) -> None:
    """A worker of an app with the saga tasks whose tools are not configured, or cannot be imported
    (a module that fails to import, an attribute that is missing or is not a mapping of tools), does
    not start: it would say ``ready`` and answer every step with that error (there is no fallback to
    sample tools). Checked here, at ``worker_init``: before the pool forks and before the consumer
    takes any message, and after Celery's Django fixup has run ``django.setup()`` (tools that import
    models import). SystemExit, because Celery logs and swallows an Exception raised by a signal
    handler."""
    if not serves_saga_tasks(sender):
        return
    try:
        executor.check_tools_at_start("celery worker")
    except ToolsNotConfiguredError as exc:
        raise SystemExit(f"error: {exc}") from exc
    except InvalidInputError as exc:
        raise SystemExit(f"error: saga-worker cannot load its tools: {redact_text(str(exc))}") from exc


def _prepare_journal(sender: Any = None, **_: Any) -> None:
    """Before the pool forks its children: the journal's driver imported and its statements compiled
    here, once, rather than in each pool child on its first task (executor.prepare_journal)."""
    if serves_saga_tasks(sender):
        executor.prepare_journal()


def _serve_metrics(sender: Any = None, **_: Any) -> None:
    # The main process serves the sum of its pool children's counts (SAGA_METRICS_PORT).
    settings = get_settings()
    if serves_saga_tasks(sender) and settings.metrics_port is not None:
        metrics.serve_worker_metrics(settings.metrics_port, settings.metrics_host)


def _speed_up_result_text(sender: Any = None, **_: Any) -> None:
    # Celery writes each task's result as text (its log line, Flower's event): the same text, faster.
    if serves_saga_tasks(sender):
        speed_up_result_text()


def banner_lines(app: Any) -> list[str]:
    """What the worker's banner says about saga-worker: the journal (redacted), the broker, the tools
    and the queue, so a worker pointed at another journal or broker than its clients shows it."""
    settings = executor.configured_settings()
    return [
        "[saga-worker]",
        f"  . journal: {redact_url(settings.resolved_journal_url())}",
        f"  . broker:  {redact_url(str(app.conf.broker_url))}",
        f"  . tools:   {executor.tools_source() or '(none)'}",
        f"  . queue:   {settings.queue}",
    ]


def _announce(sender: Any = None, instance: Any = None, **_: Any) -> None:
    # Appended to the banner's task list (``extra_info``), which Celery prints right after this signal.
    if instance is None or not serves_saga_tasks(instance):
        return
    lines = "\n".join(banner_lines(instance.app)) + "\n"
    shown = instance.extra_info

    def extra_info() -> str:
        return (shown() or "") + "\n" + lines

    instance.extra_info = extra_info


def _log_tools(sender: Any = None, **_: Any) -> None:
    if serves_saga_tasks(sender):  # the consumer
        executor.log_tools()  # which tools this worker unwinds with, once at its start


def _mark_events(sender: Any = None, request: Any = None, **_: Any) -> None:
    """A pool child cannot see whether its worker sends task events (``--events``, or turned on
    later by ``celery control enable_events``): the consumer, in the main process, says so in the
    step's request, so the step's own event is sent exactly when Celery's task events are."""
    if request is None or request.name != COMPENSATE_STEP:
        return
    dispatcher = getattr(sender, "event_dispatcher", None)
    if (
        dispatcher is not None
        and dispatcher.enabled
        and (not dispatcher.groups or "task" in dispatcher.groups)
    ):
        request.request_dict[EVENTS_FLAG] = True


def _fresh_connections(**_: Any) -> None:
    # A pool child must not share the parent's database connections: each opens its own.
    executor.reset(after_fork=True)


def _child_exited(pid: int | None = None, **_: Any) -> None:
    metrics.process_exited(pid if pid is not None else os.getpid())


def _redact_logs(logger: Any = None, **_: Any) -> None:
    # Every handler Celery sets up (worker and task loggers) hides URL passwords in what it writes
    # about saga-worker (the host app's own records are left alone: celery/logs.py).
    redact_saga_logs(logger)
    json_if_asked(logger)  # SAGA_LOG_FORMAT=json: records as JSON lines with trace and span ids


HANDLERS: tuple[tuple[Signal, Callable[..., None]], ...] = (
    (worker_init, _refuse_without_tools),  # first: a worker without its tools does nothing else
    (worker_init, _prepare_journal),
    (worker_init, _serve_metrics),
    (worker_init, _speed_up_result_text),
    (celeryd_after_setup, _announce),
    (worker_ready, _log_tools),
    (task_received, _mark_events),
    (worker_process_init, _fresh_connections),
    (worker_process_shutdown, _child_exited),
    (after_setup_logger, _redact_logs),
    (after_setup_task_logger, _redact_logs),
)

_lock = threading.Lock()


def connect() -> None:
    """Connect every handler, once per process however often it is called (each under a
    ``dispatch_uid`` of its own: connecting again replaces nothing and adds nothing)."""
    with _lock:
        for signal, handler in HANDLERS:
            signal.connect(handler, dispatch_uid=f"saga_worker:{handler.__name__}", weak=False)


__all__ = ["HANDLERS", "banner_lines", "connect", "serves_saga_tasks"]
