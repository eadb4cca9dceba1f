"""A worker's main process prepares the journal before its pool forks (executor.prepare_journal):
each pool process then inherits the compiled statements and the driver and migration imports, rather
than paying for them on its first task (about a quarter of a second here, on every fresh pool
process: at the worker's start, and again after each ``--max-tasks-per-child`` replacement).

The time itself is the bench's to show (``python -m bench --only distributed``: the worker's first
unwind); these tests show what the pool process holds before its first saga task, and that a worker
whose journal cannot be prepared starts and serves all the same. The pool process also inherits the
worker's faster writer of a task's result as text (saga_worker/celery/result_text.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.worker_process import WorkerProcess

from .conftest import READY_TIMEOUT_S, Setup, wait_for
from .test_celery_redis_postgres import redis_setup

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]
TIMEOUT = 60


def _probe(setup: Setup, tmp_path: Path) -> tuple[dict[str, list[str]], str]:
    """What a fresh pool process of a worker of ``setup`` holds before any saga task; the worker's log."""
    queue = setup.saga["queue"]
    worker = WorkerProcess(
        ["celery", "-A", "tests.integration.probe_app", "worker", "-Q", queue],
        setup.env(),
        tmp_path / "worker.log",
        concurrency=1,
        beat=False,
        name="probe-",
    )
    client = setup.client()
    try:
        wait_for(worker.ready, READY_TIMEOUT_S, "the probe worker to be ready")
        got = client.send_task("probe.inherited", queue=queue).get(timeout=TIMEOUT)
        return got, worker.log.read_text(errors="replace")
    finally:
        client.close()
        worker.stop()


def test_a_pool_process_inherits_the_journals_statements_and_driver_from_the_worker(
    tmp_path: Path, pg_database_url: str
) -> None:
    got, log = _probe(redis_setup(tmp_path, pg_database_url), tmp_path)
    assert got == {
        "compiled": ["PGDialect_psycopg"],
        "imported": ["alembic", "psycopg"],
        "result_text": ["saga_worker.celery.result_text"],  # the same text as Celery's, made faster
    }, log
    assert "could not prepare" not in log


def test_a_worker_whose_journal_cannot_be_prepared_starts_says_why_and_serves(tmp_path: Path) -> None:
    # psycopg 2's URL: the journal refuses it (and names psycopg 3) on open, and so before forking.
    bad = "postgresql+psycopg2://shop:s3cret-pw@127.0.0.1:5432/shop"
    got, log = _probe(redis_setup(tmp_path, bad), tmp_path)
    assert got["compiled"] == [], log
    assert "saga-worker could not prepare its journal before starting its pool" in log
    assert "PostgreSQL journals use psycopg 3" in log
    assert "s3cret-pw" not in log
