"""Which of a worker's log records are saga-worker's: the ones its log filter redacts.

A worker's log handlers are process-wide: the host app's own tasks write through them too. Redacting
their records would cost the host (a long token in one of its errors once stalled its worker) and is
not ours to do. A record is saga-worker's when its logger is one of ours, when it is Celery's line
about a saga task (the trace's "Task saga.… raised", the received/succeeded lines: their arguments
name the task), or when it is written while a saga task runs in this process.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from celery import current_task

from ..core.redact import redact_logging

OUR_LOGGERS = "saga_worker"
OUR_TASKS = "saga."


def about_saga(record: logging.LogRecord) -> bool:
    if record.name == OUR_LOGGERS or record.name.startswith(OUR_LOGGERS + "."):
        return True
    args = record.args
    if isinstance(args, Mapping) and str(args.get("name", "")).startswith(OUR_TASKS):
        return True
    data = getattr(record, "data", None)  # Celery's extra={"data": {...}} on its task lines
    if isinstance(data, Mapping) and str(data.get("name", "")).startswith(OUR_TASKS):
        return True
    name = getattr(current_task, "name", None)  # the task this process is running, if any
    return isinstance(name, str) and name.startswith(OUR_TASKS)


def redact_saga_logs(logger: logging.Logger | None = None) -> None:
    """Put the redacting filter, for saga-worker's records only, on every handler of ``logger``."""
    redact_logging(logger, only=about_saga)


__all__ = ["about_saga", "redact_saga_logs"]
