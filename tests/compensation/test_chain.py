"""The continuation logic behind the Celery tasks (saga_worker.executor), driven in-process on the
memory journal: a chain of start → step … → finalize gives the library's report, halts like it,
and survives duplicated and redelivered messages."""

from __future__ import annotations

import time
from typing import Any

import pytest

from saga_worker import (
    CallOptions,
    InvalidInputError,
    Journal,
    MemoryJournal,
    Tool,
    ToolCall,
    approve_compensation,
    compensate_run,
    run_durable,
)
from saga_worker import executor as ex
from saga_worker.celery.redeliveries import Delivery
from saga_worker.compensation.carry import LEASE_LOST
from saga_worker.compensation.report import CompensationReport
from saga_worker.core import faults, leases
from saga_worker.core.keys import compensate_key
from saga_worker.executor import Finalize, Step
from saga_worker.journal.records import ClaimStatus, UnwindState
from saga_worker.recording.planning import scripted
from saga_worker.settings import SagaSettings
from tests.compensation.order_chain import TTL, Provider, order, same_but_run
from tests.reads import run_of


def drive(
    journal: Journal, tools: dict[str, Tool], run_id: str, unwind_id: str, *, dry_run: bool = False
) -> CompensationReport:
    """What the Celery tasks do, one message at a time."""
    nxt = ex.start_unwind(journal, run_id, unwind_id, dry_run=dry_run, claim_ttl=TTL)
    while isinstance(nxt, Step):
        got = ex.run_step(journal, tools, nxt.run_id, nxt.unwind_id, nxt.suffix, claim_ttl=TTL)
        assert got is not None
        nxt = got
    return ex.finalize_unwind(journal, nxt.run_id, nxt.unwind_id)


def test_chain_of_continuations_reports_exactly_what_the_library_reports_for_an_identical_run(
    run_id: str,
) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    order(journal, provider, run_id + "-twin")
    library = compensate_run(run_id + "-twin", journal=journal, tools=provider.tools())
    chained = drive(journal, provider.tools(), run_id, "unwind-1")
    assert chained.model_dump(mode="json") == same_but_run(library, run_id + "-twin", run_id)
    assert [e.status.value for e in chained.entries] == ["compensated"] * 3
    assert run_of(journal, run_id).unwind_state is UnwindState.COMPLETE


def test_coordinator_writes_the_tombstone_before_returning_the_first_step(run_id: str) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    first = ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    assert run_of(journal, run_id).condemned
    assert first == Step(run_id, "u", "call-3", False, 0, 3)
    assert provider.calls == []


def test_failing_step_halts_the_chain_and_later_steps_read_not_attempted(run_id: str) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    provider.fail.add("reserve")
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    assert isinstance(ex.run_step(journal, provider.tools(), run_id, "u", "call-3", claim_ttl=TTL), Step)
    assert ex.run_step(journal, provider.tools(), run_id, "u", "call-2", claim_ttl=TTL) == Finalize(
        run_id, "u"
    )
    report = ex.finalize_unwind(journal, run_id, "u")
    assert [e.status.value for e in report.entries] == ["compensated", "failed", "not-attempted"]
    assert "refund refused" in (report.entries[1].error or "")
    assert run_of(journal, run_id).unwind_state is UnwindState.INCOMPLETE


def test_dry_run_chain_writes_no_tombstone_and_calls_no_hook(run_id: str) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    report = drive(journal, provider.tools(), run_id, "plan", dry_run=True)
    assert [e.status.value for e in report.entries] == ["would-compensate"] * 3
    assert report.dry_run and not report.condemned
    assert provider.calls == []
    assert run_of(journal, run_id).unwind_state is UnwindState.NONE


def test_duplicate_delivery_of_a_finished_step_passes_the_continuation_on_without_calling_the_hook(
    run_id: str,
) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    first = ex.run_step(journal, provider.tools(), run_id, "u", "call-3", claim_ttl=TTL)
    again = ex.run_step(journal, provider.tools(), run_id, "u", "call-3", claim_ttl=TTL)
    assert first == again == Step(run_id, "u", "call-2", False, 1, 3)
    assert provider.calls == [compensate_key(run_id, "call-3")]


def test_redelivered_step_whose_attempt_died_mid_hook_retakes_the_step_with_the_same_key_once_its_lease_lapses(
    run_id: str,
) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    key = compensate_key(run_id, "call-3")
    # The dead attempt: one delivery of this step claimed it, then died; its short lease is never renewed.
    dead = f"{ex.step_owner('u', 'call-3')}:dead0001"
    journal.claim_compensation(run_id, "call-3", via_run_id=run_id, owner=dead, ttl=0.3, idempotency_key=key)
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        time.sleep(seconds)

    nxt = ex.run_step(journal, provider.tools(), run_id, "u", "call-3", claim_ttl=TTL, sleep=nap)
    assert nxt == Step(run_id, "u", "call-2", False, 1, 3)
    assert provider.calls == [key]
    claim = journal.get_claim(run_id, "call-3")
    assert claim is not None and claim.status is ClaimStatus.COMPENSATED and claim.owner != dead
    assert 0 < sum(naps) < TTL  # it waited for the dead lease to lapse, not for a whole TTL


