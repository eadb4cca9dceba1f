"""What every Celery setup must show (issue 4), written once and run on each broker and journal."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, cast

import pytest
from celery import Celery

from saga_worker import Journal, compensate_run, run_durable, scripted
from saga_worker.core.keys import compensate_key
from saga_worker.core.storable import ESCAPED_NOTE
from saga_worker.journal.records import ClaimStatus
from tests.ledger import Ledger, order_script, order_tools

from .conftest import Setup

SUFFIXES = ["call-3", "call-2", "call-1"]  # unwind order: notify, reserve, charge
GET_TIMEOUT_S = 60.0


def place_order(journal: Journal, ledger: Ledger, run_id: str) -> None:
    result = run_durable(
        run_id, journal=journal, tools=order_tools(ledger), planner=scripted(*order_script())
    )
    assert result.status == "finished"


def unwind(
    client: Celery, run_id: str, *, dry_run: bool = False, timeout: float = GET_TIMEOUT_S
) -> dict[str, Any]:
    """``compensate_run.delay(run_id, dry_run=...).get()``, through a client of the same deployment."""
    result = client.signature("saga.compensate_run").delay(run_id, dry_run=dry_run)
    return dict(result.get(timeout=timeout, interval=0.05))


def as_run(report: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(json.dumps(report).replace(old, new)))


def statuses(report: dict[str, Any]) -> list[str]:
    return [e["status"] for e in report["entries"]]


def compensations(ledger: Ledger, run_id: str) -> dict[str, int]:
    """Effects the provider applied per compensation key of this run (a key applied twice shows 2)."""
    counts = ledger.call_counts("compensate:")
    return {s: counts[compensate_key(run_id, s)] for s in SUFFIXES}


def report_equals_the_library_report(
    setup: Setup, client: Celery, journal: Journal, ledger: Ledger, run_id: str
) -> None:
    twin = run_id + "-lib"
    place_order(journal, ledger, run_id)
    place_order(journal, ledger, twin)
    plan = compensate_run(run_id, journal=journal, tools=order_tools(ledger), dry_run=True)
    assert unwind(client, run_id, dry_run=True) == plan.model_dump(mode="json")
    library = compensate_run(twin, journal=journal, tools=order_tools(ledger))
    over_celery = unwind(client, run_id)
    assert over_celery == as_run(library.model_dump(mode="json"), twin, run_id)
    assert statuses(over_celery) == ["compensated"] * 3
    assert compensations(ledger, run_id) == {s: 1 for s in SUFFIXES}


def dry_run_plans_without_condemning(
    setup: Setup, client: Celery, journal: Journal, ledger: Ledger, run_id: str
) -> None:
    place_order(journal, ledger, run_id)
    plan = unwind(client, run_id, dry_run=True)
    assert plan["dry_run"] is True and plan["condemned"] is False
    assert statuses(plan) == ["would-compensate"] * 3
    run = journal.get_run(run_id)
    assert run is not None and not run.condemned
    assert [c for c in ledger.calls() if c.key.startswith(f"{run_id}:comp:")] == []


def failing_step_halts_with_a_report(
    setup: Setup, client: Celery, journal: Journal, ledger: Ledger, run_id: str
) -> None:
    twin = run_id + "-lib"
    place_order(journal, ledger, run_id)
    place_order(journal, ledger, twin)
    setup.control_file(run_id, "fail", "reserve")
    setup.control_file(twin, "fail", "reserve")
    from .worker_tools import before_compensate  # the same failing hook, in this process

    def failing(name: str, input: Any, output: Any, opts: Any) -> None:
        before_compensate(ledger, name, opts, setup.control)

    library = compensate_run(twin, journal=journal, tools=order_tools(ledger, before_compensate=failing))
    report = unwind(client, run_id)  # a report, not an exception
    assert statuses(report) == ["compensated", "failed", "not-attempted"]
    assert "refused" in report["entries"][1]["error"]
    assert report == as_run(library.model_dump(mode="json"), twin, run_id)
    assert compensations(ledger, run_id) == {"call-3": 1, "call-2": 0, "call-1": 0}
    assert (
        ledger.call_counts("start:")[compensate_key(run_id, "call-1")] == 0
    )  # nothing probed after the halt


def unstorable_error_text_halts_with_a_readable_report(
    setup: Setup, client: Celery, journal: Journal, ledger: Ledger, run_id: str
) -> None:
    """A hook whose error holds a NUL and a lone surrogate: the caller still gets a report (issue 10,
    item 3), the error reads escaped, and the step's claim is released for the next unwind."""
    place_order(journal, ledger, run_id)
    fail = setup.control_file(run_id, "fail", "reserve", " (card \\x00 \\ud800)")
    report = unwind(client, run_id)
    assert statuses(report) == ["compensated", "failed", "not-attempted"]
    error = report["entries"][1]["error"]
    assert "(card \\x00 \\ud800)" in error and ESCAPED_NOTE in error
    claim = journal.get_claim(run_id, "call-2")
    assert claim is not None and claim.status is ClaimStatus.FAILED
    fail.unlink()
    assert statuses(unwind(client, run_id)) == ["already-compensated", "compensated", "compensated"]
    assert compensations(ledger, run_id) == {s: 1 for s in SUFFIXES}


def task_sent_by_name_returns_the_report(
    setup: Setup, client: Celery, journal: Journal, ledger: Ledger, run_id: str
) -> None:
    place_order(journal, ledger, run_id)
    result = client.send_task("saga.compensate_run", args=[run_id], kwargs={"dry_run": False})
    report = result.get(timeout=GET_TIMEOUT_S, interval=0.05)
    assert report["run_id"] == run_id and report["condemned"] is True
    assert statuses(report) == ["compensated"] * 3


