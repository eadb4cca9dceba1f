"""A bare Celery app with a no-op task: Celery's own cost, the floor of the distributed figures.

Broker and result backend are a Redis database of the bench's own (bench.common.REDIS_URL); the
settings are Celery's defaults apart from JSON-only serialisation, as the saga worker uses.
"""

from __future__ import annotations

import os

from celery import Celery

REDIS_URL = os.environ.get("SAGA_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")

app = Celery("saga_bench_noop", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="bench.noop")
def noop(*_args: object) -> None:
    return None
