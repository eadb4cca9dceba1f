"""``task_always_eager=True`` (common in Django tests): ``compensate_run.delay(run_id).get()`` returns the
report, as on a worker (docs/reference/celery.md), on the SQL journals (issue 21, item 7)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

import saga_worker.celery as saga_celery
from saga_worker import executor, open_journal, saga
from saga_worker.celery import install
from saga_worker.celery.install import _set_installed
from saga_worker.journal.records import UnwindState
from saga_worker.settings import SagaSettings, get_settings
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


def test_the_sweepers_redrive_is_checked_as_every_unwind_request_and_a_bad_actor_sends_nothing(
    eager: Eager, url: str, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweeper sends its re-drives through actions (issue 44): a SAGA_ACTOR the audit trail
    cannot hold is refused by the sweep itself, with the words `saga-worker compensate` uses, and
    no unwind is sent (each would be refused by the worker, later and unseen)."""
    journal = open_journal(url)
    try:
        place_order(journal, eager.ledger, run_id)
        eager.failing.add("reserve")
        saga_celery.compensate_run.delay(run_id).get()  # halted: incomplete, left to the sweeper
        eager.failing.clear()
        run = journal.get_run(run_id)
        assert run is not None and run.unwind_state is UnwindState.INCOMPLETE
        # The sweeper's time has come (the unwind held the run off it for a grace period).
        journal.set_unwind_state(run_id, run.unwind_state, note=run.unwind_note, next_at=journal.now() - 1)
        before = [u.unwind_id for u in journal.list_unwinds(run_id)]
        monkeypatch.setenv("SAGA_ACTOR", "ops\nforged line")
        get_settings.cache_clear()
        swept = eager.app.tasks["saga.retry_uncertain"].apply()
        assert swept.failed(), swept.result
        assert str(swept.result).startswith("SAGA_ACTOR: actor 'ops\\nforged line' holds the control")
        assert [u.unwind_id for u in journal.list_unwinds(run_id)] == before  # nothing sent
        monkeypatch.delenv("SAGA_ACTOR")
        get_settings.cache_clear()
        # The sweep booked its next look before sending (a lost message makes the run due again
        # later): that time has come too.
        journal.set_unwind_state(run_id, run.unwind_state, note=run.unwind_note, next_at=journal.now() - 1)
        assert eager.app.tasks["saga.retry_uncertain"].apply().get() == {"redriven": [run_id], "flagged": []}
        info = journal.get_run(run_id)
        assert info is not None and info.unwind_state.value == "complete"
    finally:
        journal.close()
        get_settings.cache_clear()


def test_eager_compensate_run_with_parallel_undoes_a_group_in_the_one_task_and_numbers_groups(
    eager: Eager, url: str, run_id: str
) -> None:
    tools = order_tools(eager.ledger)
    with open_journal(url) as journal:
        with saga(run_id, journal=journal, tools=tools) as run:
            run.call("charge", {"amount": 10})
            with run.parallel():
                run.call("reserve", {"sku": "A1"})
                run.call("notify", {"to": "ann"})
        report = saga_celery.compensate_run.delay(run_id, parallel=True).get()
        assert [(e["tool_name"], e["group"], e["status"]) for e in report["entries"]] == [
            ("notify", 2, "compensated"),
            ("reserve", 2, "compensated"),
            ("charge", 1, "compensated"),
        ]
        info = journal.get_run(run_id)
        assert info is not None and info.unwind_state is UnwindState.COMPLETE
    counts = eager.ledger.call_counts("compensate:")
    assert [counts[e["idempotency_key"]] for e in report["entries"]] == [1, 1, 1]  # each undone once
