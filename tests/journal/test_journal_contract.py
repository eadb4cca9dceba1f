"""The journal interface on every backend: each write is idempotent by construction (insert-if-absent,
compare-and-set), so a retried or duplicated write cannot corrupt state, and racing writers get one winner."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from saga_worker import (
    CompensatedRunError,
    Journal,
    RunEndedError,
    RunExistsError,
    UnknownRunError,
    open_journal,
)
from saga_worker.journal.records import (
    AuditAction,
    AuditVia,
    NewAudit,
    NewRecord,
    RecordStatus,
    RunStatus,
    UnwindState,
)
from tests.reads import record_of

# Every backend, and the journal of the parts alone (tests/journal/parts_only.py): the defaults keep the contract.
pytestmark = pytest.mark.backends("memory", "sqlite", "postgres", "memory-parts")


def new(suffix: str = "call-1", step: int = 1, run_id: str = "r") -> NewRecord:
    return NewRecord(suffix, step, suffix, "charge", "call", {"amount": 1}, run_id)


def race(n: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(i)`` on ``n`` threads released together; return their results in thread order."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def go(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def test_start_run_creates_once_and_keeps_the_first_prompt(journal: Journal, run_id: str) -> None:
    run, created = journal.start_run(run_id, "first")
    again, created_again = journal.start_run(run_id, "second")
    assert (created, created_again) == (True, False)
    assert again.prompt == "first" and again.status is RunStatus.RUNNING and again == run


def test_start_run_refuses_a_condemned_run(journal: Journal, run_id: str) -> None:
    journal.condemn(run_id)
    with pytest.raises(CompensatedRunError):
        journal.start_run(run_id, "")


def test_condemn_is_idempotent_and_also_stamps_a_run_never_seen(journal: Journal, run_id: str) -> None:
    first = journal.condemn(run_id)
    assert journal.condemn(run_id) == first
    run = journal.get_run(run_id)
    assert run is not None and run.condemned_at == first and run.status is RunStatus.UNKNOWN
    assert run.unwind_state is UnwindState.PENDING


def test_end_run_records_the_first_end_only(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "")
    first = journal.end_run(run_id, RunStatus.FINISHED, "done", None)
    second = journal.end_run(run_id, RunStatus.FAILED, "other", "boom")
    assert second == first and second.status is RunStatus.FINISHED and second.text == "done"
    with pytest.raises(UnknownRunError):
        journal.end_run("never-was", RunStatus.FINISHED, "", None)


def test_record_decision_keeps_the_first_writer(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "")
    assert journal.record_decision(run_id, 1, {"kind": "finish", "text": "a"}) == {
        "kind": "finish",
        "text": "a",
    }
    assert journal.record_decision(run_id, 1, {"kind": "finish", "text": "b"}) == {
        "kind": "finish",
        "text": "a",
    }
    assert journal.list_decisions(run_id) == [{"kind": "finish", "text": "a"}]


def test_decisions_are_keyed_by_step_so_one_written_out_of_order_is_kept_where_it_says(
    journal: Journal, run_id: str
) -> None:
    journal.start_run(run_id, "")
    journal.record_decision(run_id, 1, {"n": 1})
    assert journal.record_decision(run_id, 3, {"n": 3}) == {"n": 3}  # a gap is stored, not refused
    assert journal.list_decisions(run_id) == [{"n": 1}, {"n": 3}]
    journal.fork(run_id, 2, run_id + "-f")
    assert journal.list_decisions(run_id + "-f") == [{"n": 1}]  # steps up to 2: the gap stays a gap
    assert journal.record_decision(run_id, 2, {"n": 2}) == {"n": 2}
    assert journal.record_decision(run_id, 3, {"n": "later"}) == {"n": 3}
    assert journal.list_decisions(run_id) == [{"n": 1}, {"n": 2}, {"n": 3}]


def test_claim_record_inserts_if_absent_with_increasing_sequence(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "")
    first = journal.claim_record(run_id, new("call-1"), gated=True)
    assert first is not None and first.status is RecordStatus.RUNNING and first.attempts == 1
    assert journal.claim_record(run_id, new("call-1"), gated=True) is None
    second = journal.claim_record(run_id, new("call-2"), gated=True)
    assert second is not None and second.seq > first.seq
    assert [r.suffix for r in journal.list_records(run_id)] == ["call-1", "call-2"]


def test_a_gated_claim_on_a_condemned_run_raises_and_writes_nothing(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "")
    journal.condemn(run_id)
    with pytest.raises(CompensatedRunError):
        journal.claim_record(run_id, new("call-1"), gated=True)
    assert journal.list_records(run_id) == []
    # A read-only tool (side_effect=False) is not gated.
    assert journal.claim_record(run_id, new("call-2"), gated=False) is not None


def test_a_claim_for_a_run_never_started_raises_unknown_run(journal: Journal) -> None:
    with pytest.raises(UnknownRunError):
        journal.claim_record("never-started", new("call-1"), gated=True)


@pytest.mark.parametrize("ended", [RunStatus.FINISHED, RunStatus.FAILED])
@pytest.mark.parametrize("decision", [RecordStatus.APPROVED, RecordStatus.DENIED])
def test_a_decision_on_a_suspended_call_of_an_ended_run_is_refused_and_writes_nothing(
    journal: Journal, run_id: str, ended: RunStatus, decision: RecordStatus
) -> None:
    journal.start_run(run_id, "")
    journal.claim_record(run_id, replace(new(), status=RecordStatus.SUSPENDED), gated=True)
    journal.end_run(run_id, ended, "", None)
    action = AuditAction.APPROVED if decision is RecordStatus.APPROVED else AuditAction.DENIED
    audit = NewAudit(run_id, action, "ops", AuditVia.LIBRARY, "", target="call-1")
    with pytest.raises(RunEndedError) as error:
        journal.decide_call(run_id, "call-1", decision, error=None, audit=audit)
    assert error.value.detail == {"run_id": run_id, "status": ended.value}
    assert record_of(journal, run_id, "call-1").status is RecordStatus.SUSPENDED
    assert journal.read_audit(run_id) == []


def test_record_transitions_are_compare_and_set(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "")
    journal.claim_record(run_id, new(), gated=True)
    failed = journal.complete_record(run_id, "call-1", RecordStatus.FAILED, error="boom")
    assert failed is not None and failed.status is RecordStatus.FAILED and failed.error == "boom"
    # Completing again (a duplicated message) changes nothing: the record is no longer running.
    assert journal.complete_record(run_id, "call-1", RecordStatus.SUCCEEDED, output={"x": 1}) is None
    assert journal.reclaim_record(run_id, "call-1", RecordStatus.RUNNING, gated=True) is None
    retried = journal.reclaim_record(run_id, "call-1", RecordStatus.FAILED, gated=True)
    assert retried is not None and retried.status is RecordStatus.RUNNING and retried.attempts == 2
    assert retried.error is None and retried.seq == failed.seq
    assert journal.resolve_record(run_id, "call-1", RecordStatus.FAILED, {"x": 1}) is None
    resolved = journal.resolve_record(run_id, "call-1", RecordStatus.RUNNING, {"x": 1})
    assert resolved is not None and resolved.status is RecordStatus.SUCCEEDED and resolved.output == {"x": 1}
    assert journal.get_record(run_id, "call-1") == resolved


def test_values_read_back_are_copies_not_aliases(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "")
    payload: dict[str, Any] = {"kind": "calls", "calls": [{"id": "call-1", "tool": "t", "input": {"n": [1]}}]}
    journal.record_decision(run_id, 1, payload)
    payload["calls"][0]["input"]["n"].append(2)
    assert journal.list_decisions(run_id)[0]["calls"][0]["input"] == {"n": [1]}


def test_racing_claims_of_one_record_have_exactly_one_winner(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "")
    won = race(6, lambda i: journal.claim_record(run_id, new("call-1"), gated=True))
    assert sum(r is not None for r in won) == 1
    assert len(journal.list_records(run_id)) == 1


def test_racing_claims_of_different_records_get_distinct_sequence_numbers(
    journal: Journal, run_id: str
) -> None:
    journal.start_run(run_id, "")
    claimed = race(6, lambda i: journal.claim_record(run_id, new(f"call-{i}"), gated=True))
    assert len({r.seq for r in claimed}) == 6


def test_racing_decisions_for_one_step_store_the_first_writers(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "")
    stored = race(6, lambda i: journal.record_decision(run_id, 1, {"kind": "finish", "text": str(i)}))
    assert len({s["text"] for s in stored}) == 1
    assert journal.list_decisions(run_id) == [stored[0]]


def test_racing_reclaims_of_a_failed_record_have_exactly_one_winner(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "")
    journal.claim_record(run_id, new(), gated=True)
    journal.complete_record(run_id, "call-1", RecordStatus.FAILED, error="boom")
    won = race(6, lambda i: journal.reclaim_record(run_id, "call-1", RecordStatus.FAILED, gated=True))
    assert sum(r is not None for r in won) == 1
    record = journal.get_record(run_id, "call-1")
    assert record is not None and record.attempts == 2


def test_fork_refuses_an_existing_target_without_touching_it(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "p")
    journal.record_decision(run_id, 1, {"kind": "finish", "text": ""})
    journal.start_run("target", "mine")
    with pytest.raises(RunExistsError):
        journal.fork(run_id, 1, "target")
    assert journal.list_decisions("target") == []
    target = journal.get_run("target")
    assert target is not None and target.prompt == "mine" and target.source_run_id is None


def test_list_runs_lists_most_recently_updated_first(journal: Journal) -> None:
    for name in ("a", "b", "c"):
        journal.start_run(name, "")
    journal.end_run("a", RunStatus.FINISHED, "", None)
    journal.condemn("b")
    assert [r.run_id for r in journal.list_runs()][0] == "b"
    assert [r.run_id for r in journal.list_runs(condemned_only=True)] == ["b"]
    assert len(journal.list_runs(limit=2)) == 2


def test_a_record_read_back_is_a_copy_a_caller_cannot_change(journal: Journal, run_id: str) -> None:
    journal.start_run(run_id, "")
    claimed = journal.claim_record(run_id, new(), gated=True)
    assert claimed is not None
    claimed.input["amount"] = 999
    journal.complete_record(run_id, "call-1", RecordStatus.SUCCEEDED, output={"ids": [1]})
    read = journal.get_record(run_id, "call-1")
    assert read is not None and read.input == {"amount": 1}
    read.output["ids"].append(2)
    assert journal.list_records(run_id)[0].output == {"ids": [1]}


def test_an_execution_guard_has_one_holder_at_a_time_across_journal_objects(
    journal: Journal, run_id: str
) -> None:
    # Two objects on one SQL URL stand for two processes; memory:// is one object by nature.
    other = journal if journal.url.startswith("memory:") else open_journal(journal.url)
    try:
        with journal.execution_guard(run_id, "call-1") as first:
            with other.execution_guard(run_id, "call-1") as second:
                assert first and not second
            with other.execution_guard(run_id, "call-2") as neighbour:
                assert neighbour  # one guard per record, not per run
        with other.execution_guard(run_id, "call-1") as after:
            assert after
    finally:
        if other is not journal:
            other.close()


def test_racing_threads_get_one_execution_guard(journal: Journal, run_id: str) -> None:
    n = 4
    refused = threading.Semaphore(0)

    def take(i: int) -> bool:
        with journal.execution_guard(run_id, "call-1") as held:
            if held:  # keep it until every rival has been refused
                assert all(refused.acquire(timeout=10) for _ in range(n - 1))
            else:
                refused.release()
            return held

    assert sum(race(n, take)) == 1


def test_a_running_record_with_a_live_execute_lease_is_not_judged_gone_where_the_guard_could_vanish(
    journal: Journal, run_id: str
) -> None:
    journal.start_run(run_id, "")
    live = journal.claim_record(run_id, new("call-1"), gated=True, owner="a", ttl=30.0)
    lapsed = journal.claim_record(run_id, new("call-2"), gated=True, owner="a", ttl=0.01)
    assert live is not None and lapsed is not None
    assert live.exec_owner == "a" and live.exec_lease_expires_at is not None
    time.sleep(0.05)
    # Where the guard dies only with its holder, a free guard decides; elsewhere the lease must lapse.
    assert journal.executor_gone(live) is journal.guard_bound_to_process
    assert journal.executor_gone(lapsed)


def test_an_execute_lease_is_renewed_by_its_owner_only_and_fences_the_outcome(
    journal: Journal, run_id: str
) -> None:
    journal.start_run(run_id, "")
    first = journal.claim_record(run_id, new("call-1"), gated=True, owner="a", ttl=0.01)
    assert first is not None and journal.renew_execution(run_id, "call-1", "a", 30.0)
    assert not journal.renew_execution(run_id, "call-1", "b", 30.0)
    # Taken over (compare-and-set on the attempt seen): the first owner's late outcome is not written.
    taken = journal.reclaim_record(
        run_id, "call-1", RecordStatus.RUNNING, gated=True, owner="b", ttl=30.0, attempts=first.attempts
    )
    assert taken is not None and taken.exec_owner == "b" and taken.attempts == 2
    assert (
        journal.reclaim_record(
            run_id, "call-1", RecordStatus.RUNNING, gated=True, owner="c", attempts=first.attempts
        )
        is None
    )
    assert not journal.renew_execution(run_id, "call-1", "a", 30.0)
    assert (
        journal.complete_record(run_id, "call-1", RecordStatus.SUCCEEDED, output={"by": "a"}, owner="a")
        is None
    )
    done = journal.complete_record(run_id, "call-1", RecordStatus.SUCCEEDED, output={"by": "b"}, owner="b")
    assert done is not None and done.output == {"by": "b"}


def test_an_outcome_written_after_the_tombstone_reopens_the_unwind_and_stops_an_earlier_one_completing(
    journal: Journal, run_id: str
) -> None:
    journal.start_run(run_id, "")
    assert journal.claim_record(run_id, new("call-1"), gated=True, owner="a", ttl=30.0) is not None
    journal.condemn(run_id)
    run = journal.get_run(run_id)
    assert run is not None
    seen = run.unwind_epoch  # what an unwind reads with its worklist
    journal.set_unwind_state(
        run_id, UnwindState.INCOMPLETE, note="call-1: uncertain", next_at=journal.now() + 600
    )
    journal.complete_record(run_id, "call-1", RecordStatus.SUCCEEDED, output={}, owner="a")
    run = journal.get_run(run_id)
    assert run is not None and run.unwind_state is UnwindState.PENDING and run.unwind_epoch == seen + 1
    assert journal.runs_to_sweep(journal.now() + 1) == [run]  # due at once for the sweeper
    journal.set_unwind_state(run_id, UnwindState.COMPLETE, epoch=seen)  # the earlier unwind finishing
    after = journal.get_run(run_id)
    assert after is not None and after.unwind_state is UnwindState.PENDING
    journal.set_unwind_state(run_id, UnwindState.COMPLETE, epoch=seen + 1)
    done = journal.get_run(run_id)
    assert done is not None and done.unwind_state is UnwindState.COMPLETE


def test_an_unwind_state_written_with_its_audit_row_keeps_the_row_once_and_even_when_the_state_is_not(
    journal: Journal, run_id: str
) -> None:
    journal.start_run(run_id, "")
    journal.condemn(run_id)
    run = journal.get_run(run_id)
    assert run is not None
    row = NewAudit(run_id, AuditAction.UNWOUND, "ops", AuditVia.WORKER, "done", event_key=f"unwound:{run_id}")
    journal.set_unwind_state(
        run_id, UnwindState.COMPLETE, epoch=run.unwind_epoch + 1, audit=row
    )  # stale epoch
    after = journal.get_run(run_id)
    assert after is not None and after.unwind_state is UnwindState.PENDING  # the state write was skipped
    assert [a.action for a in journal.read_audit(run_id)] == [AuditAction.UNWOUND]  # the row was not
    journal.set_unwind_state(run_id, UnwindState.COMPLETE, epoch=run.unwind_epoch, audit=row)  # redelivered
    done = journal.get_run(run_id)
    assert done is not None and done.unwind_state is UnwindState.COMPLETE
    assert [(a.action, a.reason) for a in journal.read_audit(run_id)] == [(AuditAction.UNWOUND, "done")]


def test_recording_an_unwind_with_a_hold_keeps_the_sweeper_off_the_run_unless_it_is_a_dry_run(
    journal: Journal, run_id: str
) -> None:
    journal.start_run(run_id, "")
    journal.condemn(run_id)  # due at once for the sweeper
    later = journal.now() + 1
    assert [r.run_id for r in journal.runs_to_sweep(later)] == [run_id]
    plan = journal.record_unwind(
        "u-plan", run_id, dry_run=True, suffixes=["s1"], hold_grace=600, hold_note="plan"
    )
    assert plan.dry_run and [r.run_id for r in journal.runs_to_sweep(later)] == [
        run_id
    ]  # a plan holds nothing
    info = journal.record_unwind(
        "u-1", run_id, dry_run=False, suffixes=["s1"], hold_grace=600, hold_note="mine"
    )
    assert info.run_id == run_id and journal.runs_to_sweep(later) == []
    run = journal.get_run(run_id)
    assert run is not None and run.unwind_state is UnwindState.PENDING and run.unwind_note == "mine"
    other = f"{run_id}-other"
    journal.condemn(other)
    taken = journal.record_unwind(
        "u-1", other, dry_run=False, suffixes=[], hold_grace=600, hold_note="not mine"
    )
    assert taken.run_id == run_id  # the id is another run's unwind: the coordinator refuses it, nothing held
    assert [r.run_id for r in journal.runs_to_sweep(later)] == [other]


@pytest.mark.parametrize("known", [True, False], ids=["known-run", "run-never-seen"])
def test_racing_tombstones_with_audit_rows_leave_one_condemned_row_from_the_writer(
    journal: Journal, run_id: str, known: bool
) -> None:
    if known:
        journal.start_run(run_id, "")

    def condemn(i: int) -> float:
        return journal.condemn(
            run_id, audit=NewAudit(run_id, AuditAction.CONDEMNED, f"actor-{i}", AuditVia.CLI, f"why {i}")
        )

    stamps = race(6, condemn)
    run = journal.get_run(run_id)
    assert run is not None and set(stamps) == {run.condemned_at}
    rows = [r for r in journal.read_audit(run_id) if r.action is AuditAction.CONDEMNED]
    assert len(rows) == 1 and rows[0].actor.startswith("actor-")
    assert rows[0].reason == "why " + rows[0].actor.removeprefix("actor-")
    assert journal.read_worklist(run_id, [RecordStatus.SUCCEEDED]).condemner == (
        rows[0].actor,
        rows[0].reason,
    )


def test_redeliveries_count_per_task_across_processes_and_go_when_the_task_ends(
    journal: Journal, run_id: str
) -> None:
    task = f"{run_id}:call-2:unwind-1"
    assert [journal.count_redelivery(task) for _ in range(3)] == [1, 2, 3]
    assert journal.count_redelivery(task + "-other") == 1  # per task id
    journal.forget_redeliveries(task)
    assert journal.count_redelivery(task) == 1  # counted afresh once the task ended
    journal.forget_redeliveries("never-counted")  # forgetting a task never redelivered is a no-op


def test_racing_redeliveries_of_one_task_are_each_counted_once(journal: Journal, run_id: str) -> None:
    counts = race(8, lambda _: journal.count_redelivery(run_id))
    assert sorted(counts) == list(range(1, 9))
