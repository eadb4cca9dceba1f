"""A journal row whose status this code does not know (another case, a newer or broken writer's value)
fails closed wherever it is read (issue 10, item 1), on every journal: the unwind, the report, the
listings and the sweeper raise MalformedRecordError naming the run, the step and the bad value; no
step is left out of an unwind, no hook runs on a guess, and the tombstone stays."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa

from saga_worker import (
    CallOptions,
    Journal,
    MalformedRecordError,
    MemoryJournal,
    SqlJournal,
    Tool,
    ToolCall,
    compensate_run,
    run_durable,
    scripted,
)
from saga_worker import executor as ex
from saga_worker.compensation.engine import UNWOUND
from saga_worker.journal.records import ClaimStatus, RecordStatus, UnwindState, parse_status
from saga_worker.journal.schema import claims, records, runs, unwind_entries

TTL = 5.0


class Provider:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def tools(self) -> dict[str, Tool]:
        def make(name: str) -> Tool:
            def compensate(input: Any, output: Any, opts: CallOptions) -> None:
                self.calls.append(opts.idempotency_key)

            return Tool(lambda input, opts: {"ok": name}, compensate)

        return {name: make(name) for name in ("charge", "reserve", "notify")}


def order(journal: Journal, provider: Provider, run_id: str) -> None:
    planner = scripted(ToolCall("charge", {"a": 1}), ToolCall("reserve", {"b": 2}), ToolCall("notify", {}))
    assert run_durable(run_id, journal=journal, tools=provider.tools(), planner=planner).status == "finished"


def _sql(journal: SqlJournal, table: sa.Table, where: Any, **values: Any) -> None:
    with journal.engine.begin() as conn:
        assert conn.execute(sa.update(table).where(where).values(**values)).rowcount == 1


def set_record_status(journal: Journal, run_id: str, suffix: str, value: str) -> None:
    """Write a status behind the journal's back, as a newer or broken writer would."""
    if isinstance(journal, MemoryJournal):
        key = (run_id, suffix)
        journal._records[key] = replace(journal._records[key], status=value)  # type: ignore[arg-type]  # a status the code does not know is the point
    else:
        assert isinstance(journal, SqlJournal)
        _sql(journal, records, sa.and_(records.c.run_id == run_id, records.c.suffix == suffix), status=value)


def set_claim_status(journal: Journal, run_id: str, suffix: str, value: str) -> None:
    if isinstance(journal, MemoryJournal):
        key = (run_id, suffix)
        journal._claims[key] = replace(journal._claims[key], status=value)  # type: ignore[arg-type]  # a status the code does not know is the point
    else:
        assert isinstance(journal, SqlJournal)
        _sql(
            journal,
            claims,
            sa.and_(claims.c.origin_run_id == run_id, claims.c.suffix == suffix),
            status=value,
        )


def set_unwind_state(journal: Journal, run_id: str, value: str) -> None:
    if isinstance(journal, MemoryJournal):
        journal._runs[run_id] = replace(journal._runs[run_id], unwind_state=value)  # type: ignore[arg-type]  # a status the code does not know is the point
    else:
        assert isinstance(journal, SqlJournal)
        _sql(journal, runs, runs.c.run_id == run_id, unwind_state=value)


def set_run_status(journal: Journal, run_id: str, value: str) -> None:
    if isinstance(journal, MemoryJournal):
        journal._runs[run_id] = replace(journal._runs[run_id], status=value)  # type: ignore[arg-type]  # a status the code does not know is the point
    else:
        assert isinstance(journal, SqlJournal)
        _sql(journal, runs, runs.c.run_id == run_id, status=value)


def flagged_state(journal: Journal, run_id: str) -> tuple[str, str | None]:
    """The run's unwind state and note as stored (the run itself cannot be read: that is the point)."""
    if isinstance(journal, MemoryJournal):
        run = journal._runs[run_id]
        return str(getattr(run.unwind_state, "value", run.unwind_state)), run.unwind_note
    assert isinstance(journal, SqlJournal)
    with journal.engine.connect() as conn:
        row = conn.execute(
            sa.select(runs.c.unwind_state, runs.c.unwind_note).where(runs.c.run_id == run_id)
        ).one()
    return row.unwind_state, row.unwind_note


