"""The journal's combined reads, on every backend: what an unwind and a step task read in one go must
be exactly what the separate reads say, and holding off the sweeper keeps a later due time."""

from __future__ import annotations

import dataclasses

from saga_worker import Journal
from saga_worker.compensation.engine import UNWOUND
from saga_worker.journal.records import (
    AuditAction,
    AuditVia,
    ClaimStatus,
    NewAudit,
    NewRecord,
    RecordStatus,
    RunStatus,
    UnwindState,
)
from saga_worker.journal.schema import records, runs
from saga_worker.journal.sql_parts.common import UNSWEPT
from saga_worker.journal.sql_parts.gate import RUN_FIELDS, run_of, run_row
from saga_worker.journal.sql_parts.records import RECORD_FIELDS, pick_record, record_of, record_row


def _record(journal: Journal, run_id: str, suffix: str, step: int, status: RecordStatus) -> None:
    assert journal.claim_record(
        run_id, NewRecord(suffix, step, suffix, "charge", "call", {"n": step}, run_id), gated=True
    )
    if status is not RecordStatus.RUNNING:
        journal.complete_record(
            run_id, suffix, status, output={"ok": step} if status is RecordStatus.SUCCEEDED else None
        )


def _claim(journal: Journal, origin: str, suffix: str, owner: str = "me") -> None:
    got = journal.claim_compensation(
        origin, suffix, via_run_id=origin, owner=owner, ttl=30.0, idempotency_key=f"{origin}:{suffix}"
    )
    assert got.acquired


def test_read_worklist_is_the_run_its_unwound_records_and_their_claims(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "p")
    for step, status in enumerate(
        [RecordStatus.SUCCEEDED, RecordStatus.FAILED, RecordStatus.RUNNING, RecordStatus.SUCCEEDED], start=1
    ):
        _record(journal, run_id, f"call-{step}", step, status)
    _claim(journal, run_id, "call-1")
    journal.finish_claim(run_id, "call-1", "me", ClaimStatus.COMPENSATED)
    _claim(journal, run_id, "call-4")
    journal.condemn(run_id)

    view = journal.read_worklist(run_id, UNWOUND)

    assert view.run == journal.get_run(run_id) and view.run is not None and view.run.condemned
    assert view.records == journal.list_records(run_id, UNWOUND)
    assert [r.suffix for r in view.records] == ["call-1", "call-2", "call-3", "call-4"]  # execution order
    assert view.claims == journal.get_claims([(r.origin_run_id, r.suffix) for r in view.records])
    assert {k: c.status for k, c in view.claims.items()} == {
        (run_id, "call-1"): ClaimStatus.COMPENSATED,
        (run_id, "call-4"): ClaimStatus.CLAIMED,
    }


def test_read_worklist_of_a_fork_carries_the_claims_of_the_effects_it_shares(
    journal: Journal, run_id: str
) -> None:
    journal.start_run(run_id, "p")
    journal.record_decision(run_id, 1, {"kind": "calls"})
    _record(journal, run_id, "call-1", 1, RecordStatus.SUCCEEDED)
    _claim(journal, run_id, "call-1")
    journal.fork(run_id, 1, run_id + "-b")
    _record(journal, run_id + "-b", "call-2", 2, RecordStatus.SUCCEEDED)

    view = journal.read_worklist(run_id + "-b", UNWOUND)

    assert [(r.origin_run_id, r.suffix) for r in view.records] == [
        (run_id, "call-1"),
        (run_id + "-b", "call-2"),
    ]
    assert list(view.claims) == [(run_id, "call-1")]  # the source's claim on the shared effect


def test_read_worklist_of_an_unknown_run_is_empty(journal: Journal) -> None:
    view = journal.read_worklist("nobody-here", UNWOUND)
    assert view.run is None and view.records == [] and view.claims == {}
    assert view.condemner == (None, None)


def test_read_worklist_names_who_wrote_the_tombstone_as_the_trail_says(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "p")
    assert journal.read_worklist(run_id, UNWOUND).condemner == (None, None)  # not condemned
    journal.append_audit(NewAudit(run_id, AuditAction.APPROVED, "alice", AuditVia.CLI, "ok", target="c"))
    journal.condemn(run_id, audit=NewAudit(run_id, AuditAction.CONDEMNED, "ops", AuditVia.CLI, "cancelled"))
    journal.condemn(run_id, audit=NewAudit(run_id, AuditAction.CONDEMNED, "eve", AuditVia.CLI, "again"))
    journal.append_audit(NewAudit(run_id, AuditAction.UNWOUND, "eve", AuditVia.CLI, "again"))
    assert journal.read_worklist(run_id, UNWOUND).condemner == ("ops", "cancelled")  # the first, only
    # A tombstone written without a row (an empty reason reads as None, as in the report), and one
    # whose trail does not say.
    journal.condemn("r-quiet", audit=NewAudit("r-quiet", AuditAction.CONDEMNED, "bot", AuditVia.LIBRARY))
    assert journal.read_worklist("r-quiet", UNWOUND).condemner == ("bot", None)
    journal.condemn("r-silent")
    assert journal.read_worklist("r-silent", UNWOUND).condemner == (None, None)


