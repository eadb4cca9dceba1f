"""Fixtures of the fault suite: the ledger beside a PostgreSQL journal, and the environment a worker
process needs. The soak tier only runs when asked (``make soak``: ``-m soak``, or ``SAGA_SOAK=1``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from saga_worker import Journal, open_journal
from saga_worker.core import faults
from tests.services import require

from . import toolkit
from .deployment import Deployment
from .harness import REPO, OwnRedis
from .ledger import Ledger


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    markexpr = config.getoption("markexpr", "") or ""
    wanted = os.environ.get("SAGA_SOAK") == "1" or ("soak" in markexpr and "not soak" not in markexpr)
    if wanted:
        return
    skip = pytest.mark.skip(reason="soak tier: run it with `make soak` (or SAGA_SOAK=1)")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def fault_points_enabled() -> Iterator[None]:
    """The suite's in-process tests arm fault points with ``faults.configure``: allowed only here.
    (Its worker processes enable them in their own entry points, tests.faults.child and
    tests.faults.celery_worker.)"""
    faults.enable()
    yield
    faults.disable()


@pytest.fixture
def fault_ledger(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ledger]:
    """The ledger, emptied; the toolkit's tools in this process report to it too."""
    led = Ledger(pg_url)
    led.setup()
    led.reset()
    monkeypatch.setenv("FAULT_LEDGER_URL", pg_url)
    monkeypatch.setattr(toolkit, "_ledger", led)
    yield led
    led.close()


@pytest.fixture
def pg_journal(pg_url: str) -> Iterator[Journal]:
    j = open_journal(pg_url)
    yield j
    j.close()


@pytest.fixture
def worker_env(pg_url: str, fault_ledger: Ledger) -> dict[str, str]:
    """What a worker process is started with: the journal, the ledger, a short claim TTL, no faults."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAGA_FAULTS", "FAULT_"))}
    env.update(
        SAGA_JOURNAL_URL=pg_url,
        FAULT_LEDGER_URL=pg_url,
        SAGA_CLAIM_TTL="2",
        PYTHONPATH=str(REPO),
        SAGA_TOOLS="tests.faults.toolkit:TOOLS",
    )
    return env


@pytest.fixture
def deployment(tmp_path: Path, pg_url: str, worker_env: dict[str, str]) -> Iterator[Deployment]:
    """A Celery deployment on the suite's own Redis (no persistence) and the session's PostgreSQL."""
    require("redis")  # the shared one is not used, but no Redis binary means no Redis tests
    redis = OwnRedis(persistent=False)
    redis.start()
    dep = Deployment(tmp_path, pg_url, worker_env, redis)
    yield dep
    dep.close()