def set_entry_status(journal: Journal, unwind_id: str, position: int, value: str) -> None:
    entry = dict(journal.list_unwind_entries(unwind_id)[position], status=value)
    if isinstance(journal, MemoryJournal):
        journal._unwind_entries[unwind_id][position] = entry
    else:
        assert isinstance(journal, SqlJournal)
        where = sa.and_(unwind_entries.c.unwind_id == unwind_id, unwind_entries.c.position == position)
        _sql(journal, unwind_entries, where, entry=json.dumps(entry))


def names(error: pytest.ExceptionInfo[MalformedRecordError], run_id: str, *parts: str) -> None:
    message = str(error.value)
    assert error.value.detail["run_id"] == run_id and run_id in message, message
    for part in parts:
        assert part in message, (part, message)


@pytest.mark.parametrize("bad", ["SUCCEEDED", "Succeeded", "exploded", "compensating"])
def test_a_record_with_an_unknown_status_fails_the_unwind_closed_and_runs_no_hook(
    journal: Journal, run_id: str, bad: str
) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    set_record_status(journal, run_id, "call-2", bad)

    with pytest.raises(MalformedRecordError) as info:
        compensate_run(run_id, journal=journal, tools=provider.tools())
    names(info, run_id, "'call-2'", repr(bad))
    assert provider.calls == []  # not even the steps after it in unwind order: nothing on a guess
    run = journal.get_run(run_id)
    assert run is not None and run.condemned  # the tombstone stands
    assert run.unwind_state is UnwindState.PENDING and "cannot unwind" in (run.unwind_note or "")
    assert journal.get_claims([(run_id, s) for s in ("call-1", "call-2", "call-3")]) == {}

    with pytest.raises(MalformedRecordError):
        compensate_run(run_id, journal=journal, tools=provider.tools(), dry_run=True)
    for read in (
        lambda: journal.list_records(run_id),
        lambda: journal.list_records(run_id, UNWOUND),
        lambda: journal.read_worklist(run_id, UNWOUND),
        lambda: ex.start_unwind(journal, run_id, "u-1", dry_run=False, claim_ttl=TTL),
    ):
        with pytest.raises(MalformedRecordError) as info:
            read()
        names(info, run_id, "'call-2'", repr(bad))
    assert provider.calls == []


def test_a_claim_with_an_unknown_status_fails_the_unwind_closed(journal: Journal, run_id: str) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    got = journal.claim_compensation(
        run_id, "call-1", via_run_id=run_id, owner="me", ttl=TTL, idempotency_key=f"{run_id}:comp:call-1"
    )
    assert got.acquired and journal.finish_claim(run_id, "call-1", "me", ClaimStatus.COMPENSATED)
    set_claim_status(journal, run_id, "call-1", "COMPENSATED")

    for read in (
        lambda: compensate_run(run_id, journal=journal, tools=provider.tools()),
        lambda: journal.get_claims([(run_id, "call-1")]),
        lambda: journal.get_claim(run_id, "call-1"),
    ):
        with pytest.raises(MalformedRecordError) as info:
            read()
        names(info, run_id, "'call-1'", "'COMPENSATED'")
    assert provider.calls == []


def test_a_claim_with_an_unknown_status_is_never_taken_over(journal: Journal, run_id: str) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    journal.claim_compensation(run_id, "call-3", via_run_id=run_id, owner="me", ttl=TTL, idempotency_key="k")
    set_claim_status(journal, run_id, "call-3", "released")
    with pytest.raises(MalformedRecordError) as info:
        journal.claim_compensation(
            run_id, "call-3", via_run_id=run_id, owner="other", ttl=TTL, idempotency_key="k"
        )
    names(info, run_id, "'call-3'", "'released'")


def test_a_run_with_an_unknown_unwind_state_is_not_silently_left_out_of_the_sweep(
    journal: Journal, run_id: str
) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    journal.condemn(run_id)
    set_unwind_state(journal, run_id, "Pending")
    for read in (
        lambda: journal.runs_to_sweep(journal.now() + 10),
        lambda: journal.list_runs(),
        lambda: journal.get_run(run_id),
    ):
        with pytest.raises(MalformedRecordError) as info:
            read()
        names(info, run_id, "'Pending'")
    # The sweeper does not leave it out either: it flags it for a person (see the next test).
    assert ex.sweep(journal, enqueue=lambda r: None, now=journal.now() + 10).flagged == [run_id]


