"""Real Celery workers for the integration tests: subprocesses in their own process group, started
with the SAGA_* environment of one setup (Redis + PostgreSQL, RabbitMQ, embedded SQLite), always
killed in teardown. Each setup gets its own queue (and Redis database) so parallel sessions never
consume each other's messages."""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from saga_worker import Journal, open_journal
from saga_worker.celery import make_app
from saga_worker.settings import SagaSettings
from tests.ledger import Ledger, open_ledger
from tests.services import REDIS_URL, require
from tests.worker_process import WorkerProcess

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60.0


@dataclass
class Setup:
    """One deployment: the SAGA_* settings workers and the test's client share."""

    saga: dict[str, Any]
    control: Path
    scope: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def settings(self) -> SagaSettings:
        return SagaSettings(**self.saga)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAGA_")}
        env.update({f"SAGA_{k.upper()}": str(v) for k, v in self.saga.items() if v is not None})
        env.update(
            SAGA_TEST_CONTROL=str(self.control),
            SAGA_TEST_SCOPE=self.scope,
            PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        )
        return env

    def journal(self) -> Journal:
        return open_journal(self.settings().resolved_journal_url(), migrate=True)

    def ledger(self) -> Ledger:
        return open_ledger(self.settings().resolved_journal_url(), scope=self.scope)

    def client(self) -> Celery:
        return make_app(self.settings(), main="saga-test-client")

    def control_file(self, run_id: str, action: str, tool: str, text: str = "") -> Path:
        path = self.control / f"{run_id}.{action}-{tool}"
        path.write_text(text)
        return path


def make_setup(tmp: Path, **saga: Any) -> Setup:
    control = tmp / "control"
    control.mkdir(parents=True, exist_ok=True)
    # Every field named, so a SAGA_* variable in the test's own environment cannot leak into the client.
    base = {
        "journal_url": None,
        "broker_url": None,
        "result_backend": None,
        "redis_url": None,
        "home": str(tmp / "home"),
        "tools": "tests.integration.worker_tools:tools",
        "queue": f"saga-t-{uuid.uuid4().hex[:10]}",
        "claim_ttl": 2.0,
        "sweep_interval": 1.0,
        "sweep_backoff": 0.5,
        "sweep_backoff_max": 2.0,
        "visibility_timeout": 8.0,
    }
    base.update(saga)
    return Setup(base, control)


def redis_db() -> int:
    """A Redis database number of its own (1-15; 0 is left to people) so sessions do not collide."""
    return random.randint(1, 15)


def redis_setup(tmp: Path, journal_url: str) -> Setup:
    """A deployment on Redis (broker, results, locks: a database of this session's own) and ``journal_url``."""
    require("redis")
    url = REDIS_URL.rsplit("/", 1)[0] + f"/{redis_db()}"
    return make_setup(tmp, broker_url=url, result_backend=url, redis_url=url, journal_url=journal_url)


class Worker(WorkerProcess):
    def __init__(
        self, setup: Setup, log: Path, *, beat: bool, concurrency: int, events: bool = False
    ) -> None:
        super().__init__(
            ["celery", "-A", "saga_worker.celery:app", "worker"],
            setup.env(),
            log,
            concurrency=concurrency,
            beat=beat,
            events=events,
        )

    def wait_ready(self) -> Worker:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if self.ready():
                    return self
            except AssertionError as exc:
                pytest.fail(f"before it was ready: {exc}")
            time.sleep(0.1)
        pytest.fail(f"worker not ready after {READY_TIMEOUT_S:.0f}s:\n{self.tail()}")


class Workers:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.started: list[Worker] = []

    def start(
        self, setup: Setup, *, beat: bool = False, concurrency: int = 2, events: bool = False
    ) -> Worker:
        worker = Worker(
            setup,
            self.tmp / f"worker-{len(self.started)}.log",
            beat=beat,
            concurrency=concurrency,
            events=events,
        )
        self.started.append(worker)
        return worker.wait_ready()

    def stop_all(self) -> None:
        for worker in self.started:
            worker.stop()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(tmp_path)
    yield pool
    pool.stop_all()


@pytest.fixture(scope="module")
def module_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    pool = Workers(tmp_path_factory.mktemp("workers"))
    yield pool
    pool.stop_all()


def wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    """Wait for a condition a test needs before acting (not a timed assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"gave up waiting for {what} after {timeout:.0f}s")
