"""The shop's Celery app: its broker, its queue, its forward tasks; saga-worker installed on it."""

from __future__ import annotations

from celery import Celery
from shop.tools import TOOLS

from saga_worker.celery import install

from . import settings

app = Celery("shop", broker=settings.BROKER_URL, backend=settings.RESULT_BACKEND, include=["shop.tasks"])
app.conf.update(
    task_default_queue=settings.QUEUE,
    broker_connection_retry_on_startup=True,
)

# The saga.* tasks (unwind, step, report, sweeper) on this app, with the shop's tools. The journal is
# SAGA_JOURNAL_URL; the saga tasks use their own queue (SAGA_QUEUE, default "saga"): run workers
# with `-Q shop,saga`.
install(app, tools=TOOLS)
