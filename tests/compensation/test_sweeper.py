"""The beat sweeper's logic (saga.retry_uncertain) on the memory journal: which runs it re-drives,
with what backoff, and when it gives up and flags a run for a person."""

from __future__ import annotations

import pytest

from saga_worker import Journal, MemoryJournal, Tool, ToolCall, compensate_run, run_durable, scripted
from saga_worker import executor as ex
from saga_worker.journal.records import UnwindState
from saga_worker.settings import SagaSettings
from tests.reads import run_of

SETTINGS = SagaSettings(sweep_backoff=2.0, sweep_backoff_max=30.0, sweep_max_attempts=3)


def uncertain_run(journal: MemoryJournal, run_id: str) -> None:
    """A run whose only call failed, with no recover hook: no unwind can tell whether its side effect
    happened, so every unwind leaves it uncertain and the run stays incomplete."""

    def execute(input: object, opts: object) -> None:
        raise TimeoutError("provider timed out")

    tools = {"t": Tool(execute, lambda i, out, o: None)}
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(ToolCall("t", {})))
    report = compensate_run(run_id, journal=journal, tools=tools)
    assert [e.status.value for e in report.entries] == ["uncertain"]


def test_backoff_doubles_per_attempt_up_to_the_cap() -> None:
    assert [ex.backoff_delay(n, base=2.0, cap=30.0) for n in range(6)] == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert ex.backoff_delay(10_000, base=2.0, cap=300.0) == 300.0
    # The schedule the journal stores, pinned: the defaults (2 s to 300 s), a fractional base, a cap
    # below the base, and a cap far beyond any attempt.
    assert [ex.backoff_delay(n, base=2.0, cap=300.0) for n in range(10)] == [
        2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0, 300.0,
    ]  # fmt: skip
    assert [ex.backoff_delay(n, base=0.75, cap=5.0) for n in range(5)] == [0.75, 1.5, 3.0, 5.0, 5.0]
    assert [ex.backoff_delay(n, base=10.0, cap=4.0) for n in range(3)] == [4.0, 4.0, 4.0]
    assert ex.backoff_delay(40, base=1.0, cap=1e300) == 2.0**40
    assert ex.backoff_delay(5000, base=1.0, cap=1e300) == 1e300


def test_sweep_redrives_a_due_incomplete_run_once_and_books_the_next_look_with_backoff(run_id: str) -> None:
    journal = MemoryJournal()
    uncertain_run(journal, run_id)
    assert run_of(journal, run_id).unwind_state is UnwindState.INCOMPLETE
    now = journal.now() + 1.0
    enqueued: list[str] = []
    outcome = ex.sweep(journal, enqueue=enqueued.append, settings=SETTINGS, now=now)
    assert enqueued == [run_id] and outcome.redriven == [run_id]
    run = journal.get_run(run_id)
    assert run is not None and run.unwind_attempts == 1 and run.unwind_next_at == pytest.approx(now + 2.0)
    # Not due again until the backoff has passed.
    assert ex.sweep(journal, enqueue=enqueued.append, settings=SETTINGS, now=now + 1.9).redriven == []
    assert ex.sweep(journal, enqueue=enqueued.append, settings=SETTINGS, now=now + 2.0).redriven == [run_id]
    assert run_of(journal, run_id).unwind_next_at == pytest.approx(now + 2.0 + 4.0)


def test_sweep_flags_a_run_for_a_person_after_the_retry_budget_and_never_redrives_it_again(
    run_id: str,
) -> None:
    journal = MemoryJournal()
    uncertain_run(journal, run_id)
    enqueued: list[str] = []
    now = journal.now()
    for _ in range(SETTINGS.sweep_max_attempts):
        now += 1000.0
        ex.sweep(journal, enqueue=enqueued.append, settings=SETTINGS, now=now)
    assert enqueued == [run_id] * SETTINGS.sweep_max_attempts
    outcome = ex.sweep(journal, enqueue=enqueued.append, settings=SETTINGS, now=now + 1000.0)
    assert outcome.flagged == [run_id] and outcome.redriven == []
    run = journal.get_run(run_id)
    assert run is not None and run.unwind_state is UnwindState.ATTENTION
    assert "gave up after 3 re-drives" in (run.unwind_note or "")
    assert ex.sweep(journal, enqueue=enqueued.append, settings=SETTINGS, now=now + 1e6).flagged == []
    assert len(enqueued) == SETTINGS.sweep_max_attempts


def test_sweep_leaves_complete_runs_and_runs_never_condemned_alone(run_id: str) -> None:
    journal = MemoryJournal()
    tools = {"t": Tool(lambda i, o: 1, lambda i, out, o: None)}
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(ToolCall("t", {})))
    run_durable(run_id + "-live", journal=journal, tools=tools, planner=scripted(ToolCall("t", {})))
    compensate_run(run_id, journal=journal, tools=tools)
    enqueued: list[str] = []
    assert (
        ex.sweep(journal, enqueue=enqueued.append, settings=SETTINGS, now=journal.now() + 1e6).redriven == []
    )
    assert enqueued == []


def test_sweep_redrives_an_unwind_that_began_and_never_finished_once_its_grace_has_passed(
    run_id: str,
) -> None:
    journal = MemoryJournal()
    tools = {"t": Tool(lambda i, o: 1, lambda i, out, o: None)}
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(ToolCall("t", {})))
    ex.start_unwind(journal, run_id, "lost", dry_run=False, claim_ttl=10.0)  # its worker died right after
    enqueued: list[str] = []
    assert ex.sweep(journal, enqueue=enqueued.append, settings=SETTINGS).redriven == []
    assert ex.sweep(
        journal, enqueue=enqueued.append, settings=SETTINGS, now=journal.now() + 21.0
    ).redriven == [run_id]


def test_redrive_of_a_run_whose_sweep_booked_a_backoff_keeps_that_backoff(run_id: str) -> None:
    journal = MemoryJournal()
    uncertain_run(journal, run_id)
    now = journal.now()
    settings = SagaSettings(sweep_backoff=100.0, sweep_backoff_max=100.0)
    ex.sweep(journal, enqueue=lambda rid: None, settings=settings, now=now)
    ex.start_unwind(journal, run_id, "redrive", dry_run=False, claim_ttl=1.0)
    assert run_of(journal, run_id).unwind_next_at == pytest.approx(now + 100.0)


def test_an_unwind_whose_report_was_never_assembled_is_unfinished_and_a_dry_run_never_is(
    journal: Journal, run_id: str
) -> None:
    tools = {"t": Tool(lambda i, o: {"ok": 1}, lambda i, out, o: None)}
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(ToolCall("t", {}), ToolCall("t", {})))
    ex.start_unwind(journal, run_id, "plan", dry_run=True, claim_ttl=5.0)
    first = ex.start_unwind(journal, run_id, "lost", dry_run=False, claim_ttl=5.0)
    # Its step messages lost (a broker restarted without its data): its caller has no report.
    assert ex.unfinished_unwinds(journal, run_id) == ["lost"]

    nxt: ex.Next | None = first
    while isinstance(nxt, ex.Step):  # the sweeper's re-drive goes on with it, under its own id
        nxt = ex.run_step(journal, tools, run_id, "lost", nxt.suffix, claim_ttl=5.0)
    assert isinstance(nxt, ex.Finalize)
    report = ex.finalize_unwind(journal, run_id, "lost")

    assert [e.status.value for e in report.entries] == ["compensated", "compensated"]
    assert ex.unfinished_unwinds(journal, run_id) == []
