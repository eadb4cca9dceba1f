"""saga-worker's Celery app as a traced app runs it (``celery -A tests.tracing.traced_app:app worker``):
each pool child gets the SDK, exporting every span into its own file under ``SAGA_TEST_SPANS``, and
Celery's own instrumentation (opentelemetry-instrumentation-celery), whose task spans are the parents
of saga-worker's on the worker. Its forward tasks (``traced.charge`` …) record the order's calls into
one run with ``record_call``, one call per task. With ``SAGA_TEST_BROKEN_SPANS=start`` (or ``end``, ``export``)
every span also goes through a processor that raises there (``spans.BrokenTracing``)."""

from __future__ import annotations

import os
from typing import Any

from celery.signals import worker_process_init

from saga_worker.celery import make_app, record_call

app = make_app(main="saga-traced")


def _forward(name: str, last: bool = False) -> None:
    @app.task(name=f"traced.{name}", shared=False)
    def step(run_id: str, input: Any) -> Any:
        return record_call(run_id, name, input, id=name, finish=last)


_forward("charge")
_forward("reserve")
_forward("notify", last=True)


def _trace(**_: Any) -> None:
    # In each pool child, as OpenTelemetry's docs say for prefork pools: after the fork.
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from .spans import BrokenTracing, export_to_dir

    provider = export_to_dir(os.environ["SAGA_TEST_SPANS"], "the-worker")
    broken = os.environ.get("SAGA_TEST_BROKEN_SPANS")
    if broken:
        raising = BrokenTracing()
        raising.fails = broken
        provider.add_span_processor(raising)
        provider.add_span_processor(SimpleSpanProcessor(raising))
    CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]  # opentelemetry-instrumentation-celery has no types


worker_process_init.connect(_trace, weak=False)
