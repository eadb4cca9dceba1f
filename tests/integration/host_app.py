"""A foreign Celery app with tasks of its own, with saga-worker installed on it.

Its own settings differ from everything the saga tasks rely on (pickle, early acks, its own default
queue) to show that ``install(app)`` leaves them alone for its tasks and enforces JSON, late acks and
the saga queue for the saga tasks. Its forward tasks (``host.charge`` …) record the sample order's
calls into one run with ``record_call``; the tools are the integration tests' ledger tools
(``SAGA_TOOLS``). Started as ``celery -A tests.integration.host_app worker -Q <host queue>,<saga queue>``;
broker and results come from ``HOST_BROKER_URL`` / ``HOST_RESULT_BACKEND`` (no ``SAGA_BROKER_URL``).
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, Task

from saga_worker.celery import install, record_call


def make_host_app() -> Celery:
    app = Celery("host", set_as_current=False)
    app.conf.update(
        broker_url=os.environ["HOST_BROKER_URL"],
        result_backend=os.environ["HOST_RESULT_BACKEND"],
        task_serializer="pickle",
        result_serializer="pickle",
        accept_content=["pickle", "json"],
        result_accept_content=["pickle", "json"],
        task_default_queue=os.environ.get("HOST_QUEUE", "host"),
        task_acks_late=False,
        broker_connection_retry_on_startup=True,
    )

    @app.task(name="host.union", shared=False)
    def union(a: set[int], b: set[int]) -> set[int]:
        return a | b  # sets: only pickle carries them, so this proves the host's serializer is intact

    @app.task(name="host.fail", shared=False)
    def fail(size: int) -> None:
        # The host's own failure, with a long token in its text: its worker logs it at once, as
        # without saga-worker (issue 21, item 5: the saga log filter once scanned it for 14.7 s).
        raise ValueError(f"upstream said token={'a' * size} and postgresql://u:p@h/db")

    def forward(name: str, last: bool = False) -> Any:
        @app.task(name=f"host.{name}", bind=True, shared=False)
        def step(self: Task[Any, Any], run_id: str, input: Any) -> dict[str, Any]:
            output = record_call(run_id, name, input, id=name, finish=last, prompt="host order")
            return {"output": output, "worker": self.request.hostname}

        return step

    def forward_in_group(name: str) -> Any:
        # A task of one Celery group: its call is recorded in the run's group of that id (issue 47).
        @app.task(name=f"host.{name}.grouped", bind=True, shared=False)
        def step(self: Task[Any, Any], run_id: str, input: Any) -> dict[str, Any]:
            output = record_call(run_id, name, input, id=name, prompt="host order", group=self.request.group)
            return {"output": output, "worker": self.request.hostname}

        return step

    forward("charge")
    forward("reserve")
    forward("notify", last=True)
    forward_in_group("reserve")
    forward_in_group("notify")
    install(app)
    return app


app = make_host_app() if "HOST_BROKER_URL" in os.environ else None
