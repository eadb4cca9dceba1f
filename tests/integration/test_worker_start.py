"""A worker's main process prepares the journal before its pool forks (executor.prepare_journal):
each pool process then inherits the compiled statements and the driver and migration imports, rather
than paying for them on its first task (about a quarter of a second here, on every fresh pool
process: at the worker's start, and again after each ``--max-tasks-per-child`` replacement).

The time itself is the bench's to show (``python -m bench --only distributed``: the worker's first
unwind); these tests show what the pool process holds before its first saga task, and that a worker
whose journal cannot be prepared starts and serves all the same. The pool process also inherits the
worker's faster writer of a task's result as text (saga_worker/celery/result_text.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis

from tests.worker_process import WorkerProcess

from .conftest import READY_TIMEOUT_S, Setup, redis_setup, wait_for

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


BROKEN_TOOLS = "import shop_models_not_installed  # the app's models, missing from this deployment\n"


@pytest.mark.parametrize(
    "command",
    [
        ["celery", "-A", "saga_worker.celery:app", "worker"],
        ["saga_worker.cli", "worker", "--no-beat"],  # `saga-worker worker`, which runs the same
        ["celery", "-A", "tasks", "worker"],  # the checkout's shim
        ["celery", "-A", "tests.integration.host_app", "worker"],  # install(app) on a host's app
    ],
    ids=["celery-worker", "saga-worker-worker", "checkout-shim", "host-app"],
)
def test_a_worker_whose_tools_cannot_be_imported_refuses_to_start_shows_why_and_consumes_nothing(
    tmp_path: Path, pg_database_url: str, command: list[str]
) -> None:
    """Issue 43: a SAGA_TOOLS whose module fails to import stops the worker before it consumes:
    a worker that said ``ready`` would answer every unwind with the import error. The refusal is a
    ``worker_init`` handler, connected by the app factory and by install(app), never by an import
    (issue 44): each way of starting a worker has it."""
    (tmp_path / "shop_tools.py").write_text(BROKEN_TOOLS)
    setup = redis_setup(tmp_path, pg_database_url)
    setup.saga["tools"] = "shop_tools:TOOLS"
    env = setup.env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    env.update(HOST_BROKER_URL=setup.saga["broker_url"], HOST_RESULT_BACKEND=setup.saga["result_backend"])
    env["C_FORCE_ROOT"] = "1"  # the host app accepts pickle, and test machines may run as root
    client = setup.client()
    waiting = client.send_task("saga.compensate_run", args=["order-7"], queue=setup.saga["queue"])
    broker = redis.Redis.from_url(setup.saga["broker_url"])
    worker = WorkerProcess(command, env, tmp_path / "worker.log", concurrency=1, beat=False)
    try:
        wait_for(
            lambda: worker.proc.poll() is not None or b" ready." in worker.log.read_bytes(),
            READY_TIMEOUT_S,
            "the worker to exit or say it is ready",
        )
        log = worker.log.read_text(errors="replace")
        assert " ready." not in log, log
        assert worker.proc.wait() != 0, log
        assert (
            "error: saga-worker cannot load its tools: SAGA_TOOLS='shop_tools:TOOLS': cannot import "
            "'shop_tools': ModuleNotFoundError: No module named 'shop_models_not_installed'"
        ) in log
        assert broker.llen(setup.saga["queue"]) == 1  # the unwind waits for a worker that can run it
        assert waiting.state == "PENDING"
    finally:
        worker.stop()
        broker.close()
        client.close()
