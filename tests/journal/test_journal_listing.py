"""The runs listing on every journal: filters, the run-id prefix search and keyset paging."""

from __future__ import annotations

from typing import Any

import pytest

from saga_worker import Journal
from saga_worker.errors import InvalidInputError
from saga_worker.journal.records import RunQuery, RunStatus, UnwindState
from saga_worker.operating.views import decode_cursor, encode_cursor, parse_run_query, runs_page


def make_runs(journal: Journal) -> None:
    for n in range(7):
        journal.start_run(f"ord-{n}", "")
    journal.start_run("ord_x", "")  # "_" is a LIKE wildcard: the prefix search must not treat it as one
    journal.start_run("other-1", "")
    journal.end_run("ord-1", RunStatus.FINISHED, "", None)
    journal.end_run("ord-2", RunStatus.FAILED, "", "boom")
    journal.condemn("ord-3")
    journal.condemn("ord-4")
    journal.set_unwind_state("ord-4", UnwindState.ATTENTION, note="gave up")


def ids(journal: Journal, **query: Any) -> set[str]:
    return {r.run_id for r in journal.page_runs(RunQuery(**query))}


def test_each_filter_selects_exactly_its_runs(journal: Journal) -> None:
    make_runs(journal)
    assert ids(journal, status=RunStatus.FINISHED) == {"ord-1"}
    assert ids(journal, status=RunStatus.FAILED) == {"ord-2"}
    assert ids(journal, condemned=True) == {"ord-3", "ord-4"}
    assert len(ids(journal, condemned=False)) == 7
    assert ids(journal, unwind_state=UnwindState.ATTENTION) == {"ord-4"}
    assert ids(journal, condemned=True, unwind_state=UnwindState.ATTENTION) == {"ord-4"}
    assert journal.count_runs(UnwindState.ATTENTION) == 1


def test_the_search_is_an_exact_run_id_prefix(journal: Journal) -> None:
    make_runs(journal)
    assert ids(journal, search="ord-") == {f"ord-{n}" for n in range(7)}
    assert ids(journal, search="ord_") == {"ord_x"}
    assert ids(journal, search="ord-3") == {"ord-3"}
    assert ids(journal, search="other") == {"other-1"}
    assert ids(journal, search="zzz") == set()


def test_keyset_pages_visit_every_run_once_newest_updated_first(journal: Journal) -> None:
    make_runs(journal)
    everything = journal.page_runs(RunQuery(limit=100))
    assert [(r.updated_at, r.run_id) for r in everything] == sorted(
        ((r.updated_at, r.run_id) for r in everything), reverse=True
    )
    seen: list[str] = []
    query = parse_run_query(limit=2)
    while True:
        page = runs_page(journal, query)
        seen += [r.run_id for r in page.runs]
        if page.next_cursor is None:
            break
        query = parse_run_query(limit=2, cursor=page.next_cursor)
    assert seen == [r.run_id for r in everything]


def test_a_page_past_a_filtered_cursor_keeps_the_filter(journal: Journal) -> None:
    make_runs(journal)
    first = runs_page(journal, parse_run_query(search="ord-", limit=3))
    rest = runs_page(journal, parse_run_query(search="ord-", limit=10, cursor=first.next_cursor))
    assert {r.run_id for r in first.runs + rest.runs} == {f"ord-{n}" for n in range(7)}
    assert rest.next_cursor is None


@pytest.mark.parametrize("cursor", ["", "abc", "W10", "WzEsMl0", "WyJ4IiwiYSJd"])
def test_a_cursor_the_listing_never_gave_out_is_refused(cursor: str) -> None:
    if cursor == "":
        assert parse_run_query(cursor=cursor).before is None
        return
    with pytest.raises(InvalidInputError, match="cursor"):
        decode_cursor(cursor)


def test_a_cursor_keeps_the_exact_time_of_its_run(journal: Journal) -> None:
    run, _ = journal.start_run("ord-9", "")
    assert decode_cursor(encode_cursor(run)) == (run.updated_at, "ord-9")


