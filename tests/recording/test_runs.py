"""Durable runs (docs/reference/tools-and-runs.md) on every journal: exactly-once execution, journaled decisions, misuse."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

import pytest

from saga_worker import (
    CallOptions,
    Finish,
    InvalidInputError,
    Journal,
    RunState,
    Tool,
    ToolCall,
    UnknownRunError,
    UnknownToolError,
    resume_run,
    run_durable,
    scripted,
    stream_durable,
)
from saga_worker.core.keys import IdempotencyMode
from saga_worker.journal.records import RecordStatus, RunStatus


class Crash(BaseException):
    """Stands for the process dying: nothing in the library catches it."""


class Counting:
    """A tool whose executions are counted by idempotency key."""

    def __init__(self, *, fail: bool = False, idempotency: IdempotencyMode = "call") -> None:
        self.calls: Counter[str] = Counter()
        self.fail = fail
        self.tool = Tool(self.execute, idempotency=idempotency)

    def execute(self, input: Any, opts: CallOptions) -> Any:
        self.calls[opts.idempotency_key] += 1
        if self.fail:
            raise RuntimeError(f"card declined for {input}")
        return {"done": input}


class CountingPlanner:
    """Wraps a planner and counts how often it is asked."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.asked: list[int] = []

    def __call__(self, state: RunState) -> Any:
        self.asked.append(state.step)
        return self.inner(state)


def nothing_written(journal: Journal, run_id: str) -> bool:
    return (
        journal.get_run(run_id) is None
        and journal.list_decisions(run_id) == []
        and journal.list_records(run_id) == []
    )


# -- exactly once ---------------------------------------------------------------------------------


def test_a_run_records_each_call_succeeded_with_input_and_output(journal: Journal, run_id: str) -> None:
    charge = Counting()
    result = run_durable(
        run_id,
        journal=journal,
        tools={"charge": charge.tool},
        prompt="charge it",
        planner=scripted(ToolCall("charge", {"amount": 10}), final="charged"),
    )
    assert (result.run_id, result.status, result.text, result.error) == (run_id, "finished", "charged", None)
    [record] = journal.list_records(run_id)
    assert (record.status, record.input, record.output, record.attempts) == (
        RecordStatus.SUCCEEDED,
        {"amount": 10},
        {"done": {"amount": 10}},
        1,
    )
    run = journal.get_run(run_id)
    assert run is not None and run.status is RunStatus.FINISHED and run.prompt == "charge it"


def test_a_recorded_success_is_replayed_and_never_executed_again(journal: Journal, run_id: str) -> None:
    charge = Counting()
    calls = [ToolCall("charge", {"amount": 10}), ToolCall("charge", {"amount": 20})]
    # First attempt dies at the planner's second decision: call-1 is recorded, the run is not ended.
    answers: list[Any] = [[calls[0]]]

    def dies_after_first(state: RunState) -> Any:
        if state.step >= len(answers):
            raise Crash
        return answers[state.step]

    with pytest.raises(Crash):
        run_durable(run_id, journal=journal, tools={"charge": charge.tool}, planner=dies_after_first)
    assert charge.calls == {f"{run_id}:call-1": 1}

    events = list(
        stream_durable(run_id, journal=journal, tools={"charge": charge.tool}, planner=scripted(*calls))
    )
    outcomes = [(e.tool_call_id, e.outcome) for e in events if e.kind == "tool"]
    assert outcomes == [("call-1", "replayed"), ("call-2", "executed")]
    assert charge.calls == {f"{run_id}:call-1": 1, f"{run_id}:call-2": 1}
    assert events[-1].result is not None and events[-1].result.status == "finished"


def test_journaled_decisions_are_replayed_on_resume_and_the_planner_is_not_asked_again(
    journal: Journal, run_id: str
) -> None:
    charge = Counting()
    first = CountingPlanner(scripted(ToolCall("charge", {"n": 1}), [ToolCall("charge", {"n": 2})]))

    def crash_on_third(state: RunState) -> Any:
        if state.step == 2:
            raise Crash  # the process dies before the planner's third decision
        return first(state)

    with pytest.raises(Crash):
        run_durable(run_id, journal=journal, tools={"charge": charge.tool}, planner=crash_on_third)
    assert first.asked == [0, 1]
    assert len(journal.list_decisions(run_id)) == 2

    # A different planner that would choose other calls: the journaled decisions win.
    second = CountingPlanner(
        scripted(ToolCall("charge", {"n": 99}), ToolCall("charge", {"n": 98}), final="done")
    )
    result = resume_run(run_id, journal=journal, tools={"charge": charge.tool}, planner=second)
    assert result.status == "finished" and result.text == "done"
    assert second.asked == [2]  # only the decision the journal did not have
    assert [r.input for r in journal.list_records(run_id)] == [{"n": 1}, {"n": 2}]
    assert sum(charge.calls.values()) == 2


