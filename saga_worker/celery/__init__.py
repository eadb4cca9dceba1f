"""saga-worker on Celery (docs/reference/celery.md, docs/reference/integration.md): the app factory, its configuration and the ``saga.*`` tasks.

``from saga_worker.celery import compensate_run`` is what apps import: ``compensate_run.delay(run_id)``
sends ``saga.compensate_run`` through the app the tasks were installed on (:func:`install`), or else
through saga-worker's own app, built from the ``SAGA_*`` settings on first use (``app``, which
``celery -A saga_worker.celery:app worker`` runs). Importing this package creates no app, opens
nothing and connects no Celery signal: making our app or installing the tasks on one connects what
its workers do at their start (``worker_signals``). Forward steps recorded by an app's own tasks:
:func:`record_call`.
"""

from __future__ import annotations

import threading
from typing import Any

from celery import Celery
from celery.local import Proxy

from .config import celery_config, is_redis, make_app, prepare_stores
from .forward import record_call
from .install import install, installed_app, task_options
from .redeliveries import DeliveriesExhausted
from .tasks import COMPENSATE_RUN, COMPENSATE_STEP, FINALIZE_UNWIND, NAMES, RETRY_UNCERTAIN

_lock = threading.Lock()
_default: Celery | None = None


def default_app() -> Celery:
    """saga-worker's own app (built once per process from the settings)."""
    global _default
    with _lock:
        if _default is None:
            _default = make_app()
        return _default


def current_app() -> Celery:
    """The app the ``saga.*`` tasks are sent through: the one :func:`install` was given, else ours."""
    installed = installed_app()
    return installed if installed is not None else default_app()


def _task(name: str) -> Any:
    return Proxy(lambda: current_app().tasks[name])


compensate_run: Any = _task(COMPENSATE_RUN)
compensate_step: Any = _task(COMPENSATE_STEP)
finalize_unwind: Any = _task(FINALIZE_UNWIND)
retry_uncertain: Any = _task(RETRY_UNCERTAIN)


def __getattr__(name: str) -> Any:
    # ``app`` is built on first access, so that importing the package (to install the tasks on an
    # app of one's own) never creates saga-worker's app or the embedded default's files.
    if name == "app":
        return default_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DeliveriesExhausted",
    "NAMES",
    "celery_config",
    "compensate_run",
    "compensate_step",
    "current_app",
    "default_app",
    "finalize_unwind",
    "install",
    "is_redis",
    "make_app",
    "prepare_stores",
    "record_call",
    "retry_uncertain",
    "task_options",
]
