"""A saga worker for the distributed figures: ``celery -A saga_worker.celery:app worker`` on a journal we seed.

Two setups: ``redis+postgres`` (Redis broker, result backend and step locks in the bench's own Redis
database; a fresh PostgreSQL journal) and ``embedded`` (the default with nothing set: SQLite broker,
results and journal, in a temporary SAGA_HOME). The worker also loads ``bench.noop_tasks``, so
Celery's own no-op task runs on the very same worker, with the very same settings, as the floor.
The bench process sends tasks by name from a client app built from the same settings.
"""

from __future__ import annotations

import tempfile
import uuid
from typing import Any

from bench.common import QUEUE_PREFIX, REDIS_URL, PgDatabase, new_id
from bench.workers import Worker
from saga_worker import open_journal

SETUPS = ("redis+postgres", "embedded")
POLL = 0.01  # result polling for database result backends (Redis answers by pub/sub and ignores it)


class Cluster:
    def __init__(
        self,
        setup: str,
        *,
        concurrency: int = 2,
        include: str = "bench.noop_tasks",
        tools: str = "bench.seed:noop_tools",
    ) -> None:
        from saga_worker.celery import make_app
        from saga_worker.settings import SagaSettings

        self.setup = setup
        self._tmp = tempfile.TemporaryDirectory(prefix="saga-bench-home-")
        self._pg: PgDatabase | None = None
        self.queue = f"{QUEUE_PREFIX}-{uuid.uuid4().hex[:6]}"
        env = {"SAGA_HOME": self._tmp.name, "SAGA_QUEUE": self.queue, "SAGA_TOOLS": tools}
        if setup == "redis+postgres":
            self._pg = PgDatabase()
            env.update(
                SAGA_JOURNAL_URL=self._pg.url,
                SAGA_BROKER_URL=REDIS_URL,
                SAGA_RESULT_BACKEND=REDIS_URL,
                SAGA_REDIS_URL=REDIS_URL,
            )
        elif setup != "embedded":
            raise ValueError(setup)
        settings = SagaSettings(**{k[len("SAGA_") :].lower(): v for k, v in env.items()})
        self.journal_url = settings.resolved_journal_url()
        self.journal = open_journal(self.journal_url, migrate=True)
        self.engine = getattr(self.journal, "engine", None)
        self.app = make_app(settings, main="saga_bench_client")
        self.worker = Worker(
            "saga_worker.celery:app", [self.queue], concurrency=concurrency, env=env, include=include
        )
        try:
            self.worker.wait_ready(lambda: self.noop().get(timeout=5, interval=POLL), timeout=90)
        except Exception:
            self.close()
            raise

    def noop(self) -> Any:
        return self.app.send_task("bench.noop", queue=self.queue)

    def unwind(self, run_id: str, **kwargs: Any) -> Any:
        return self.app.send_task("saga.compensate_run", args=[run_id], kwargs=kwargs, queue=self.queue)

    def noop_chain(self, length: int) -> Any:
        from celery import chain

        return chain(
            *[self.app.signature("bench.noop", queue=self.queue, immutable=True) for _ in range(length)]
        ).apply_async()

    def contract_unwind(self, run_id: str) -> Any:
        """The contract's bare tasks (``bench.noop_tasks``) on one seeded run: the coordinator, sent
        under a fresh unwind id as ``saga.compensate_run`` is, which then sends a task per step; the
        result under that id is the report the last step stores."""
        return self.app.send_task(
            "bench.contract_start", args=[run_id], task_id=new_id("bare"), queue=self.queue
        )

    def close(self) -> None:
        self.worker.stop()
        self.journal.close()
        if self._pg is not None:
            self._pg.drop()
        self._tmp.cleanup()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PlainCelery:
    """A plain Celery app with **default** settings (``bench.noop_app``: prefetch 4, early acks, no
    STARTED state, no events) on a 2-process prefork worker of its own, on the same Redis broker and
    result backend as the saga worker: issue 16's second floor, Celery as an app gets it out of the box."""

    def __init__(self, *, concurrency: int = 2) -> None:
        from bench.noop_app import app

        self.app = app
        self.queue = f"{QUEUE_PREFIX}-plain-{uuid.uuid4().hex[:6]}"
        self.worker = Worker("bench.noop_app", [self.queue], concurrency=concurrency)
        try:
            self.worker.wait_ready(lambda: self.noop().get(timeout=5, interval=POLL), timeout=90)
        except Exception:
            self.worker.stop()
            raise

    def noop(self) -> Any:
        return self.app.send_task("bench.noop", queue=self.queue)

    def noop_chain(self, length: int) -> Any:
        from celery import chain

        return chain(
            *[self.app.signature("bench.noop", queue=self.queue, immutable=True) for _ in range(length)]
        ).apply_async()

    def close(self) -> None:
        self.worker.stop()

    def __enter__(self) -> PlainCelery:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["POLL", "SETUPS", "Cluster", "PlainCelery"]