def test_the_planner_state_carries_run_prompt_step_and_results(journal: Journal, run_id: str) -> None:
    states: list[RunState] = []

    def planner(state: RunState) -> Any:
        states.append(state)
        return [ToolCall("charge", {"n": 1})] if state.step == 0 else Finish(text="ok")

    run_durable(run_id, journal=journal, tools={"charge": Counting().tool}, planner=planner, prompt="p")
    assert [(s.run_id, s.prompt, s.step) for s in states] == [(run_id, "p", 0), (run_id, "p", 1)]
    [result] = states[1].results
    assert (result.tool_call_id, result.tool, result.input, result.output, result.error) == (
        "call-1",
        "charge",
        {"n": 1},
        {"done": {"n": 1}},
        None,
    )


def test_args_mode_three_identical_calls_execute_once_and_leave_one_record(
    journal: Journal, run_id: str
) -> None:
    email = Counting(idempotency="args")
    same = {"to": "ana@example.com", "body": "hi"}
    planner = scripted([ToolCall("email", same), ToolCall("email", same)], ToolCall("email", same))
    events = list(stream_durable(run_id, journal=journal, tools={"email": email.tool}, planner=planner))
    h = hashlib.sha256(json.dumps(same, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    assert email.calls == {f"{run_id}:email:{h}": 1}
    [record] = journal.list_records(run_id)
    assert (record.suffix, record.tool_call_id, record.status) == (
        f"args-email-{h}",
        "call-1",
        RecordStatus.SUCCEEDED,
    )
    assert [e.outcome for e in events if e.kind == "tool"] == ["executed", "replayed", "replayed"]


def test_args_mode_calls_with_different_input_are_separate_records(journal: Journal, run_id: str) -> None:
    email = Counting(idempotency="args")
    run_durable(
        run_id,
        journal=journal,
        tools={"email": email.tool},
        planner=scripted([ToolCall("email", {"to": "a"}), ToolCall("email", {"to": "b"})]),
    )
    assert len(email.calls) == 2 and len(journal.list_records(run_id)) == 2


def test_records_carry_an_explicit_increasing_sequence_in_execution_order(
    journal: Journal, run_id: str
) -> None:
    tools = {"a": Counting().tool, "b": Counting().tool}
    run_durable(
        run_id,
        journal=journal,
        tools=tools,
        planner=scripted([ToolCall("b", {}), ToolCall("a", {})], ToolCall("b", {"x": 1})),
    )
    records = journal.list_records(run_id)
    assert [r.tool_name for r in records] == ["b", "a", "b"]
    seqs = [r.seq for r in records]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3


# -- failures -------------------------------------------------------------------------------------


def test_a_failing_tool_is_recorded_failed_and_scripted_gives_up(journal: Journal, run_id: str) -> None:
    charge, ship = Counting(fail=True), Counting()
    states: list[RunState] = []
    inner = scripted(ToolCall("charge", {"amount": 10}), ToolCall("ship", {}))

    def planner(state: RunState) -> Any:
        states.append(state)
        return inner(state)

    result = run_durable(
        run_id, journal=journal, tools={"charge": charge.tool, "ship": ship.tool}, planner=planner
    )
    assert result.status == "failed"
    assert result.error is not None and "charge" in result.error and "card declined" in result.error
    [record] = journal.list_records(run_id)
    assert record.status is RecordStatus.FAILED and record.attempts == 1
    assert record.error is not None and record.error.startswith("RuntimeError: card declined")
    assert states[-1].results[0].error == record.error  # the error is handed to the planner
    assert ship.calls == Counter()
    run = journal.get_run(run_id)
    assert run is not None and run.status is RunStatus.FAILED


def test_a_tool_returning_non_json_output_is_recorded_failed(journal: Journal, run_id: str) -> None:
    result = run_durable(
        run_id,
        journal=journal,
        tools={"odd": Tool(lambda i, o: object())},
        planner=scripted(ToolCall("odd", {})),
    )
    assert result.status == "failed"
    record = journal.get_record(run_id, "call-1")
    assert record is not None and record.status is RecordStatus.FAILED and "JSON" in (record.error or "")


def test_a_planner_finishing_with_an_error_fails_the_run(journal: Journal, run_id: str) -> None:
    result = run_durable(
        run_id, journal=journal, tools={}, planner=lambda s: Finish(text="t", error="gave up")
    )
    assert (result.status, result.text, result.error) == ("failed", "t", "gave up")


def test_reaching_max_steps_fails_the_run(journal: Journal, run_id: str) -> None:
    charge = Counting()
    endless = CountingPlanner(lambda s: [ToolCall("charge", {"n": s.step})])
    result = run_durable(run_id, journal=journal, tools={"charge": charge.tool}, planner=endless, max_steps=3)
    assert result.status == "failed" and "max_steps" in (result.error or "")
    assert endless.asked == [0, 1, 2]
    assert len(journal.list_decisions(run_id)) == 3 and sum(charge.calls.values()) == 3


# -- misuse ---------------------------------------------------------------------------------------


def test_an_unknown_tool_raises_and_a_rejected_first_call_leaves_nothing_written(
    journal: Journal, run_id: str
) -> None:
    with pytest.raises(UnknownToolError, match="'refund'") as info:
        run_durable(
            run_id,
            journal=journal,
            tools={"charge": Counting().tool},
            planner=scripted(ToolCall("refund", {})),
        )
    assert info.value.detail == {"run_id": run_id, "tool_name": "refund"}
    assert nothing_written(journal, run_id)


@pytest.mark.parametrize("bad_input", [{"when": object()}, {"n": float("nan")}, {1, 2}, b"bytes"])
def test_non_json_input_raises_and_leaves_nothing_written(
    journal: Journal, run_id: str, bad_input: Any
) -> None:
    charge = Counting()
    with pytest.raises(InvalidInputError, match="JSON"):
        run_durable(
            run_id,
            journal=journal,
            tools={"charge": charge.tool},
            planner=scripted(ToolCall("charge", bad_input)),
        )
    assert nothing_written(journal, run_id) and not charge.calls


@pytest.mark.parametrize("bad_run_id", ["a:b", "", "has space", "x" * 201])
def test_a_bad_run_id_raises_and_leaves_nothing_written(journal: Journal, bad_run_id: str) -> None:
    with pytest.raises(InvalidInputError, match="run id"):
        run_durable(
            bad_run_id,
            journal=journal,
            tools={"charge": Counting().tool},
            planner=scripted(ToolCall("charge", {})),
        )
    assert journal.list_runs() == []


@pytest.mark.parametrize("bad_name", ["bad:name", "with-dash", ""])
def test_a_bad_tool_name_raises_and_leaves_nothing_written(
    journal: Journal, run_id: str, bad_name: str
) -> None:
    with pytest.raises(InvalidInputError, match="tool name"):
        run_durable(
            run_id,
            journal=journal,
            tools={bad_name: Counting().tool},
            planner=scripted(ToolCall(bad_name, {})),
        )
    assert nothing_written(journal, run_id)


@pytest.mark.parametrize("bad_call_id", ["x:y", "args-email-1", "call-1"])
def test_a_bad_or_repeated_call_id_raises_and_leaves_nothing_written(
    journal: Journal, run_id: str, bad_call_id: str
) -> None:
    calls = [ToolCall("charge", {"n": 1}), ToolCall("charge", {"n": 2}, id=bad_call_id)]
    with pytest.raises(InvalidInputError, match="call id"):
        run_durable(run_id, journal=journal, tools={"charge": Counting().tool}, planner=scripted(calls))
    assert nothing_written(journal, run_id)


def test_a_planner_answer_that_is_not_calls_or_finish_raises(journal: Journal, run_id: str) -> None:
    with pytest.raises(InvalidInputError, match="planner"):
        run_durable(run_id, journal=journal, tools={}, planner=lambda s: "finish please")  # type: ignore[arg-type, return-value]  # the wrong answer is the point
    assert nothing_written(journal, run_id)


def test_a_rejected_later_decision_writes_nothing_for_that_decision(journal: Journal, run_id: str) -> None:
    charge = Counting()
    with pytest.raises(UnknownToolError):
        run_durable(
            run_id,
            journal=journal,
            tools={"charge": charge.tool},
            planner=scripted(ToolCall("charge", {}), ToolCall("nope", {})),
        )
    assert len(journal.list_decisions(run_id)) == 1 and len(journal.list_records(run_id)) == 1


def test_stream_durable_refuses_misuse_at_the_call_before_iterating(journal: Journal) -> None:
    with pytest.raises(InvalidInputError):
        stream_durable("a:b", journal=journal, tools={}, planner=scripted())
    with pytest.raises(InvalidInputError, match="max_steps"):
        stream_durable("ok", journal=journal, tools={}, planner=scripted(), max_steps=0)


def test_resume_of_a_run_the_journal_never_saw_raises_unknown_run(journal: Journal, run_id: str) -> None:
    with pytest.raises(UnknownRunError):
        resume_run(run_id, journal=journal, tools={}, planner=scripted())


# -- ended runs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fail", [False, True])
def test_an_ended_run_returns_its_recorded_result_and_executes_nothing(
    journal: Journal, run_id: str, fail: bool
) -> None:
    charge = Counting(fail=fail)
    first = run_durable(
        run_id,
        journal=journal,
        tools={"charge": charge.tool},
        planner=scripted(ToolCall("charge", {}), final="first"),
    )
    assert first.status == ("failed" if fail else "finished")
    executed = sum(charge.calls.values())
    asked = CountingPlanner(scripted(ToolCall("charge", {"again": 1}), final="second"))
    again = run_durable(run_id, journal=journal, tools={"charge": charge.tool}, planner=asked, prompt="other")
    resumed = resume_run(run_id, journal=journal, tools={"charge": charge.tool}, planner=asked)
    assert again == first and resumed == first
    assert asked.asked == [] and sum(charge.calls.values()) == executed
    events = list(stream_durable(run_id, journal=journal, tools={"charge": charge.tool}, planner=asked))
    assert [e.kind for e in events] == ["end"] and events[0].result == first


# -- events ---------------------------------------------------------------------------------------


def test_stream_durable_yields_an_event_per_tool_call_and_a_final_end(journal: Journal, run_id: str) -> None:
    charge, ship = Counting(), Counting(fail=True)
    events = list(
        stream_durable(
            run_id,
            journal=journal,
            tools={"charge": charge.tool, "ship": ship.tool},
            planner=scripted(
                [ToolCall("charge", {"n": 1}), ToolCall("charge", {"n": 2})], ToolCall("ship", {})
            ),
        )
    )
    tool_events = [e for e in events if e.kind == "tool"]
    assert [(e.tool_call_id, e.tool, e.outcome) for e in tool_events] == [
        ("call-1", "charge", "executed"),
        ("call-2", "charge", "executed"),
        ("call-3", "ship", "failed"),
    ]
    assert tool_events[0].output == {"done": {"n": 1}} and tool_events[2].error is not None
    assert events[-1].kind == "end" and [e.kind for e in events].count("end") == 1
    assert events[-1].result is not None and events[-1].result.status == "failed"


def test_args_mode_identical_calls_after_a_failure_share_the_failure_and_execute_once(
    journal: Journal, run_id: str
) -> None:
    email = Counting(fail=True, idempotency="args")
    same = {"to": "ana@example.com"}
    events = list(
        stream_durable(
            run_id,
            journal=journal,
            tools={"email": email.tool},
            planner=scripted([ToolCall("email", same), ToolCall("email", same)]),
        )
    )
    assert sum(email.calls.values()) == 1
    assert [(e.outcome, e.error is not None) for e in events if e.kind == "tool"] == [("failed", True)] * 2
    [record] = journal.list_records(run_id)
    assert record.status is RecordStatus.FAILED and record.attempts == 1
    assert events[-1].result is not None and events[-1].result.status == "failed"


def test_a_continued_run_keeps_the_prompt_it_was_started_with(journal: Journal, run_id: str) -> None:
    prompts: list[str] = []

    def planner(state: RunState) -> Any:
        prompts.append(state.prompt)
        if state.step == 1 and len(prompts) == 2:
            raise Crash  # the first process dies before its second decision
        return [ToolCall("charge", {})] if state.step == 0 else Finish(text="ok")

    with pytest.raises(Crash):
        run_durable(
            run_id, journal=journal, tools={"charge": Counting().tool}, planner=planner, prompt="original"
        )
    run_durable(run_id, journal=journal, tools={"charge": Counting().tool}, planner=planner, prompt="other")
    assert prompts == ["original", "original", "original"]
    run = journal.get_run(run_id)
    assert run is not None and run.prompt == "original"


def test_a_tool_that_mutates_its_input_does_not_change_the_journaled_input(
    journal: Journal, run_id: str
) -> None:
    def execute(input: Any, opts: CallOptions) -> Any:
        input["card"] = "redacted"
        return {"ok": True}

    run_durable(
        run_id,
        journal=journal,
        tools={"charge": Tool(execute)},
        planner=scripted(ToolCall("charge", {"card": "4242"})),
    )
    record = journal.get_record(run_id, "call-1")
    assert record is not None and record.input == {"card": "4242"}


def test_the_planner_sees_an_output_as_journaled_so_a_replay_decides_alike(
    journal: Journal, run_id: str
) -> None:
    seen: list[Any] = []

    def planner(state: RunState) -> Any:
        seen.append([r.output for r in state.results])
        if state.step == 1 and len(seen) == 2:
            raise Crash
        return [ToolCall("lookup", {})] if state.step == 0 else Finish()

    tools = {"lookup": Tool(lambda i, o: {"ids": (1, 2), "m": {3: "x"}})}
    with pytest.raises(Crash):
        run_durable(run_id, journal=journal, tools=tools, planner=planner)
    run_durable(run_id, journal=journal, tools=tools, planner=planner)
    assert seen == [[], [{"ids": [1, 2], "m": {"3": "x"}}], [{"ids": [1, 2], "m": {"3": "x"}}]]
