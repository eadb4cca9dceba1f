"""Flower shows each step of an unwind as its own task (docs/reference/celery.md, issue 23): a real
``celery flower`` process on a loopback port, a real worker started with ``--events`` (Redis broker,
results and locks, PostgreSQL journal), and what Flower itself answers at ``/api/tasks``.

One row per step, named ``saga.compensate_step``, its id derived from the unwind and the step
(``<run id>:<step>:<coordinator's task id>``), the run id and the step in its arguments too; ``COMPENSATING`` while its hook runs,
then ``SUCCESS``, or ``FAILURE`` with the hook's error for the step that halted the unwind; no row for
a step the unwind never reached. ``.get()`` on the coordinator's id still returns the report.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.result import AsyncResult

from saga_worker import Journal, saga
from saga_worker.core.keys import compensate_key
from tests.console.conftest import CHROMIUM, CHROMIUM_ARGS, DOCS, free_port, missing
from tests.ledger import Ledger, order_tools
from tests.services import REDIS_URL, require

from . import scenarios
from .conftest import REPO, Setup, Workers, make_setup, redis_db, wait_for

pytestmark = [pytest.mark.celery, pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]

pytest.importorskip("flower")

USER, PASSWORD = "operator", "flower-test-secret"
STEP = "saga.compensate_step"


class Flower:
    """``celery -A saga_worker.celery:app flower`` on a free loopback port, with basic auth (as
    docker-compose runs it), in a process group of its own, its output in a log file."""

    def __init__(self, setup: Setup, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._out = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "saga_worker.celery:app",
                "flower",
                "--address=127.0.0.1",
                f"--port={self.port}",
                f"--basic_auth={USER}:{PASSWORD}",
            ],
            cwd=REPO,
            env=setup.env(),
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def get(self, path: str) -> Any:
        request = urllib.request.Request(self.url + path)
        token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    def up(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"flower exited with {self.proc.returncode}:\n{self.tail()}")
        try:
            self.get("/api/workers")
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False
        return True

    def tasks(self) -> dict[str, dict[str, Any]]:
        """Flower's own answer: every task it has seen, by task id."""
        return dict(self.get("/api/tasks"))

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self._out.close()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, pg_database_url: str) -> Setup:
    require("redis")
    url = REDIS_URL.rsplit("/", 1)[0] + f"/{redis_db()}"
    return make_setup(
        tmp_path_factory.mktemp("flower"),
        broker_url=url,
        result_backend=url,
        redis_url=url,
        journal_url=pg_database_url,
    )


@pytest.fixture(scope="module")
def flower(
    setup: Setup, module_workers: Workers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Flower]:
    """Flower first, then the worker (``--events``), then a probe: a dry run of a run nobody knows,
    sent until Flower has shown its task, so the tests' events are not sent before Flower listens."""
    process = Flower(setup, tmp_path_factory.mktemp("flower-log") / "flower.log")
    try:
        wait_for(process.up, 60, "flower to answer")
        module_workers.start(setup, concurrency=2, events=True)
        client = setup.client()
        try:
            deadline = time.monotonic() + 60
            while True:
                probe = client.signature("saga.compensate_run").delay("flower-probe", dry_run=True)
                probe.get(timeout=60, interval=0.05)
                if _seen(process, probe.id) or time.monotonic() > deadline:
                    break
            wait_for(lambda: _seen(process, probe.id), 30, "flower to show a task")
        finally:
            client.close()
        yield process
    finally:
        process.stop()


def _seen(flower: Flower, task_id: str) -> bool:
    return flower.tasks().get(task_id, {}).get("state") == "SUCCESS"


@pytest.fixture
def parts(setup: Setup) -> Iterator[tuple[Celery, Journal, Ledger]]:
    client, journal, ledger = setup.client(), setup.journal(), setup.ledger()
    yield client, journal, ledger
    ledger.close()
    journal.close()
    client.close()


