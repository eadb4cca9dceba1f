"""Rows written behind the journal's back (broken JSON, unknown statuses) give MalformedRecordError naming
the run, never a bare crash (docs/reference/safety.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from saga_worker import (
    Journal,
    MalformedRecordError,
    SqlJournal,
    Tool,
    ToolCall,
    open_journal,
    resume_run,
    run_durable,
    scripted,
    stream_durable,
)
from saga_worker.journal.schema import decisions, records, runs

PLANNER = scripted(ToolCall("charge", {"amount": 1}), ToolCall("charge", {"amount": 2}))
TOOLS = {"charge": Tool(lambda i, o: {"ok": True})}


class Crash(BaseException):
    pass


@pytest.fixture
def sql(shared_journal_url: str) -> Iterator[SqlJournal]:
    journal = open_journal(shared_journal_url, migrate=True)
    assert isinstance(journal, SqlJournal)
    yield journal
    journal.close()


def stopped_run(journal: Journal, run_id: str) -> None:
    """A run with one decision and one succeeded record that has not ended (the process died)."""

    def planner(state: Any) -> Any:
        if state.step == 1:
            raise Crash
        return PLANNER(state)

    with pytest.raises(Crash):
        run_durable(run_id, journal=journal, tools=TOOLS, planner=planner)


def corrupt(journal: SqlJournal, table: sa.Table, run_id: str, **values: Any) -> None:
    with journal.engine.begin() as conn:
        assert conn.execute(sa.update(table).where(table.c.run_id == run_id).values(**values)).rowcount >= 1


def names_the_run(error: pytest.ExceptionInfo[MalformedRecordError], run_id: str) -> bool:
    return run_id in str(error.value) and error.value.detail["run_id"] == run_id


@pytest.mark.parametrize(
    "column, value", [("input", "{not json"), ("output", '{"a": '), ("status", "exploded")]
)
def test_a_malformed_tool_record_is_reported_naming_the_run(
    sql: SqlJournal, run_id: str, column: str, value: str
) -> None:
    stopped_run(sql, run_id)
    corrupt(sql, records, run_id, **{column: value})
    for read in (lambda: sql.get_record(run_id, "call-1"), lambda: sql.list_records(run_id)):
        with pytest.raises(MalformedRecordError) as info:
            read()
        assert names_the_run(info, run_id) and "'call-1'" in str(info.value)
    with pytest.raises(MalformedRecordError) as info:
        resume_run(run_id, journal=sql, tools=TOOLS, planner=PLANNER)
    assert names_the_run(info, run_id)


def test_a_decision_that_is_not_json_is_reported_naming_the_run_and_step(
    sql: SqlJournal, run_id: str
) -> None:
    stopped_run(sql, run_id)
    corrupt(sql, decisions, run_id, payload="[[[")
    with pytest.raises(MalformedRecordError, match="decision 1") as info:
        resume_run(run_id, journal=sql, tools=TOOLS, planner=PLANNER)
    assert names_the_run(info, run_id)


def test_a_run_row_with_an_unknown_status_is_reported_naming_the_run(sql: SqlJournal, run_id: str) -> None:
    stopped_run(sql, run_id)
    corrupt(sql, runs, run_id, status="half-done")
    with pytest.raises(MalformedRecordError) as info:
        sql.get_run(run_id)
    assert names_the_run(info, run_id)
    with pytest.raises(MalformedRecordError):
        run_durable(run_id, journal=sql, tools=TOOLS, planner=PLANNER)


@pytest.mark.parametrize(
    "payload",
    [
        {"kind": "maybe"},
        [1, 2],
        {"kind": "calls", "calls": [{"id": "x"}]},
        {"kind": "calls", "calls": "call-1"},
    ],
)
def test_a_journaled_decision_of_the_wrong_shape_is_reported_naming_the_run(
    journal: Journal, run_id: str, payload: Any
) -> None:
    journal.start_run(run_id, "")
    journal.record_decision(run_id, 1, payload)
    with pytest.raises(MalformedRecordError, match="decision 1") as info:
        list(stream_durable(run_id, journal=journal, tools=TOOLS, planner=PLANNER))
    assert names_the_run(info, run_id)
    assert journal.list_records(run_id) == []


def test_a_well_formed_neighbour_run_is_still_readable(sql: SqlJournal, run_id: str) -> None:
    stopped_run(sql, run_id)
    stopped_run(sql, f"{run_id}-ok")
    corrupt(sql, records, run_id, input="{")
    assert [r.suffix for r in sql.list_records(f"{run_id}-ok")] == ["call-1"]
    assert resume_run(f"{run_id}-ok", journal=sql, tools=TOOLS, planner=PLANNER).status == "finished"


@pytest.mark.parametrize(
    "text",
    [
        '{"a":[1,2.5,null,true,"x"]}',
        "[]",
        '"text"',
        "3",
        "NaN",
        ' {"a":1}',
        '{"a":1} ',
        "\n[1]\n",
        '"\\u00e9"',
    ],
)
def test_a_stored_json_text_reads_back_as_json_loads_reads_it(text: str) -> None:
    from saga_worker.journal.sql_parts.common import load_json

    value = load_json(text, "r1", "'call-1' input")
    expected = json.loads(text)
    assert value == expected or (value != value and expected != expected)  # NaN is not equal to itself


@pytest.mark.parametrize("text", ["", "{", '{"a":1} x', "[1,]", "{'a': 1}", "nul", " "])
def test_a_stored_text_that_is_not_json_is_malformed_naming_the_run_and_the_row(text: str) -> None:
    from saga_worker.journal.sql_parts.common import load_json

    with pytest.raises(MalformedRecordError, match="not JSON") as caught:
        load_json(text, "r1", "'call-1' input")
    assert "r1" in str(caught.value) and "'call-1' input" in str(caught.value)