def test_a_step_whose_workers_kept_dying_fails_without_its_hooks_and_flags_the_run_for_a_person(
    run_id: str,
) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    tools = provider.tools()
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    key = compensate_key(run_id, "call-2")
    # The last delivery died mid-hook holding the step: its short lease is never renewed.
    dead = f"{ex.step_owner('u', 'call-2')}:dead0001"
    journal.claim_compensation(run_id, "call-2", via_run_id=run_id, owner=dead, ttl=0.3, idempotency_key=key)
    assert isinstance(ex.run_step(journal, tools, run_id, "u", "call-3", claim_ttl=TTL), Step)
    calls_before = list(provider.calls)
    why = "not run again: the worker process running task 't' was lost 3 times"
    nxt = ex.run_step(journal, tools, run_id, "u", "call-2", claim_ttl=TTL, refusal=why)
    assert isinstance(nxt, Finalize) and nxt.done is not None
    assert (nxt.done.status.value, nxt.done.worker_lost) == ("failed", True)
    assert nxt.done.error == (
        f"{why}; its compensate hook was started once (the step's claims, across unwinds) and its "
        "outcome was never recorded: it may have taken effect; none of the tool's code was called "
        f"this time, and a re-drive calls the hook again with the same key {key!r}"
    )
    assert provider.calls == calls_before  # the hook was not called
    claim = journal.get_claim(run_id, "call-2")
    assert claim is not None and claim.status is ClaimStatus.FAILED and claim.owner != dead
    report = ex.finalize_unwind(journal, run_id, "u")
    assert [e.status.value for e in report.entries] == ["compensated", "failed", "not-attempted"]
    run = run_of(journal, run_id)
    assert run.unwind_state is UnwindState.ATTENTION  # not re-driven by the sweeper: a person looks
    assert (
        run.unwind_note is not None
        and "call-2 (tool 'reserve')" in run.unwind_note
        and why in run.unwind_note
    )
    # A person's re-drive runs the step again, with the same key.
    again = drive(journal, tools, run_id, "u2")
    assert [e.status.value for e in again.entries] == ["already-compensated", "compensated", "compensated"]
    assert provider.calls[-2] == key


def test_a_step_refused_after_its_workers_kept_dying_says_its_hook_started_each_time_and_a_redrive_keeps_the_key(
    journal: Journal, run_id: str
) -> None:
    provider = Provider()
    order(journal, provider, run_id)
    tools = provider.tools()
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    assert isinstance(ex.run_step(journal, tools, run_id, "u", "call-3", claim_ttl=TTL), Step)
    key = compensate_key(run_id, "call-2")
    # Three deliveries each claimed the step, started its hook and died before its outcome was written.
    for n in range(3):
        journal.claim_compensation(
            run_id,
            "call-2",
            via_run_id=run_id,
            owner=f"{ex.step_owner('u', 'call-2')}:dead000{n}",
            ttl=0.05,
            idempotency_key=key,
        )
        time.sleep(0.06)  # its lease lapses: the next delivery takes the step over
    calls_before = list(provider.calls)

    refusal = Delivery("t", 4, 3).refusal
    nxt = ex.run_step(journal, tools, run_id, "u", "call-2", claim_ttl=TTL, refusal=refusal)

    assert isinstance(nxt, Finalize) and nxt.done is not None
    assert (nxt.done.status.value, nxt.done.worker_lost) == ("failed", True)
    error = nxt.done.error or ""
    assert "none of the step's tool code was called" not in error, error
    assert "was lost 3 times" in error and "SAGA_MAX_DELIVERIES=3" in error
    assert "its compensate hook was started 3 times" in error, error
    assert "its outcome was never recorded: it may have taken effect" in error, error
    assert f"calls the hook again with the same key {key!r}" in error, error
    assert provider.calls == calls_before  # not called this time
    again = drive(journal, tools, run_id, "u2")
    assert [e.status.value for e in again.entries] == ["already-compensated", "compensated", "compensated"]
    assert provider.calls[-2] == key and again.entries[1].idempotency_key == key


