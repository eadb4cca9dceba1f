"""Resuming a call whose record is ``running`` (crashed mid-execute) or ``failed`` (docs/reference/tools-and-runs.md).

An interrupted call is made in-process by an ``execute`` that raises a BaseException, which nothing in
the library catches: the record stays ``running`` exactly as after a crash. (tests/recording/test_multiprocess_runs.py
does the same with a real process killed by ``os._exit``.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypedDict

import pytest

from saga_worker import (
    CallOptions,
    CompensatedRunError,
    Journal,
    RecoverResult,
    RunState,
    SideEffectRetryBlockedError,
    Tool,
    ToolCall,
    compensate_run,
    resume_run,
    run_durable,
    scripted,
    stream_durable,
)
from saga_worker.journal.records import RecordStatus, RunStatus, ToolRecord
from saga_worker.recording import calls as calls_module
from tests.leases import lapse_execute_lease


class Crash(BaseException):
    """Stands for the process dying inside ``execute``."""


PLANNER = scripted(ToolCall("charge", {"amount": 10}), final="charged")


def crash(input: Any, opts: CallOptions) -> Any:
    raise Crash


def fail(input: Any, opts: CallOptions) -> Any:
    raise RuntimeError("gateway timeout")


def leave_record(journal: Journal, run_id: str, status: RecordStatus) -> ToolRecord:
    """Leave call-1 of a live (not ended) run ``running`` or ``failed``."""
    if status is RecordStatus.RUNNING:
        with pytest.raises(Crash):
            run_durable(run_id, journal=journal, tools={"charge": Tool(crash)}, planner=PLANNER)
        lapse_execute_lease(journal, run_id, "call-1")  # the dead process renews it no more
    else:

        def dies_on_error(state: RunState) -> Any:
            if state.results:
                raise Crash  # the process dies after the failure is recorded, before the run ends
            return PLANNER(state)

        with pytest.raises(Crash):
            run_durable(run_id, journal=journal, tools={"charge": Tool(fail)}, planner=dies_on_error)
    record = journal.get_record(run_id, "call-1")
    assert record is not None and record.status is status
    run = journal.get_run(run_id)
    assert run is not None and run.status is RunStatus.RUNNING
    return record


class Probe:
    """Counts executions and recover calls, and remembers the keys they were given."""

    def __init__(self, answer: Callable[[], Any] | None = None) -> None:
        self.executed: list[str] = []
        self.recovered: list[str] = []
        self.answer = answer

    def execute(self, input: Any, opts: CallOptions) -> Any:
        self.executed.append(opts.idempotency_key)
        return {"charged": input["amount"]}

    def recover(self, input: Any, opts: CallOptions) -> Any:
        self.recovered.append(opts.idempotency_key)
        assert self.answer is not None
        return self.answer()


STATUSES = [RecordStatus.RUNNING, RecordStatus.FAILED]


@pytest.mark.parametrize("status", STATUSES, ids=lambda s: s.value)
def test_recover_done_records_the_call_succeeded_without_executing_it(
    journal: Journal, run_id: str, status: RecordStatus
) -> None:
    leave_record(journal, run_id, status)
    probe = Probe(lambda: RecoverResult(done=True, output={"charged": "found"}))
    events = list(
        stream_durable(
            run_id,
            journal=journal,
            tools={"charge": Tool(probe.execute, recover=probe.recover)},
            planner=PLANNER,
        )
    )
    assert probe.executed == [] and probe.recovered == [f"{run_id}:call-1"]
    assert [e.outcome for e in events if e.kind == "tool"] == ["recovered"]
    record = journal.get_record(run_id, "call-1")
    assert record is not None and (record.status, record.output, record.error) == (
        RecordStatus.SUCCEEDED,
        {"charged": "found"},
        None,
    )
    assert events[-1].result is not None and events[-1].result.status == "finished"


@pytest.mark.parametrize("status", STATUSES, ids=lambda s: s.value)
def test_recover_not_done_executes_the_call_again_with_the_same_key(
    journal: Journal, run_id: str, status: RecordStatus
) -> None:
    before = leave_record(journal, run_id, status)
    probe = Probe(lambda: RecoverResult(done=False))
    result = resume_run(
        run_id, journal=journal, tools={"charge": Tool(probe.execute, recover=probe.recover)}, planner=PLANNER
    )
    assert result.status == "finished"
    assert probe.recovered == probe.executed == [f"{run_id}:call-1"]
    record = journal.get_record(run_id, "call-1")
    assert record is not None and record.status is RecordStatus.SUCCEEDED and record.output == {"charged": 10}
    assert record.attempts == before.attempts + 1 and record.seq == before.seq


class SafeToRepeat(TypedDict, total=False):
    idempotent: bool
    side_effect: bool


@pytest.mark.parametrize("status", STATUSES, ids=lambda s: s.value)
@pytest.mark.parametrize(
    "flags", [{"idempotent": True}, {"side_effect": False}], ids=["idempotent", "read-only"]
)
def test_a_tool_safe_to_repeat_is_executed_again_with_the_same_key(
    journal: Journal, run_id: str, status: RecordStatus, flags: SafeToRepeat
) -> None:
    leave_record(journal, run_id, status)
    probe = Probe()
    result = resume_run(
        run_id, journal=journal, tools={"charge": Tool(probe.execute, **flags)}, planner=PLANNER
    )
    assert result.status == "finished" and probe.executed == [f"{run_id}:call-1"]
    record = journal.get_record(run_id, "call-1")
    assert record is not None and record.status is RecordStatus.SUCCEEDED and record.attempts == 2


def test_a_failed_call_retried_and_failing_again_counts_its_attempts(journal: Journal, run_id: str) -> None:
    leave_record(journal, run_id, RecordStatus.FAILED)
    result = resume_run(
        run_id, journal=journal, tools={"charge": Tool(fail, idempotent=True)}, planner=PLANNER
    )
    assert result.status == "failed"
    record = journal.get_record(run_id, "call-1")
    assert record is not None and record.status is RecordStatus.FAILED and record.attempts == 2
    assert record.error == "RuntimeError: gateway timeout"


def blocked_cases() -> list[Any]:
    def raises() -> Any:
        raise ConnectionError("billing API down")

    return [
        pytest.param(None, "no recover hook", id="no-recover"),
        pytest.param(raises, "recover raised ConnectionError", id="recover-raises"),
        pytest.param(lambda: True, "not a RecoverResult", id="recover-answers-bool"),
        pytest.param(lambda: {"done": True}, "not a RecoverResult", id="recover-answers-dict"),
    ]


@pytest.mark.parametrize("status", STATUSES, ids=lambda s: s.value)
@pytest.mark.parametrize("answer, reason", blocked_cases())
def test_a_call_that_may_have_happened_is_blocked_and_its_record_left_as_it_was(
    journal: Journal, run_id: str, status: RecordStatus, answer: Any, reason: str
) -> None:
    before = leave_record(journal, run_id, status)
    probe = Probe(answer)
    tool = Tool(probe.execute, recover=probe.recover if answer is not None else None)
    with pytest.raises(SideEffectRetryBlockedError) as info:
        resume_run(run_id, journal=journal, tools={"charge": tool}, planner=PLANNER)
    assert reason in str(info.value) or (answer is None and "recover" in str(info.value))
    assert info.value.detail == {"run_id": run_id, "tool_call_id": "call-1", "tool_name": "charge"}
    assert probe.executed == []
    assert journal.get_record(run_id, "call-1") == before  # every field, timestamps included
    run = journal.get_run(run_id)
    assert run is not None and run.status is RunStatus.RUNNING and len(journal.list_decisions(run_id)) == 1


def test_a_blocked_call_can_be_resumed_later_once_a_recover_hook_answers(
    journal: Journal, run_id: str
) -> None:
    leave_record(journal, run_id, RecordStatus.RUNNING)
    with pytest.raises(SideEffectRetryBlockedError):
        resume_run(run_id, journal=journal, tools={"charge": Tool(fail)}, planner=PLANNER)
    probe = Probe(lambda: RecoverResult(done=True, output={"charged": 10}))
    result = resume_run(
        run_id, journal=journal, tools={"charge": Tool(probe.execute, recover=probe.recover)}, planner=PLANNER
    )
    assert result.status == "finished" and probe.executed == []


def test_recover_done_with_non_json_output_is_blocked_and_leaves_the_record(
    journal: Journal, run_id: str
) -> None:
    before = leave_record(journal, run_id, RecordStatus.RUNNING)
    probe = Probe(lambda: RecoverResult(done=True, output=object()))
    with pytest.raises(SideEffectRetryBlockedError, match="JSON"):
        resume_run(
            run_id,
            journal=journal,
            tools={"charge": Tool(probe.execute, recover=probe.recover)},
            planner=PLANNER,
        )
    assert journal.get_record(run_id, "call-1") == before


def test_run_durable_continues_a_crashed_run_as_resume_run_does(journal: Journal, run_id: str) -> None:
    leave_record(journal, run_id, RecordStatus.RUNNING)
    probe = Probe()
    result = run_durable(
        run_id, journal=journal, tools={"charge": Tool(probe.execute, idempotent=True)}, planner=PLANNER
    )
    assert result.status == "finished" and probe.executed == [f"{run_id}:call-1"]


def test_a_condemned_run_refuses_resume_before_recover_or_execute(journal: Journal, run_id: str) -> None:
    leave_record(journal, run_id, RecordStatus.RUNNING)
    compensate_run(run_id, journal=journal, tools={})
    probe = Probe(lambda: RecoverResult(done=False))
    tools = {"charge": Tool(probe.execute, recover=probe.recover, idempotent=True)}
    for go in (resume_run, run_durable):
        with pytest.raises(CompensatedRunError):
            go(run_id, journal=journal, tools=tools, planner=PLANNER)
    assert probe.executed == probe.recovered == []


def test_a_call_still_executing_in_another_thread_is_neither_probed_nor_executed_again(
    journal: Journal, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calls_module, "_GUARD_WAIT_S", 0.1)
    entered, release = threading.Event(), threading.Event()

    def slow(input: Any, opts: CallOptions) -> Any:
        entered.set()
        release.wait(60)
        return {"charged": input["amount"]}

    first = threading.Thread(
        target=run_durable,
        args=(run_id,),
        kwargs={"journal": journal, "tools": {"charge": Tool(slow)}, "planner": PLANNER},
    )
    first.start()
    try:
        assert entered.wait(60)
        before = journal.get_record(run_id, "call-1")
        assert before is not None and before.status is RecordStatus.RUNNING
        probe = Probe(lambda: RecoverResult(done=False))
        tools = {"charge": Tool(probe.execute, recover=probe.recover, idempotent=True)}
        with pytest.raises(SideEffectRetryBlockedError, match="executing it right now"):
            resume_run(run_id, journal=journal, tools=tools, planner=PLANNER)
        assert probe.recovered == probe.executed == []
        assert journal.get_record(run_id, "call-1") == before
    finally:
        release.set()
        first.join()
    assert resume_run(run_id, journal=journal, tools=tools, planner=PLANNER).status == "finished"
    assert probe.recovered == probe.executed == []


def test_the_execution_guard_is_free_again_once_a_call_has_settled(journal: Journal, run_id: str) -> None:
    run_durable(run_id, journal=journal, tools={"charge": Tool(fail)}, planner=PLANNER)
    with journal.execution_guard(run_id, "call-1") as held:
        assert held
