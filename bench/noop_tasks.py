"""Celery's own no-op task, registered on the saga worker's app (``celery -A saga_worker.celery:app
worker -I bench.noop_tasks``): the floor of the distributed figures runs on the same worker and settings."""

from __future__ import annotations

from saga_worker.celery import default_app

app = default_app()


@app.task(name="bench.noop")
def noop(*_args: object) -> None:
    return None
