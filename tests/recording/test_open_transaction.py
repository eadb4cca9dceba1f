"""The app's open transaction vs the journal (issue 22), for a plain SQLAlchemy app that shares the
journal's PostgreSQL database: a side-effecting call made while the app's transaction is open is
refused before anything is claimed or executed (the journal, on its own connection, would say
succeeded for a payment the app then rolls back); made after the commit, it is journaled as usual.
Also: the refused call leaves no run looking live (issue 43), and a Django app with autocommit off,
on SQLite and PostgreSQL, is refused as inside atomic() (issue 42)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from saga_worker import (
    Journal,
    OpenTransactionError,
    Tool,
    ToolCall,
    compensate_run,
    open_journal,
    run_durable,
    saga,
    scripted,
)
from saga_worker.recording import transactions

pytestmark = pytest.mark.postgres


@pytest.fixture
def app_engine(pg_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(pg_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS payments (key text primary key, refunded bool)"))
        conn.execute(sa.text("TRUNCATE payments"))
    probe = transactions.watch_sqlalchemy(engine, name="shop")
    try:
        yield engine
    finally:
        transactions.remove_probe(probe)
        engine.dispose()


def tools(engine: sa.Engine) -> dict[str, Tool]:
    def charge(input: Any, opts: Any) -> dict[str, str]:
        with engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO payments VALUES (:k, false)"), {"k": opts.idempotency_key})
        return {"key": opts.idempotency_key}

    def refund(input: Any, output: Any, opts: Any) -> None:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE payments SET refunded = true WHERE key = :k"), {"k": output["key"]})

    return {"charge": Tool(charge, refund), "quote": Tool(lambda i, o: 7, side_effect=False)}


def payments(engine: sa.Engine) -> list[tuple[str, bool]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text("SELECT key, refunded FROM payments ORDER BY key"))]


def test_a_call_inside_the_apps_open_transaction_is_refused_and_the_rollback_leaves_nothing_to_undo(
    pg_url: str, app_engine: sa.Engine
) -> None:
    with open_journal(pg_url) as journal:
        with pytest.raises(OpenTransactionError) as refused, app_engine.begin() as conn:  # noqa: PT012
            conn.execute(sa.text("INSERT INTO payments VALUES ('order-row', false)"))
            with saga("order-r", journal=journal, tools=tools(app_engine)) as run:
                assert run.call("quote", {}) == 7  # a read-only tool is not refused
                run.call("charge", {"amount": 10})
        message = str(refused.value)
        assert "transaction of SQLAlchemy engine 'shop'" in message and "transaction.on_commit" in message
        assert payments(app_engine) == []  # the app's transaction rolled back, and nothing was charged
        assert [r.tool_name for r in journal.list_records("order-r")] == ["quote"]
        report = compensate_run("order-r", journal=journal, tools=tools(app_engine))
        assert [e.tool_name for e in report.entries] == ["quote"]  # no refund of a payment that never was


def test_a_call_after_the_apps_commit_is_journaled_and_undone_once(
    pg_url: str, app_engine: sa.Engine
) -> None:
    with open_journal(pg_url) as journal:
        with app_engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO payments VALUES ('order-row', false)"))
        with saga("order-c", journal=journal, tools=tools(app_engine)) as run:  # after the commit
            key = run.call("charge", {"amount": 10})["key"]
        report = compensate_run("order-c", journal=journal, tools=tools(app_engine))
        assert [e.status.value for e in report.entries] == ["compensated"]
        assert payments(app_engine) == [(key, True), ("order-row", False)]


def test_an_in_transaction_tool_on_the_journals_database_is_refused_inside_the_apps_transaction_too(
    pg_url: str, app_engine: sa.Engine
) -> None:
    """``in_transaction=True`` commits the effect with its record on the journal's own connection, not
    the app's: inside the app's open transaction it would commit although the app's rolls back, so it
    is refused as any side-effecting call is; after the app's commit, effect and record commit together."""

    def charge(input: Any, opts: Any) -> dict[str, str]:
        with opts.connection.cursor() as cur:  # the journal's transaction (DBAPI): it must not commit
            cur.execute("INSERT INTO payments VALUES (%s, false)", (opts.idempotency_key,))
        return {"key": opts.idempotency_key}

    def refund(input: Any, output: Any, opts: Any) -> None:
        with app_engine.begin() as conn:
            conn.execute(sa.text("UPDATE payments SET refunded = true WHERE key = :k"), {"k": output["key"]})

    atomic = {"charge": Tool(charge, refund, in_transaction=True)}
    with open_journal(pg_url) as journal:
        with pytest.raises(OpenTransactionError), app_engine.begin() as conn:  # noqa: PT012
            conn.execute(sa.text("INSERT INTO payments VALUES ('order-row', false)"))
            with saga("order-t", journal=journal, tools=atomic) as run:
                run.call("charge", {"amount": 10})
        assert payments(app_engine) == [] and journal.list_records("order-t") == []
        with saga("order-t2", journal=journal, tools=atomic) as run:  # outside the app's transaction
            key = run.call("charge", {"amount": 10})["key"]
        assert payments(app_engine) == [(key, False)]
        record = journal.get_record("order-t2", "call-1")
        assert record is not None and record.status.value == "succeeded"
        report = compensate_run("order-t2", journal=journal, tools=atomic)
        assert [e.status.value for e in report.entries] == ["compensated"]
        assert payments(app_engine) == [(key, True)]