@pytest.mark.parametrize("column", ["unwind_state", "status"])
def test_one_unreadable_run_is_flagged_for_a_person_and_the_sweep_redrives_every_healthy_one(
    journal: Journal, run_id: str, column: str, caplog: pytest.LogCaptureFixture
) -> None:
    provider = Provider()
    healthy = [f"{run_id}-a", f"{run_id}-c"]
    bad = f"{run_id}-b"
    for rid in (healthy[0], bad, healthy[1]):
        order(journal, provider, rid)
        journal.condemn(rid)  # condemned, unwind pending and due: what a worker that died leaves
    if column == "unwind_state":
        set_unwind_state(journal, bad, "Pending")
    else:
        set_run_status(journal, bad, "exploded")
    value = "'Pending'" if column == "unwind_state" else "'exploded'"

    enqueued: list[str] = []
    with caplog.at_level("ERROR", logger="saga_worker"):
        outcome = ex.sweep(journal, enqueue=enqueued.append, now=journal.now() + 10)
    assert sorted(enqueued) == sorted(outcome.redriven) == sorted(healthy)
    assert outcome.flagged == [bad]
    logged = [r.getMessage() for r in caplog.records if bad in r.getMessage()]
    assert logged and value in logged[0], caplog.text
    flagged = flagged_state(journal, bad)
    assert flagged[0] == UnwindState.ATTENTION.value, flagged
    assert bad in (flagged[1] or "") and value in (flagged[1] or ""), flagged
    # Flagged, it waits for a person: the next sweeps neither raise on it nor re-drive it.
    again: list[str] = []
    assert ex.sweep(journal, enqueue=again.append, now=journal.now() + 1e6).flagged == []
    assert bad not in again


@pytest.mark.parametrize("bad", ["FAILED", "halted", "done"])
def test_an_unwind_entry_with_an_unknown_status_fails_the_next_step_and_the_report_closed(
    journal: Journal, run_id: str, bad: str
) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    ex.run_step(journal, provider.tools(), run_id, "u", "call-3", claim_ttl=TTL)
    set_entry_status(journal, "u", 0, bad)
    calls = list(provider.calls)

    for read in (
        lambda: ex.run_step(journal, provider.tools(), run_id, "u", "call-2", claim_ttl=TTL),
        lambda: ex.run_step(journal, provider.tools(), run_id, "u", "call-3", claim_ttl=TTL),
        lambda: ex.finalize_unwind(journal, run_id, "u"),
    ):
        with pytest.raises(MalformedRecordError) as info:
            read()
        names(info, run_id, "'u'", "'call-3'", repr(bad))
    assert provider.calls == calls  # reserve was never compensated on a guess
    assert sorted(journal.list_unwind_entries("u")) == [0]
    run = journal.get_run(run_id)
    assert run is not None and run.unwind_state is not UnwindState.COMPLETE


def test_known_statuses_outside_the_unwind_are_still_left_out_of_it(journal: Journal, run_id: str) -> None:
    """Denied and suspended records are parsed like any other, then left out because of what they are."""
    provider = Provider()
    order(journal, provider, run_id)
    set_record_status(journal, run_id, "call-2", "denied")
    report = compensate_run(run_id, journal=journal, tools=provider.tools())
    assert [(e.suffix, e.status.value) for e in report.entries] == [
        ("call-3", "compensated"),
        ("call-1", "compensated"),
    ]


@pytest.mark.parametrize("value", ["Failed", "failed ", "", None, 3, ["failed"], {"failed": 1}])
def test_a_status_that_is_not_one_of_the_enums_values_is_malformed_whatever_its_type(value: object) -> None:
    with pytest.raises(MalformedRecordError, match="unknown status"):
        parse_status(RecordStatus, value, "r1", "'call-1'")


def test_a_stored_status_reads_as_the_enums_member_whether_stored_as_text_or_as_a_member() -> None:
    assert parse_status(RecordStatus, "failed", "r1", "x") is RecordStatus.FAILED
    assert parse_status(RecordStatus, RecordStatus.FAILED, "r1", "x") is RecordStatus.FAILED
    assert parse_status(RecordStatus, ClaimStatus.FAILED, "r1", "x") is RecordStatus.FAILED  # same text