def two_unwinds_at_once_compensate_each_step_once(
    setup: Setup, client: Celery, journal: Journal, ledger: Ledger, run_id: str
) -> None:
    place_order(journal, ledger, run_id)
    setup.control_file(run_id, "slow", "notify", "1")  # keep the first step held while the other arrives
    reports: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            reports.append(unwind(client, run_id))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(reports) == 2
    assert compensations(ledger, run_id) == {s: 1 for s in SUFFIXES}
    allowed = {"compensated", "already-compensated", "busy", "not-attempted"}
    for report in reports:
        assert set(statuses(report)) <= allowed
    for position in range(3):
        done = [r["entries"][position]["status"] for r in reports]
        assert done.count("compensated") == 1, done


def bad_inputs_are_refused_before_the_tombstone(
    setup: Setup, client: Celery, journal: Journal, ledger: Ledger, run_id: str
) -> None:
    """A ``dry_run`` that is not a JSON boolean, or a task id too long to be the unwind id: the caller
    gets a clear error, and the run is not condemned (issue 10, item 7)."""
    place_order(journal, ledger, run_id)
    for kwargs, task_id, match in (
        ({"dry_run": "false"}, None, "dry_run must be true or false"),
        ({"dry_run": None}, None, "dry_run must be true or false"),
        ({"dry_run": 0}, None, "dry_run must be true or false"),
        ({}, "t" * 300, "unwind id"),
    ):
        result = client.send_task("saga.compensate_run", args=[run_id], kwargs=kwargs, task_id=task_id)
        with pytest.raises(Exception, match=match):
            result.get(timeout=GET_TIMEOUT_S, interval=0.05)
        run = journal.get_run(run_id)
        assert run is not None and not run.condemned, (kwargs, task_id)
    assert [c for c in ledger.calls() if c.key.startswith(f"{run_id}:comp:")] == []


def unknown_record_status_fails_closed(
    setup: Setup, client: Celery, journal: Journal, ledger: Ledger, run_id: str
) -> None:
    """A record whose status the code does not know: the caller gets MalformedRecordError naming the
    run, the step and the value, the run stays condemned, and no hook runs (issue 10, item 1)."""
    import sqlalchemy as sa

    from saga_worker import SqlJournal
    from saga_worker.journal.schema import records

    place_order(journal, ledger, run_id)
    assert isinstance(journal, SqlJournal)
    with journal.engine.begin() as conn:
        where = sa.and_(records.c.run_id == run_id, records.c.suffix == "call-2")
        assert conn.execute(sa.update(records).where(where).values(status="SUCCEEDED")).rowcount == 1
    result = client.signature("saga.compensate_run").delay(run_id)
    with pytest.raises(Exception, match="malformed journal record") as info:
        result.get(timeout=GET_TIMEOUT_S, interval=0.05)
    assert run_id in str(info.value) and "'call-2'" in str(info.value) and "'SUCCEEDED'" in str(info.value)
    run = journal.get_run(run_id)
    assert run is not None and run.condemned and "cannot unwind" in (run.unwind_note or "")
    assert [c for c in ledger.calls() if c.key.startswith(f"{run_id}:comp:")] == []


def hook_that_kills_its_worker_every_time(
    setup: Setup, client: Celery, journal: Journal, ledger: Ledger, run_id: str, acked: Callable[[], None]
) -> None:
    """A compensate hook that kills the process running it, every time: its message is delivered
    SAGA_MAX_DELIVERIES times (3 by default), then answered with a failed step instead of running again;
    the run is flagged for a person, the message acknowledged (``acked`` checks the broker), and the
    worker serves the next unwind. Fixed and re-driven, the step is undone with its one key."""
    setup.control_file(run_id, "killalways", "reserve")
    place_order(journal, ledger, run_id)
    report = unwind(client, run_id, timeout=120)
    assert statuses(report) == ["compensated", "failed", "not-attempted"]
    step = report["entries"][1]
    assert step["worker_lost"] is True
    assert "was lost 3 times" in step["error"] and "SAGA_MAX_DELIVERIES=3" in step["error"]
    key = compensate_key(run_id, "call-2")
    # What is known, said as such: the hook ran each time and may have landed; a re-drive keeps the key.
    assert "none of the step's tool code was called" not in step["error"], step["error"]
    assert "its compensate hook was started 3 times" in step["error"], step["error"]
    assert "its outcome was never recorded: it may have taken effect" in step["error"], step["error"]
    assert f"calls the hook again with the same key {key!r}" in step["error"], step["error"]
    assert ledger.call_counts("start:reserve")[key] == 3  # delivered 3 times, then answered, not run
    assert ledger.call_counts("compensate:")[key] == 0
    # Not left for the sweeper, which would run the killer again: flagged for a person, naming the step.
    run = journal.get_run(run_id)
    assert run is not None and run.unwind_state.value == "attention"
    assert run.unwind_note is not None and "call-2 (tool 'reserve')" in run.unwind_note
    acked()
    other = run_id + "-next"
    place_order(journal, ledger, other)
    assert statuses(unwind(client, other)) == ["compensated"] * 3
    # Once the hook is fixed, a person's re-drive undoes the step, with the same key.
    (setup.control / f"{run_id}.killalways-reserve").unlink()
    again = unwind(client, run_id)
    assert statuses(again) == ["already-compensated", "compensated", "compensated"]
    assert ledger.call_counts("compensate:")[key] == 1
    assert ledger.call_counts("start:reserve")[key] == 4
