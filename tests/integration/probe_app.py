"""saga-worker's own Celery app with one task more, ``probe.inherited``, which says what the pool
process running it holds before it has run any saga task: the journal kinds whose statements are
compiled, which of the journal's heavy imports are loaded, and whose function Celery's tracer writes
results as text with (tests/integration/test_worker_start.py)."""

from __future__ import annotations

import sys

from celery.app import trace

from saga_worker.celery import default_app
from saga_worker.journal import statements

app = default_app()


@app.task(name="probe.inherited")
def inherited() -> dict[str, list[str]]:
    return {
        "compiled": sorted(kind.__name__ for kind, _ in statements._SHARED),
        "imported": sorted(name for name in ("alembic", "psycopg") if name in sys.modules),
        "result_text": [trace.saferepr.__module__],  # type: ignore[attr-defined]  # a global of Celery's tracer
    }