def step_rows(flower: Flower, run_id: str) -> dict[str, dict[str, Any]]:
    """Flower's rows of this run's step tasks, by task id."""
    return {
        task_id: row
        for task_id, row in flower.tasks().items()
        if row.get("name") == STEP and repr(run_id) in (row.get("args") or "")
    }


def states(flower: Flower, run_id: str) -> dict[str, str]:
    return {task_id: row["state"] for task_id, row in step_rows(flower, run_id).items()}


def settled(flower: Flower, run_id: str, expected: dict[str, str]) -> None:
    wait_for(lambda: states(flower, run_id) == expected, 30, f"flower to show {expected}")


def test_each_step_is_a_row_of_its_own_compensating_while_its_hook_runs_then_success(
    flower: Flower, setup: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    client, journal, ledger = parts
    scenarios.place_order(journal, ledger, run_id)
    hold = setup.control_file(run_id, "hold", "reserve")  # step 2 of 3 (notify, reserve, charge)
    pending = client.signature("saga.compensate_run").delay(run_id)
    first, second, third = (f"{run_id}:{s}:{pending.id}" for s in scenarios.SUFFIXES)
    try:
        wait_for((setup.control / f"{run_id}.holding-reserve").exists, 60, "the reserve hook to start")
        # While the hook runs: step 1 done, step 2 COMPENSATING, step 3 not sent yet.
        settled(flower, run_id, {first: "SUCCESS", second: "COMPENSATING"})
    finally:
        hold.unlink()
    report = pending.get(timeout=60, interval=0.05)  # the coordinator's id: the report
    assert scenarios.statuses(report) == ["compensated"] * 3
    settled(flower, run_id, {first: "SUCCESS", second: "SUCCESS", third: "SUCCESS"})
    rows = step_rows(flower, run_id)
    for task_id, suffix in zip((first, second, third), scenarios.SUFFIXES, strict=True):
        row = rows[task_id]
        assert row["name"] == STEP
        assert repr(run_id) in row["args"] and repr(suffix) in row["args"]
        assert "'status': 'compensated'" in row["result"] and repr(suffix) in row["result"]
    coordinator = flower.tasks()[pending.id]
    assert coordinator["name"] == "saga.compensate_run" and repr(run_id) in coordinator["args"]
    assert scenarios.compensations(ledger, run_id) == {s: 1 for s in scenarios.SUFFIXES}


def test_a_failed_step_reads_failure_with_its_error_and_the_steps_after_it_are_absent(
    flower: Flower, setup: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    client, journal, ledger = parts
    scenarios.place_order(journal, ledger, run_id)
    setup.control_file(run_id, "fail", "reserve")
    pending = client.signature("saga.compensate_run").delay(run_id)
    report = pending.get(timeout=60, interval=0.05)  # a report, not an exception
    assert scenarios.statuses(report) == ["compensated", "failed", "not-attempted"]
    first, second = (f"{run_id}:{s}:{pending.id}" for s in scenarios.SUFFIXES[:2])
    settled(flower, run_id, {first: "SUCCESS", second: "FAILURE"})  # no row for step 3 (call-1)
    failed = step_rows(flower, run_id)[second]
    assert "'call-2'" in failed["args"]
    assert "CompensationStepFailed" in failed["exception"]
    assert "reserve: the provider refused the compensation" in failed["exception"]
    assert run_id in failed["exception"] and "call-2" in failed["exception"]
    assert AsyncResult(pending.id, app=client).get(timeout=10) == report  # and again, by id


def test_a_redelivered_step_keeps_its_task_id_one_row_in_flower(
    flower: Flower, setup: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    client, journal, ledger = parts
    scenarios.place_order(journal, ledger, run_id)
    setup.control_file(run_id, "kill", "reserve")  # the pool child dies in step 2's hook, once
    pending = client.signature("saga.compensate_run").delay(run_id)
    report = pending.get(timeout=90, interval=0.05)
    assert scenarios.statuses(report) == ["compensated"] * 3
    key = compensate_key(run_id, "call-2")
    assert ledger.call_counts("start:reserve")[key] == 2  # delivered twice: killed, then redelivered
    expected = {f"{run_id}:{s}:{pending.id}": "SUCCESS" for s in scenarios.SUFFIXES}
    settled(flower, run_id, expected)  # one row for step 2, under the id both deliveries carried
    assert scenarios.compensations(ledger, run_id) == {s: 1 for s in scenarios.SUFFIXES}


def test_a_parallel_unwinds_group_shows_its_steps_compensating_at_once_each_a_row_of_its_own(
    flower: Flower, setup: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    client, journal, ledger = parts
    with saga(run_id, journal=journal, tools=order_tools(ledger)) as run:  # charge, then one group
        run.call("charge", {"amount": 10, "currency": "EUR"})
        with run.parallel():
            run.call("reserve", {"sku": "A1", "qty": 2})
            run.call("notify", {"to": "c@example.com"})
    holds = [setup.control_file(run_id, "hold", name) for name in ("reserve", "notify")]
    pending = client.signature("saga.compensate_run").delay(run_id, parallel=True)
    notify, reserve, charge = (f"{run_id}:{s}:{pending.id}" for s in scenarios.SUFFIXES)
    try:
        for name in ("reserve", "notify"):  # both hooks in flight at once, on two pool processes
            wait_for((setup.control / f"{run_id}.holding-{name}").exists, 60, f"the {name} hook to start")
        settled(flower, run_id, {notify: "COMPENSATING", reserve: "COMPENSATING"})  # charge waits
    finally:
        for hold in holds:
            hold.unlink()
    report = pending.get(timeout=60, interval=0.05)
    assert [(e["group"], e["suffix"], e["status"]) for e in report["entries"]] == [
        (2, "call-3", "compensated"),
        (2, "call-2", "compensated"),
        (1, "call-1", "compensated"),
    ]
    settled(flower, run_id, {notify: "SUCCESS", reserve: "SUCCESS", charge: "SUCCESS"})
    assert scenarios.compensations(ledger, run_id) == {s: 1 for s in scenarios.SUFFIXES}


def test_flower_tasks_page_screenshot(
    flower: Flower, setup: Setup, parts: tuple[Celery, Journal, Ledger], run_id: str
) -> None:
    """docs/flower-steps.png (``make screenshots``): Flower's tasks page with one unwind that halted
    at a failed step and one whose second step is compensating, in Debian's Chromium."""
    if not Path(CHROMIUM).exists():
        missing(f"no browser at {CHROMIUM} (apt-get install chromium; `make test` does)")
    sync_api = pytest.importorskip("playwright.sync_api")
    client, journal, ledger = parts
    halted, running = f"{run_id}-halted", f"{run_id}-running"
    for run in (halted, running):
        scenarios.place_order(journal, ledger, run)
    setup.control_file(halted, "fail", "reserve")
    report = scenarios.unwind(client, halted)
    assert scenarios.statuses(report) == ["compensated", "failed", "not-attempted"]
    hold = setup.control_file(running, "hold", "reserve")
    pending = client.signature("saga.compensate_run").delay(running)
    try:
        wait_for((setup.control / f"{running}.holding-reserve").exists, 60, "the reserve hook to start")
        first, second = (f"{running}:{s}:{pending.id}" for s in scenarios.SUFFIXES[:2])
        settled(flower, running, {first: "SUCCESS", second: "COMPENSATING"})
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(
                    viewport={"width": 1760, "height": 760},
                    http_credentials={"username": USER, "password": PASSWORD},
                )
                page.goto(f"{flower.url}/tasks")
                page.locator("input[type=search]").fill(run_id)
                page.get_by_text("COMPENSATING").first.wait_for()
                page.get_by_text("FAILURE").first.wait_for()
                page.screenshot(path=str(DOCS / "flower-steps.png"), full_page=True)
            finally:
                browser.close()
    finally:
        hold.unlink()
    assert scenarios.statuses(pending.get(timeout=60, interval=0.05)) == ["compensated"] * 3
