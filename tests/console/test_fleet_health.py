"""The fleet's health (issue 48, item 3) on a real worker, Redis and PostgreSQL: with beat running
(inside the worker, a 1 s sweep interval) the console's header, `GET /api/health` and `saga-worker
status --json` name the worker, the queue's depth and a recent sweep; with beat stopped, they turn
overdue within three sweep intervals, red in the header, with exit code 4 and the metric at 1."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Setup, Workers, redis_setup, wait_for

from .conftest import ConsoleServer, Tokens

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def setup(tmp_path: Path, pg_url: str) -> Setup:
    setup = redis_setup(tmp_path, pg_url)
    setup.saga["sweep_interval"] = 1.0
    return setup


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(tmp_path)
    yield pool
    pool.stop_all()


@pytest.fixture
def console(setup: Setup, tokens: Tokens, tmp_path: Path) -> Iterator[ConsoleServer]:
    server = ConsoleServer(setup, tokens, tmp_path / "console.log")
    yield server
    server.stop()


class Viewer:
    """GETs on the console as a viewer's bearer token (the standard library: the core suite has no
    httpx)."""

    class Page:
        def __init__(self, text: str) -> None:
            self.text = text

        def json(self) -> Any:
            return json.loads(self.text)

    def __init__(self, base: str, headers: dict[str, str]) -> None:
        self.base, self.headers = base.rstrip("/"), headers

    def get(self, path: str) -> Page:
        request = urllib.request.Request(self.base + path, headers=self.headers)
        with urllib.request.urlopen(request, timeout=30) as answer:
            return self.Page(answer.read().decode())


def status(setup: Setup) -> tuple[int, dict[str, Any]]:
    """``saga-worker status --json`` as an operator runs it: a process of its own, with the
    deployment's settings (in this process the Celery app is configured once, by whichever test first
    used it)."""
    done = subprocess.run(
        [sys.executable, "-m", "saga_worker.cli", "status", "--json"],
        env=setup.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, json.loads(done.stdout)


def test_the_header_and_status_turn_overdue_within_three_sweep_intervals_of_beat_stopping(
    setup: Setup, workers: Workers, console: ConsoleServer, tokens: Tokens
) -> None:
    bearer = {"Authorization": f"Bearer {tokens.viewer}"}
    web = Viewer(console.url, bearer)
    worker = workers.start(setup, beat=True, concurrency=1)

    def health() -> dict[str, Any]:
        found: dict[str, Any] = web.get("/api/health").json()
        return found

    # Preconditions, not timings: on a loaded machine beat's first sweeps can come late.
    wait_for(lambda: health()["beat"]["last_sweep_at"] is not None, 90, "beat's first sweep")
    wait_for(lambda: not health()["beat"]["overdue"], 90, "a sweep within three intervals")
    code, found = status(setup)
    assert found["beat"]["sweep_interval_s"] == 1.0 and found["beat"]["last_sweep_at"] is not None
    assert found["queue"] == setup.saga["queue"] and len(found["workers"]) == 1
    assert found["queue_depth"] == 0
    header = web.get("/").text
    assert re.search(r'id="fleet-workers"[^>]*>1 worker<', header) and re.search(
        r'id="fleet-beat"[^>]*>swept', header
    )

    worker.stop()  # and beat with it
    stopped = health()["beat"]["last_sweep_at"]
    wait_for(lambda: health()["beat"]["overdue"], 20, "the header to say beat is overdue")
    assert health()["beat"]["last_sweep_at"] == stopped  # no sweep since: overdue because beat stopped
    assert health()["beat"]["overdue_after_s"] == 3.0
    wait_for(lambda: 'data-overdue="yes"' in web.get("/").text, 20, "the header to turn red")
    assert re.search(r'class="fleet overdue"', web.get("/").text)
    code, found = status(setup)
    assert code == 4 and found["beat"]["overdue"] is True and found["workers"] == []
    metrics = web.get("/metrics").text
    assert "saga_beat_overdue 1.0" in metrics
    assert "beat is overdue" in console.log.read_text()