def test_a_prefix_most_runs_share_finds_the_same_runs_by_the_other_plan(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    from saga_worker.journal.sql import SqlJournal

    make_runs(journal)
    by_range = [r.run_id for r in journal.page_runs(RunQuery(search="ord", limit=100))]
    monkeypatch.setattr(SqlJournal, "COMMON_PREFIX", 2)  # SQLite: now walk the page index instead
    assert [r.run_id for r in journal.page_runs(RunQuery(search="ord", limit=100))] == by_range
    assert {r.run_id for r in journal.page_runs(RunQuery(search="ord_", limit=100))} == {"ord_x"}
    assert len(by_range) == 8


def test_the_inbox_read_finds_suspended_and_running_calls_across_runs_oldest_first(journal: Journal) -> None:
    from saga_worker import run_durable, scripted
    from saga_worker.journal.records import NewRecord, RecordStatus
    from tests.ledger import MemoryLedger, order_script, order_tools

    run_durable(
        "done-1", journal=journal, tools=order_tools(MemoryLedger()), planner=scripted(*order_script())
    )
    for run_id, status in (("waits-1", RecordStatus.SUSPENDED), ("crashed-1", RecordStatus.RUNNING)):
        journal.start_run(run_id, "")
        new = NewRecord("call-1", 0, "call-1", "charge", "call", {"amount": 1}, run_id, status=status)
        journal.claim_record(run_id, new, gated=True, owner="w", ttl=0.0)  # a lease that ran out
    found = journal.waiting_records()
    assert [(r.run_id, r.status) for r in found] == [
        ("waits-1", RecordStatus.SUSPENDED),
        ("crashed-1", RecordStatus.RUNNING),
    ]
    assert [r.run_id for r in journal.waiting_records(limit=1)] == ["waits-1"]


def test_the_inbox_read_leaves_out_calls_nobody_waits_for_before_it_counts_to_its_limit(
    journal: Journal,
) -> None:
    from saga_worker.journal.records import NewRecord, RecordStatus

    def claim(run_id: str, status: RecordStatus, ttl: float = 600.0) -> None:
        journal.start_run(run_id, "")
        new = NewRecord("call-1", 0, "call-1", "charge", "call", {"amount": 1}, run_id, status=status)
        journal.claim_record(run_id, new, gated=True, owner="w", ttl=ttl)

    for n in range(3):  # older than what waits, and waiting for nobody:
        claim(f"dropped-{n}", RecordStatus.SUSPENDED)  # a suspended call of a condemned run
        journal.condemn(f"dropped-{n}")
        claim(f"executing-{n}", RecordStatus.RUNNING)  # a call still executing, under its live lease
        claim(f"settled-{n}", RecordStatus.RUNNING, ttl=0.0)  # its run condemned and unwound since
        journal.condemn(f"settled-{n}")
        journal.set_unwind_state(f"settled-{n}", UnwindState.COMPLETE)
    claim("crashed-1", RecordStatus.RUNNING, ttl=0.0)  # its lease ran out: nobody knows the outcome
    claim("waits-1", RecordStatus.SUSPENDED)

    found = journal.waiting_records(limit=2)

    assert [(r.run_id, r.status) for r in found] == [
        ("crashed-1", RecordStatus.RUNNING),
        ("waits-1", RecordStatus.SUSPENDED),
    ]
    journal.condemn("waits-1")
    assert [r.run_id for r in journal.waiting_records()] == ["crashed-1"]


def test_contains_finds_any_part_of_the_id_in_any_case_words_in_order(journal: Journal) -> None:
    for run_id in ("Order-7-EU", "order-17-us", "refund-7", "ord_x%"[:5]):
        journal.start_run(run_id, "")
    assert ids(journal, contains="der-7") == {"Order-7-EU"}
    assert ids(journal, contains="ORDER") == {"Order-7-EU", "order-17-us"}
    assert ids(journal, contains="order 7") == {"Order-7-EU", "order-17-us"}  # words, in order
    assert ids(journal, contains="7 order") == set()
    assert ids(journal, contains="d_x") == {"ord_x"}  # "_" is not a wildcard
    assert ids(journal, contains="%") == set()
    assert ids(journal, contains="a:b c") == set()
