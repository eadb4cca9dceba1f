"""Loaded into a worker (``-I bench.gc_after_task``) by the memory group's control run: a full garbage
collection after every task, to tell collectable cyclic garbage apart from a leak."""

from __future__ import annotations

import gc
from typing import Any

from celery.signals import task_postrun

from bench.noop_tasks import noop  # noqa: F401  (the worker still needs bench.noop)


@task_postrun.connect
def _collect(**_: Any) -> None:
    gc.collect()