def test_two_deliveries_of_one_step_at_once_call_its_hook_once(
    run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    results: list[object] = []

    def twin_arrives(*_: object) -> None:
        # The twin delivery runs the very same step while the first is inside its hook, having looked
        # for a live twin just before the first claimed (the race): only the claim itself can stop it.
        from saga_worker.compensation.twins import Twins

        monkeypatch.setattr(Twins, "live_holder", lambda *args: False)
        results.append(ex.run_step(journal, provider.tools(), run_id, "u", "call-3", claim_ttl=TTL))

    tools = provider.tools()
    inner = tools["notify"].compensate  # call-3 is notify
    assert inner is not None

    def compensate_with_twin(input: Any, output: Any, opts: CallOptions) -> Any:
        if not results:
            twin_arrives()
        return inner(input, output, opts)

    tools["notify"] = Tool(tools["notify"].execute, compensate_with_twin)
    first = ex.run_step(journal, tools, run_id, "u", "call-3", claim_ttl=TTL)
    assert first == Step(run_id, "u", "call-2", False, 1, 3)
    assert results == [None]  # the twin saw the step held by a delivery of itself and stood down
    assert provider.calls.count(compensate_key(run_id, "call-3")) == 1


def test_a_step_whose_lease_was_taken_over_mid_hook_stores_busy_never_a_second_compensated(
    run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    monkeypatch.setattr(leases.keeper, "hold", lambda renew, interval: lambda: None)  # renewals stall
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=0.2)
    tools = provider.tools()
    inner = tools["notify"].compensate  # call-3 is notify
    assert inner is not None
    rival: list[CompensationReport] = []

    def overtaken(input: Any, output: Any, opts: CallOptions) -> Any:
        # While this hook runs its lease lapses, and another unwinder takes the step over and undoes it.
        if not rival:
            claim = journal.get_claim(run_id, "call-3")
            assert claim is not None
            while journal.now() <= claim.lease_expires_at + 0.05:
                time.sleep(0.02)
            rival.append(compensate_run(run_id, journal=journal, tools=provider.tools(), claim_ttl=60))
        return inner(input, output, opts)

    tools["notify"] = Tool(tools["notify"].execute, overtaken)
    nxt = ex.run_step(journal, tools, run_id, "u", "call-3", claim_ttl=0.2)

    assert isinstance(nxt, Finalize)  # busy halts the chain
    report = ex.finalize_unwind(journal, run_id, "u")
    assert [e.status.value for e in report.entries] == ["busy", "not-attempted", "not-attempted"]
    assert report.entries[0].error == LEASE_LOST
    assert [e.status.value for e in rival[0].entries] == ["compensated"] * 3
    claim = journal.get_claim(run_id, "call-3")
    assert claim is not None and claim.status is ClaimStatus.COMPENSATED
    assert not claim.owner.startswith(ex.step_owner("u", "call-3"))  # the rival's outcome stands


def test_duplicate_delivery_drops_itself_while_a_live_twin_renews_the_lease(run_id: str) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    owner = f"{ex.step_owner('u', 'call-3')}:twin0001"
    journal.claim_compensation(
        run_id,
        "call-3",
        via_run_id=run_id,
        owner=owner,
        ttl=TTL,
        idempotency_key=compensate_key(run_id, "call-3"),
    )

    def twin_renews(_: float) -> None:
        journal.renew_claim(run_id, "call-3", owner, TTL + 1.0)

    assert (
        ex.run_step(journal, provider.tools(), run_id, "u", "call-3", claim_ttl=TTL, sleep=twin_renews)
        is None
    )
    assert provider.calls == []
    assert journal.list_unwind_entries("u") == {}


def test_step_held_by_another_unwind_reads_busy_and_halts_the_chain(run_id: str) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    journal.claim_compensation(
        run_id,
        "call-3",
        via_run_id=run_id,
        owner=ex.step_owner("other", "call-3"),
        ttl=TTL,
        idempotency_key=compensate_key(run_id, "call-3"),
    )
    assert ex.run_step(journal, provider.tools(), run_id, "u", "call-3", claim_ttl=TTL) == Finalize(
        run_id, "u"
    )
    report = ex.finalize_unwind(journal, run_id, "u")
    assert [e.status.value for e in report.entries] == ["busy", "not-attempted", "not-attempted"]
    assert provider.calls == []


def test_step_whose_attempt_died_after_writing_its_outcome_reports_compensated_not_already(
    run_id: str,
) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    owner = f"{ex.step_owner('u', 'call-3')}:twin0001"
    journal.claim_compensation(
        run_id,
        "call-3",
        via_run_id=run_id,
        owner=owner,
        ttl=TTL,
        idempotency_key=compensate_key(run_id, "call-3"),
    )
    journal.finish_claim(run_id, "call-3", owner, ClaimStatus.COMPENSATED)
    ex.run_step(journal, provider.tools(), run_id, "u", "call-3", claim_ttl=TTL)
    assert journal.list_unwind_entries("u")[0]["status"] == "compensated"
    assert provider.calls == []


class Killed(BaseException):
    """The worker process dying at a fault point (not an Exception: nothing may catch it)."""


def test_a_step_killed_right_after_its_outcome_has_its_entry_stored_with_it_and_is_passed_on_once(
    run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)

    def point(name: str, key: str = "") -> None:
        if name == "after_outcome":
            raise Killed(name)

    with monkeypatch.context() as armed:
        armed.setattr(faults, "point", point)
        with pytest.raises(Killed):
            ex.run_step(journal, provider.tools(), run_id, "u", "call-3", claim_ttl=TTL)
    stored = journal.list_unwind_entries("u")
    assert list(stored) == [0] and (stored[0]["status"], stored[0]["error"]) == ("compensated", None)

    redelivered = ex.run_step(journal, provider.tools(), run_id, "u", "call-3", claim_ttl=TTL)
    assert redelivered == Step(run_id, "u", "call-2", False, 1, 3)
    assert provider.calls == [compensate_key(run_id, "call-3")]
    assert journal.list_unwind_entries("u") == stored


def test_an_approved_gated_step_undone_by_the_chain_reports_what_the_library_reports(run_id: str) -> None:
    journal, provider = MemoryJournal(), Provider()
    tools = provider.tools()
    tools["notify"] = Tool(
        tools["notify"].execute, tools["notify"].compensate, compensate_needs_approval=True
    )
    for run in (run_id, run_id + "-twin"):
        order(journal, provider, run)
        approve_compensation(journal, run, "call-3", actor="carol")
    library = compensate_run(run_id + "-twin", journal=journal, tools=tools)
    chained = drive(journal, tools, run_id, "unwind-1")
    assert chained.model_dump(mode="json") == same_but_run(library, run_id + "-twin", run_id)
    assert [(e.status.value, e.needs_approval) for e in chained.entries][0] == ("compensated", True)


def test_coordinator_gives_a_fresh_unwind_a_grace_before_the_sweeper_may_redrive_it(run_id: str) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    run = journal.get_run(run_id)
    assert run is not None and run.unwind_state is UnwindState.PENDING
    assert run.unwind_next_at is not None and run.unwind_next_at >= journal.now() + 1.5 * TTL
    enqueued: list[str] = []
    ex.sweep(journal, enqueue=enqueued.append, settings=SagaSettings())
    assert enqueued == []


def test_redelivered_coordinator_keeps_the_first_worklist(run_id: str) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    assert ex.start_unwind(journal, run_id, "u", dry_run=True, claim_ttl=TTL) == Step(
        run_id, "u", "call-3", False, 0, 3
    )


def test_unwind_of_a_run_the_journal_never_saw_is_condemned_with_an_empty_report(run_id: str) -> None:
    journal = MemoryJournal()
    assert ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL) == Finalize(run_id, "u")
    report = ex.finalize_unwind(journal, run_id, "u")
    assert report.condemned and report.entries == []


