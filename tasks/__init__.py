"""The Celery worker entry point from a checkout: ``celery -A tasks worker`` (docs/reference/index.md).

A shim: the app, its configuration and the ``saga.*`` tasks live in the library, in
``saga_worker/celery/`` (the wheel installs only ``saga_worker``). Apps import
``from saga_worker.celery import compensate_run``; ``from tasks import compensate_run`` keeps working
here.
"""

from saga_worker.celery import compensate_run, compensate_step, default_app, finalize_unwind, retry_uncertain

app = default_app()

__all__ = ["app", "compensate_run", "compensate_step", "finalize_unwind", "retry_uncertain"]