def test_read_step_is_the_unwind_the_steps_entry_record_and_claim(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "p")
    _record(journal, run_id, "call-1", 1, RecordStatus.SUCCEEDED)
    _record(journal, run_id, "call-2", 2, RecordStatus.SUCCEEDED)
    _claim(journal, run_id, "call-1")
    journal.record_unwind("u1", run_id, dry_run=False, suffixes=["call-2", "call-1"])
    journal.record_unwind_entry("u1", 0, {"suffix": "call-2", "status": "compensated"})

    done = journal.read_step("u1", run_id, "call-2")
    todo = journal.read_step("u1", run_id, "call-1")

    assert done.unwind == journal.get_unwind("u1") and done.position == 0
    assert done.entry == {"suffix": "call-2", "status": "compensated"}
    assert done.record == journal.get_record(run_id, "call-2") and done.claim is None
    assert todo.position == 1 and todo.entry is None
    assert todo.record == journal.get_record(run_id, "call-1")
    assert todo.claim == journal.get_claim(run_id, "call-1") and todo.claim is not None


def test_read_step_says_plainly_what_is_missing(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "p")
    journal.record_unwind("u1", run_id, dry_run=True, suffixes=["call-9"])

    stranger = journal.read_step("u1", run_id, "call-1")
    no_record = journal.read_step("u1", run_id, "call-9")
    no_unwind = journal.read_step("u-none", run_id, "call-9")

    assert stranger.unwind is not None and stranger.unwind.dry_run and stranger.position is None
    assert no_record.position == 0 and no_record.record is None and no_record.claim is None
    assert no_unwind.unwind is None and no_unwind.position is None and no_unwind.entry is None


def test_hold_sweep_defers_the_sweeper_and_keeps_a_later_due_time(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "p")
    journal.condemn(run_id)
    now = journal.now()
    assert [r.run_id for r in journal.runs_to_sweep(now + 1)] == [run_id]

    journal.hold_sweep(run_id, 60.0, "unwind u1 in progress")

    run = journal.get_run(run_id)
    assert run is not None and run.unwind_note == "unwind u1 in progress"
    assert now + 59 < (run.unwind_next_at or 0) < now + 70
    assert journal.runs_to_sweep(now + 30) == []
    assert [r.run_id for r in journal.runs_to_sweep(now + 80)] == [run_id]

    later = now + 1000.0
    journal.set_unwind_state(run_id, run.unwind_state, next_at=later)
    journal.hold_sweep(run_id, 60.0, "unwind u2 in progress")
    kept = journal.get_run(run_id)
    assert kept is not None and kept.unwind_next_at == later  # the sweeper's own backoff stands


def test_read_step_finds_each_steps_entry_and_the_one_before_wherever_the_unwind_stands(
    journal: Journal, run_id: str
) -> None:
    journal.start_run(run_id, "p")
    worklist = [f"call-{n}" for n in range(5, 0, -1)]
    for n, suffix in enumerate(reversed(worklist), 1):
        _record(journal, run_id, suffix, n, RecordStatus.SUCCEEDED)
    journal.record_unwind("u1", run_id, dry_run=False, suffixes=worklist)
    stored: dict[int, dict[str, str]] = {}
    # The chain moving on, then a gap (an entry written out of order by hand): every step reads its
    # own entry and the one before, whether they are the latest ones or far behind them.
    for position in (0, 1, 2, 4):
        stored[position] = {"suffix": worklist[position], "status": "compensated"}
        journal.record_unwind_entry("u1", position, stored[position])
        for at, suffix in enumerate(worklist):
            view = journal.read_step("u1", run_id, suffix)
            assert view.position == at
            assert view.entry == stored.get(at), (position, suffix)
            assert view.previous == (stored.get(at - 1) if at else None), (position, suffix)


def test_read_report_is_the_unwind_its_entries_and_the_worklist_as_read_apart(
    journal: Journal, run_id: str
) -> None:
    # A fork's unwind: its worklist holds a step copied from the source (whose claim is the source's)
    # and one of its own, each claimed; the report's one read must say what the separate reads say.
    fork = run_id + "-b"
    journal.start_run(run_id, "p")
    journal.record_decision(run_id, 1, {"kind": "calls"})
    _record(journal, run_id, "call-1", 1, RecordStatus.SUCCEEDED)
    _claim(journal, run_id, "call-1")
    journal.fork(run_id, 1, fork)
    _record(journal, fork, "call-2", 2, RecordStatus.SUCCEEDED)
    _claim(journal, fork, "call-2")
    journal.condemn(fork, audit=NewAudit(fork, AuditAction.CONDEMNED, "ann", AuditVia.CLI, "refund"))
    journal.insert_unwind("u-1", fork, dry_run=False, suffixes=["call-2", "call-1"])
    journal.record_unwind_entry("u-1", 0, {"suffix": "call-2", "status": "compensated"})

    read = journal.read_report("u-1", fork, UNWOUND)

    assert read.unwind == journal.get_unwind("u-1")
    assert (
        read.entries
        == journal.list_unwind_entries("u-1")
        == {0: {"suffix": "call-2", "status": "compensated"}}
    )
    apart = journal.read_worklist(fork, UNWOUND)
    assert set(apart.claims) == {(run_id, "call-1"), (fork, "call-2")}
    # Everything but the claims, which the report does not read (the entries say what each step did).
    assert read.worklist == dataclasses.replace(apart, claims={})
    assert read.worklist.condemner == ("ann", "refund")
    # The unwind as the last step task read it: the same report view, the unwind as given.
    given = journal.read_report("u-1", fork, UNWOUND, unwind=read.unwind)
    assert given == read and given.unwind is read.unwind


