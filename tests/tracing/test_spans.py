"""Spans of runs, calls, unwinds and steps, exported by the SDK's in-memory exporter, on every journal
(docs/guides/tracing.md); each compensate span links to the execute span of the effect it undoes, also
when that run was recorded by another process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from saga_worker import (
    CallOptions,
    Journal,
    RecoverResult,
    Tool,
    ToolCall,
    compensate_run,
    open_journal,
    run_durable,
    saga,
    scripted,
)
from saga_worker.settings import get_settings

from .conftest import Spans
from .order import INPUTS, order_tools, record_order
from .spans import Seen, read_dir

REPO = Path(__file__).resolve().parents[2]


def _hex(trace_id: int, span_id: int) -> str:
    return f"{trace_id:032x}-{span_id:016x}"


def test_an_unwind_has_a_span_per_step_with_its_status_and_a_link_to_the_execute_it_undoes(
    journal: Journal, spans: Spans, run_id: str
) -> None:
    record_order(journal, run_id)
    executes = {s.attributes["gen_ai.tool.name"]: s for s in spans.named("execute_tool ")}
    assert sorted(executes) == ["charge", "notify", "reserve"]
    run_span = spans.one("saga.run")
    assert all(s.parent_id == run_span.span_id and s.trace_id == run_span.trace_id for s in executes.values())
    assert executes["charge"].attributes["gen_ai.operation.name"] == "execute_tool"
    assert executes["charge"].attributes["saga.call.key"] == f"{run_id}:call-1"
    assert executes["charge"].attributes["saga.call.outcome"] == "executed"
    spans.clear()

    report = compensate_run(run_id, journal=journal, tools=order_tools(fail=("charge",)), actor="ops-ada")

    assert [(e.tool_name, e.status.value) for e in report.entries] == [
        ("notify", "skipped-no-hook"),
        ("reserve", "compensated"),
        ("charge", "failed"),
    ]
    unwind = spans.one("saga.unwind")
    assert unwind.attributes["saga.run.id"] == run_id
    assert unwind.attributes["saga.unwind.actor"] == "ops-ada"
    assert unwind.attributes["saga.unwind.via"] == "library"
    assert unwind.attributes["saga.unwind.count.compensated"] == 1
    assert unwind.attributes["saga.unwind.count.failed"] == 1
    assert unwind.attributes["saga.unwind.count.skipped-no-hook"] == 1
    assert unwind.attributes["saga.unwind.halted_at"] == "call-1"
    assert unwind.status == "ERROR"
    steps = {s.attributes["gen_ai.tool.name"]: s for s in spans.named("saga.compensate ")}
    assert {name: s.attributes["saga.compensation.status"] for name, s in steps.items()} == {
        "notify": "skipped-no-hook",
        "reserve": "compensated",
        "charge": "failed",
    }
    assert all(s.parent_id == unwind.span_id for s in steps.values())
    assert steps["reserve"].status == "UNSET" and steps["notify"].status == "UNSET"
    assert steps["charge"].status == "ERROR"
    assert "the provider refused the compensation" in (steps["charge"].description or "")
    assert steps["charge"].attributes["error.type"] == "RuntimeError"
    assert steps["charge"].attributes["saga.compensation.key"] == f"{run_id}:comp:call-1"
    assert steps["charge"].attributes["saga.compensation.attempts"] == 1
    for name, step in steps.items():
        ((trace_id, span_id, attrs),) = step.links
        assert (trace_id, span_id) == executes[name].ids, name
        assert attrs == {"saga.link.type": "compensates"}
        assert trace_id != step.trace_id  # the run's trace, not the unwind's


def test_a_recover_probe_has_its_span_inside_the_step_that_asked(
    journal: Journal, spans: Spans, run_id: str
) -> None:
    def refuse(input: object, opts: CallOptions) -> object:
        raise RuntimeError("gateway timeout")

    tools = {
        "charge": Tool(refuse, lambda i, o, opts: None, recover=lambda i, opts: RecoverResult(done=True))
    }
    result = run_durable(run_id, journal=journal, tools=tools, planner=scripted(ToolCall("charge", {})))
    assert result.status == "failed"
    (execute,) = spans.named("execute_tool charge")
    assert execute.status == "ERROR" and execute.attributes["error.type"] == "RuntimeError"
    assert execute.attributes["saga.call.outcome"] == "failed"
    spans.clear()

    compensate_run(run_id, journal=journal, tools=tools)

    step = spans.one("saga.compensate charge")
    probe = spans.one("saga.recover charge")
    assert probe.parent_id == step.span_id
    assert probe.attributes["saga.recover.done"] is True
    assert probe.attributes["saga.call.key"] == f"{run_id}:call-1"
    assert step.attributes["saga.compensation.status"] == "compensated"
    assert step.attributes["saga.call.record_status"] == "failed"
    assert [link[:2] for link in step.links] == [execute.ids]  # a failed call's execute is linked too


def test_no_input_output_or_secret_is_in_any_attribute_unless_values_are_opted_in(
    journal: Journal, spans: Spans, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_order(journal, run_id)
    compensate_run(run_id, journal=journal, tools=order_tools())
    shown = repr([(s.attributes, s.description) for s in spans.all()])
    for secret in ("4242424242424242", "hunter2", "ada@example.com", "r-secret-99", "sku-7"):
        assert secret not in shown

    monkeypatch.setenv("SAGA_TRACE_VALUES", "true")
    get_settings.cache_clear()
    try:
        spans.clear()
        record_order(journal, f"{run_id}-2")
    finally:
        monkeypatch.delenv("SAGA_TRACE_VALUES")
        get_settings.cache_clear()
    charge = spans.one("execute_tool charge")
    arguments = str(charge.attributes["gen_ai.tool.call.arguments"])
    assert "4242424242424242" in arguments and "hunter2" not in arguments and '"password":"***"' in arguments
    assert "r-secret-99" in str(charge.attributes["gen_ai.tool.call.result"])


def test_a_run_recorded_by_another_process_is_linked_from_each_compensate_span(
    shared_journal_url: str, spans: Spans, run_id: str, tmp_path: Path
) -> None:
    folder = tmp_path / "spans"
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(
        [sys.executable, "-m", "tests.tracing.order", shared_journal_url, run_id, str(folder)],
        cwd=REPO,
        env=env,
        check=True,
        timeout=120,
    )
    recorded = read_dir(folder)
    executes = {s.attributes["gen_ai.tool.name"]: s for s in recorded if s.name.startswith("execute_tool ")}
    assert {s.service for s in recorded} == {"the-recording-process"}
    assert len(executes) == 3

    journal = open_journal(shared_journal_url)
    try:
        report = compensate_run(run_id, journal=journal, tools=order_tools())
    finally:
        journal.close()

    assert report.complete
    steps = spans.named("saga.compensate ")
    assert len(steps) == 3
    for step in steps:
        ((trace_id, span_id, _),) = step.links
        target = executes[str(step.attributes["gen_ai.tool.name"])]
        assert (trace_id, span_id) == target.ids  # resolves to the other process's exported span
        assert step.service == "saga-tests" and target.service == "the-recording-process"


def test_the_journal_keeps_each_calls_trace_context_and_the_runs(
    journal: Journal, spans: Spans, run_id: str
) -> None:
    record_order(journal, run_id)
    run_span = spans.one("saga.run")
    executes = {s.attributes["gen_ai.tool.call.id"]: s for s in spans.named("execute_tool ")}
    run = journal.get_run(run_id)
    assert run is not None and run.traceparent is not None
    assert run.traceparent.split("-")[1:3] == _hex(*run_span.ids).split("-")
    for record in journal.list_records(run_id):
        assert record.exec_traceparent is not None
        assert record.exec_traceparent.split("-")[1:3] == _hex(*executes[record.tool_call_id].ids).split("-")


def test_each_saga_block_of_one_run_links_to_the_span_that_started_the_run(
    journal: Journal, spans: Spans, run_id: str
) -> None:
    tools = order_tools()
    with saga(run_id, journal=journal, tools=tools, finish=False) as run:
        run.call("charge", INPUTS["charge"], id="charge")
    first = spans.one("saga.run")
    assert first.links == [] and first.attributes["saga.run.entry"] == "saga"
    spans.clear()
    with saga(run_id, journal=journal, tools=tools) as run:  # a forward task of its own, later
        run.call("reserve", INPUTS["reserve"], id="reserve")
    second = spans.one("saga.run")
    assert [(t, s, a) for t, s, a in second.links] == [(*first.ids, {"saga.link.type": "continues"})]
    reserve = spans.one("execute_tool reserve")
    assert reserve.parent_id == second.span_id


def test_a_resumed_run_links_to_the_span_that_started_it(journal: Journal, spans: Spans, run_id: str) -> None:
    from saga_worker import resume_run

    gate = Tool(lambda i, o: "ok", needs_approval=True)
    tools = {**order_tools(), "gate": gate}
    first = run_durable(run_id, journal=journal, tools=tools, planner=scripted(ToolCall("gate", {})))
    assert first.status == "suspended"
    started = spans.one("saga.run")
    from saga_worker import approve

    approve(journal, run_id, "call-1", actor="ada")
    spans.clear()
    resume_run(run_id, journal=journal, tools=tools, planner=scripted(ToolCall("gate", {})))
    resumed = spans.one("saga.run")
    assert resumed.attributes["saga.run.entry"] == "resume"
    assert [link[:2] for link in resumed.links] == [started.ids]
    assert spans.one("execute_tool gate").parent_id == resumed.span_id


def _by_name(spans: list[Seen]) -> dict[str, Seen]:
    return {s.name: s for s in spans}


def test_a_cross_run_call_has_its_execute_span_once_and_the_run_sharing_it_none(
    journal: Journal, spans: Spans, run_id: str
) -> None:
    quote = {"quote": Tool(lambda i, o: {"price": 7}, idempotency="cross-run", window_s=60)}
    for run in (run_id, f"{run_id}-b"):
        run_durable(run, journal=journal, tools=quote, planner=scripted(ToolCall("quote", {"sku": 1})))
    (execute,) = spans.named("execute_tool quote")
    assert execute.attributes["saga.run.id"] == run_id
    assert execute.attributes["saga.call.key"].startswith("quote:")
    assert execute.attributes["saga.call.outcome"] == "executed"
    assert len(spans.named("saga.run")) == 2