@pytest.mark.parametrize(
    "bad", [("run-x", "missing", "call-1"), ("other-run", "u", "call-3"), ("RUN", "u", "nope")]
)
def test_step_messages_naming_an_unknown_unwind_run_or_step_get_a_clear_error(
    run_id: str, bad: tuple[str, str, str]
) -> None:
    journal, provider = MemoryJournal(), Provider()
    order(journal, provider, run_id)
    ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    rid, unwind_id, suffix = bad
    with pytest.raises(InvalidInputError):
        ex.run_step(
            journal, provider.tools(), run_id if rid == "RUN" else rid, unwind_id, suffix, claim_ttl=TTL
        )


@pytest.mark.parametrize("field", ["suffix", "unwind_id"])
def test_a_step_message_with_a_nul_in_an_id_is_refused_as_invalid_input_on_every_journal(
    journal: Journal, run_id: str, field: str
) -> None:
    """Issue 43: an id a journal cannot hold (PostgreSQL text takes no NUL) is refused by the checks
    at the boundary, naming the id, before the journal is read or written: never the driver's text."""
    provider = Provider()
    run_durable(
        run_id, journal=journal, tools=provider.tools(), planner=scripted(ToolCall("charge", {"a": 1}))
    )
    first = ex.start_unwind(journal, run_id, "u", dry_run=False, claim_ttl=TTL)
    assert isinstance(first, Step)
    ids = {"unwind_id": "u", "suffix": first.suffix}
    ids[field] += "\x00"
    with pytest.raises(InvalidInputError, match=r"1-\d+ printable characters") as refused:
        ex.run_step(journal, provider.tools(), run_id, ids["unwind_id"], ids["suffix"], claim_ttl=TTL)
    assert "NUL (0x00)" not in str(refused.value) and "not in the worklist" not in str(refused.value)
    if field == "unwind_id":
        with pytest.raises(InvalidInputError, match=r"1-\d+ printable characters"):
            ex.finalize_unwind(journal, run_id, ids["unwind_id"])
    assert provider.calls == [] and journal.list_unwind_entries("u") == {}
