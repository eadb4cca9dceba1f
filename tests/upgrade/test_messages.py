"""With default settings the current code's workers send only tasks the previous release runs
(issue 51: a new task type is sent only behind a setting, or once no worker of the previous release
consumes the queue). A real worker of the current code, its beat on, unwinds runs while every task
it publishes is written down; each name must be one the previous release registers."""

from __future__ import annotations

import os
import random
import time
import uuid
from pathlib import Path

import pytest

from saga_worker import open_journal, run_durable
from saga_worker.celery import make_app
from saga_worker.settings import SagaSettings
from tests.services import REDIS_URL, require
from tests.worker_process import WorkerProcess

from . import sides
from .previous import Release
from .tasks import tasks_of

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]

HERE = Path(__file__).resolve().parent


def test_a_current_worker_with_default_settings_sends_only_tasks_the_previous_release_runs(
    previous: Release, pg_url: str, tmp_path: Path
) -> None:
    require("redis")
    redis = REDIS_URL.rsplit("/", 1)[0] + f"/{random.randint(1, 15)}"
    saga = {
        "journal_url": pg_url,
        "broker_url": redis,
        "result_backend": redis,
        "redis_url": redis,
        "queue": f"saga-upgrade-{uuid.uuid4().hex[:8]}",
        "home": str(tmp_path / "home"),
        "tools": "sides:TOOLS",
        "claim_ttl": "2",
        "sweep_interval": "1",
    }
    published, ledger = tmp_path / "published.txt", tmp_path / "provider.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGA_")}
    env.update({f"SAGA_{k.upper()}": v for k, v in saga.items()})
    env.update(
        PUBLISHED_LOG=str(published),
        SIDES_LEDGER=str(ledger),
        PYTHONPATH=os.pathsep.join([str(HERE.parents[1]), str(HERE)]),
    )
    worker = WorkerProcess(
        ["tests.upgrade.recording_worker"], env, tmp_path / "worker.log", concurrency=2, beat=True
    )
    client = make_app(SagaSettings(**saga), main="upgrade-messages")  # type: ignore[arg-type]  # strings, as the environment gives them
    journal = open_journal(pg_url)
    try:
        deadline = time.monotonic() + 60
        while not worker.ready():
            assert time.monotonic() < deadline, worker.tail()
            time.sleep(0.1)
        reports = []
        for n in range(2):
            run_id = f"messages-{n}-{uuid.uuid4().hex[:6]}"
            run_durable(run_id, journal=journal, tools=sides.tools(), planner=sides.plan())
            reports.append(client.send_task("saga.compensate_run", args=[run_id]).get(timeout=60))
        assert all(r["condemned"] for r in reports), reports
        deadline = time.monotonic() + 30
        while not published.exists() or "saga.retry_uncertain" not in published.read_text():
            assert time.monotonic() < deadline, "beat sent no sweep in 30 s:\n" + worker.tail()
            time.sleep(0.2)
    finally:
        journal.close()
        client.close()
        worker.stop()
    sent = set(published.read_text().split())
    runs = set(tasks_of(previous)["tasks"])
    assert {"saga.compensate_step", "saga.retry_uncertain"} <= sent, sent
    assert sent <= runs, f"sent with default settings, unknown to {previous.tag}: {sorted(sent - runs)}"