# -- the run of a refused call (issue 43) -------------------------------------------------------------
def test_a_refused_first_call_starts_no_run_and_the_same_block_runs_once_the_transaction_committed(
    journal: Journal, app_engine: sa.Engine
) -> None:
    """The refused call is not journaled, so a run it would have started does not exist: `runs`, the
    console and a later compensate see nothing that happened, and no run is left `running` forever.
    Sent again after the commit (as the error says), the same run id executes the call once."""
    with (
        pytest.raises(OpenTransactionError),
        app_engine.begin(),
        saga("order-f", journal=journal, tools=tools(app_engine), finish=False) as run,
    ):
        run.call("charge", {"amount": 10}, id="charge")
    assert journal.get_run("order-f") is None
    assert "order-f" not in [r.run_id for r in journal.list_runs()]
    assert journal.list_decisions("order-f") == [] and journal.list_records("order-f") == []
    assert payments(app_engine) == []

    with saga("order-f", journal=journal, tools=tools(app_engine)) as run:  # after the commit
        key = run.call("charge", {"amount": 10}, id="charge")["key"]
    assert run.result is not None and run.result.status == "finished"
    assert payments(app_engine) == [(key, False)]


def test_a_planner_run_refused_at_its_first_decision_is_not_started_and_executes_nothing(
    journal: Journal, app_engine: sa.Engine
) -> None:
    planner = scripted([ToolCall("quote", {}), ToolCall("charge", {"amount": 10})], final="done")
    with pytest.raises(OpenTransactionError), app_engine.begin():
        run_durable("order-p", journal=journal, tools=tools(app_engine), planner=planner)
    assert journal.get_run("order-p") is None  # not `running`: nothing of it was journaled or executed
    assert payments(app_engine) == []
    result = run_durable("order-p", journal=journal, tools=tools(app_engine), planner=planner)
    assert result.status == "finished" and [k for k, _ in payments(app_engine)] == ["order-p:call-2"]


def test_a_refused_later_call_leaves_the_run_as_it_was_for_the_same_code_to_continue(
    journal: Journal, app_engine: sa.Engine
) -> None:
    with saga("order-l", journal=journal, tools=tools(app_engine), finish=False) as run:
        first = run.call("charge", {"amount": 10}, id="first")["key"]
    before = (journal.get_run("order-l"), journal.list_decisions("order-l"))
    with (
        pytest.raises(OpenTransactionError),
        app_engine.begin(),
        saga("order-l", journal=journal, tools=tools(app_engine), finish=False) as run,
    ):
        run.call("charge", {"amount": 20}, id="second")
    assert (journal.get_run("order-l"), journal.list_decisions("order-l")) == before
    with saga("order-l", journal=journal, tools=tools(app_engine)) as run:
        second = run.call("charge", {"amount": 20}, id="second")["key"]
    assert run.result is not None and run.result.status == "finished"
    assert payments(app_engine) == sorted([(first, False), (second, False)])


# -- Django with autocommit off (issue 42) ------------------------------------------------------------
@pytest.fixture(params=["sqlite", "postgres"])
def django_database(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """Django's ``DATABASES["default"]``: a SQLite file, or the session's PostgreSQL database."""
    if request.param == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "app.sqlite3")}
    url = sa.engine.make_url(request.getfixturevalue("pg_url"))
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": url.database or "",
        "USER": url.username or "",
        "HOST": url.host or "",
        "PORT": str(url.port or ""),
    }


def test_a_call_made_with_djangos_autocommit_off_is_refused_and_the_rollback_leaves_nothing_to_refund(
    django_database: dict[str, str], journal_url: str
) -> None:
    """``transaction.set_autocommit(False)`` opens no ``atomic()`` block, yet every write is in a
    transaction only the app's later commit makes real: journaled ``succeeded`` there, the charge
    would be refunded by an unwind after the app rolled it back."""
    journal = "memory://" if journal_url == "memory://" else journal_url  # memory: the child's own
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAGA_", "DJANGO_"))}
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.procs.django_child",
            "--database",
            json.dumps(django_database),
            "--journal",
            journal,
            "--run",
            "order-dj",
        ],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    out = json.loads(child.stdout.strip().splitlines()[-1])

    assert out["refused"] is not None and "Django database 'default'" in out["refused"]
    assert "transaction.on_commit" in out["refused"]
    assert out["off"] == {"records": [], "entries": [], "payments": []}  # nothing charged, nothing refunded
    # With autocommit back on the same call executes, is journaled and is undone once.
    assert out["on_refused"] is None
    assert out["on"]["records"] == [["call-1", "succeeded"]]
    assert out["on"]["entries"] == [["call-1", "compensated"]]
    assert out["on"]["payments"] == [["order-dj-on:call-1", 1]]
