"""A worker on a Celery release its speed patch was not checked against leaves it out,
says so in its log, and unwinds exactly as ever (Redis broker and results, PostgreSQL journal)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.worker_process import WorkerProcess

from . import scenarios
from .conftest import READY_TIMEOUT_S, redis_setup, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def worker_log(tmp_path: Path, pg_database_url: str) -> Iterator[tuple[Path, object]]:
    setup = redis_setup(tmp_path, pg_database_url)
    log = tmp_path / "worker.log"
    worker = WorkerProcess(
        ["celery", "-A", "tests.integration.unchecked_release_app:app", "worker"],
        setup.env(),
        log,
        concurrency=2,
        beat=False,
    )
    try:
        wait_for(worker.ready, READY_TIMEOUT_S, "the worker to be ready")
        yield log, setup
    finally:
        worker.stop()


def test_a_worker_on_an_unchecked_release_unwinds_on_the_dependencies_own_code(
    worker_log: tuple[Path, object], run_id: str
) -> None:
    log, setup = worker_log
    client, journal, ledger = setup.client(), setup.journal(), setup.ledger()  # type: ignore[attr-defined]
    try:
        scenarios.report_equals_the_library_report(setup, client, journal, ledger, run_id)  # type: ignore[arg-type]
    finally:
        ledger.close()
        journal.close()
        client.close()
    text = log.read_text(errors="replace")
    assert "celery 99.0 is outside the releases checked for a result's text written directly" in text