def test_read_report_of_an_unknown_unwind_says_so(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "p")
    read = journal.read_report("no-such-unwind", run_id, UNWOUND)
    assert read.unwind is None and read.entries == {}
    assert read.worklist.run == journal.get_run(run_id)


def test_read_report_of_an_unwind_every_step_of_which_has_an_entry_still_reads_the_run_its_records_and_condemner(
    journal: Journal, run_id: str
) -> None:
    # Every step has its entry: the records are read all the same, as the report numbers each
    # step's group by them (issue 47); and the run and who condemned it.
    journal.start_run(run_id, "p")
    _record(journal, run_id, "call-1", 1, RecordStatus.SUCCEEDED)
    journal.condemn(run_id, audit=NewAudit(run_id, AuditAction.CONDEMNED, "ann", AuditVia.CLI, "refund"))
    journal.insert_unwind("u-1", run_id, dry_run=False, suffixes=["call-1"])
    journal.record_unwind_entry("u-1", 0, {"suffix": "call-1", "status": "compensated"})

    read = journal.read_report("u-1", run_id, UNWOUND)

    assert read.unwind is not None
    assert read.entries == {0: {"suffix": "call-1", "status": "compensated"}}
    assert read.worklist.run == journal.get_run(run_id)
    assert read.worklist.condemner == ("ann", "refund")
    assert read.worklist.records == journal.read_worklist(run_id, UNWOUND).records != []


def test_the_sweeper_reads_the_condemned_runs_of_every_unsettled_state_and_no_settled_one(
    journal: Journal, run_id: str
) -> None:
    """The sweeper's read names the settled states in literal SQL (the partial index's condition,
    migration 0014): a condemned, due run in each state, and one never condemned."""
    now = journal.now()
    due_at = {state: now - 10.0 + i for i, state in enumerate(UnwindState)}
    for state, at in due_at.items():
        run = f"{run_id}-{state.value}"
        journal.start_run(run, "p")
        journal.condemn(run)
        journal.set_unwind_state(run, state, next_at=at)
    journal.start_run(f"{run_id}-never", "p")

    swept = [r.run_id for r in journal.runs_to_sweep(now + 1)]

    # pending and incomplete are the states the sweeper re-drives; none of the others is read
    assert swept == [f"{run_id}-{s.value}" for s in sorted(UNSWEPT, key=due_at.__getitem__)]


def test_a_record_read_as_plain_values_is_the_record_read_by_column_name() -> None:
    # The worklist's records are read as RECORD_FIELDS' values (columns of the records table) and
    # built by position: each field must land where the row read by name puts it.
    assert RECORD_FIELDS and set(RECORD_FIELDS) <= set(records.c.keys())
    row: dict[str, object] = {name: f"{name}-value" for name in RECORD_FIELDS}
    row.update(input='{"in": 1}', output='{"out": 2}', status=RecordStatus.SUCCEEDED.value)
    row.update({name: float(i) for i, name in enumerate(RECORD_FIELDS) if name.endswith("_at")})
    assert record_of(pick_record(row)) == record_row(row)


def test_a_run_read_as_plain_values_is_the_run_read_by_column_name() -> None:
    # The worklist's run is read as RUN_FIELDS' values (columns of the runs table) and built by
    # position: each field must land where the row read by name puts it (fails if they drift).
    assert RUN_FIELDS and set(RUN_FIELDS) <= set(runs.c.keys())
    row: dict[str, object] = {name: f"{name}-value" for name in RUN_FIELDS}
    row.update(status=RunStatus.FINISHED.value, unwind_state=UnwindState.PENDING.value)
    row.update({name: float(i) for i, name in enumerate(RUN_FIELDS) if name.endswith("_at")})
    row.update(unwind_attempts=3, unwind_epoch=2)
    assert run_of([row[name] for name in RUN_FIELDS]) == run_row(row)
    row.update(unwind_epoch=None)  # a NULL epoch reads as 0 both ways
    assert run_of([row[name] for name in RUN_FIELDS]) == run_row(row)
