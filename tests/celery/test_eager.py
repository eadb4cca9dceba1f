"""``task_always_eager=True`` (common in Django tests): ``compensate_run.delay(run_id).get()`` returns the
report, as on a worker (docs/reference/celery.md), on the SQL journals (issue 21, item 7)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

import saga_worker.celery as saga_celery
from saga_worker import executor, open_journal
from saga_worker.celery import install
from saga_worker.celery.install import _set_installed
from saga_worker.settings import SagaSettings
from tests.integration.scenarios import place_order
from tests.ledger import Ledger, open_ledger, order_tools

pytestmark = pytest.mark.celery


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


class Eager:
    def __init__(self, app: Celery, ledger: Ledger, failing: set[str]) -> None:
        self.app, self.ledger, self.failing = app, ledger, failing


@pytest.fixture
def eager(url: str, tmp_path: Path) -> Iterator[Eager]:
    app = Celery("django-like", set_as_current=False)
    app.conf.update(
        broker_url="memory://",
        result_backend="cache+memory://",
        task_always_eager=True,
    )
    ledger = open_ledger(url)
    failing: set[str] = set()

    def refuse(name: str, *_: Any) -> None:
        if name in failing:
            raise RuntimeError(f"{name}: the provider refused the compensation")

    settings = SagaSettings(home=tmp_path / "home", journal_url=url, queue="saga-eager")
    install(app, settings=settings, tools=order_tools(ledger, before_compensate=refuse), beat=False)
    try:
        yield Eager(app, ledger, failing)
    finally:
        ledger.close()
        app.close()
        _set_installed(None)
        executor.configure(None, None)


def test_eager_compensate_run_get_returns_the_report_of_the_completed_unwind(
    eager: Eager, url: str, run_id: str
) -> None:
    journal = open_journal(url)
    try:
        place_order(journal, eager.ledger, run_id)
        result = saga_celery.compensate_run.delay(run_id, reason="eager test")
        assert result.status == "SUCCESS"
        report = result.get()
        assert report["run_id"] == run_id and report["condemned"] is True
        assert [(e["tool_name"], e["status"]) for e in report["entries"]] == [
            ("notify", "compensated"),
            ("reserve", "compensated"),
            ("charge", "compensated"),
        ]
        info = journal.get_run(run_id)
        assert info is not None and info.unwind_state.value == "complete"
    finally:
        journal.close()


def test_eager_unwind_that_halts_returns_the_report_with_the_halt_and_the_rest_not_attempted(
    eager: Eager, url: str, run_id: str
) -> None:
    journal = open_journal(url)
    try:
        place_order(journal, eager.ledger, run_id)
        eager.failing.add("reserve")
        report = saga_celery.compensate_run.delay(run_id).get()
        assert [e["status"] for e in report["entries"]] == ["compensated", "failed", "not-attempted"]
        assert "provider refused" in report["entries"][1]["error"]
        eager.failing.clear()
        again = eager.app.tasks["saga.compensate_run"].delay(run_id).get()  # the task of the app itself
        assert [e["status"] for e in again["entries"]] == [
            "already-compensated",
            "compensated",
            "compensated",
        ]
    finally:
        journal.close()
