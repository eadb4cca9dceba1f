"""Loaded into a bench worker (``-I bench.stock_celery``) to take back the private patch that
saga-worker applies to Celery in worker processes, so ``python -m bench.private_patches`` can price
it: ``SAGA_BENCH_STOCK=saferepr`` takes it back.

A worker applies it at ``worker_init``, before this module is imported, so it is taken back at
``worker_ready`` in the main process and at ``worker_process_init`` in each pool child (where the
tracer writes each result's text)."""

from __future__ import annotations

import os
from typing import Any

from celery.signals import worker_process_init, worker_ready

from bench.noop_tasks import noop  # noqa: F401  (the worker still needs bench.noop)


def _take_back(**_: Any) -> None:
    stock = set(filter(None, os.environ.get("SAGA_BENCH_STOCK", "").split(",")))
    if "saferepr" in stock:
        from celery.app import trace
        from celery.utils.saferepr import saferepr

        trace.saferepr = saferepr  # type: ignore[attr-defined]


worker_ready.connect(_take_back, weak=False)
worker_process_init.connect(_take_back, weak=False)
