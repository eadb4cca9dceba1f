"""A step whose tool is not among the unwinder's tools (a deploy without it) reads skipped-no-hook, says
why, and keeps its unwind out of complete: flagged for a person, re-driven when asked (issue 21, item 8).
In process and through the executor's chain (what the Celery tasks do), on every journal."""

from __future__ import annotations

from typing import Any

from saga_worker import CallOptions, Journal, Tool, ToolCall, compensate_run, run_durable, scripted
from saga_worker import executor as ex
from saga_worker.compensation.report import CompensationReport
from saga_worker.executor import Step
from saga_worker.journal.records import UnwindState

TTL = 5.0


class Provider:
    def __init__(self) -> None:
        self.undone: list[str] = []

    def tools(self) -> dict[str, Tool]:
        def make(name: str) -> Tool:
            def compensate(input: Any, output: Any, opts: CallOptions) -> None:
                self.undone.append(name)

            return Tool(lambda input, opts: {"ok": name}, compensate)

        return {name: make(name) for name in ("charge", "gift", "notify")}


def place(journal: Journal, provider: Provider, run_id: str) -> None:
    calls = [ToolCall("charge", {"a": 1}), ToolCall("gift", {"b": 2}), ToolCall("notify", {"c": 3})]
    assert run_durable(run_id, journal=journal, tools=provider.tools(), planner=scripted(*calls)).status == (
        "finished"
    )


def without_gift(provider: Provider) -> dict[str, Tool]:
    tools = provider.tools()
    del tools["gift"]
    return tools


def chain(journal: Journal, tools: dict[str, Tool], run_id: str, unwind_id: str) -> CompensationReport:
    nxt = ex.start_unwind(journal, run_id, unwind_id, dry_run=False, claim_ttl=TTL)
    while isinstance(nxt, Step):
        got = ex.run_step(journal, tools, nxt.run_id, nxt.unwind_id, nxt.suffix, claim_ttl=TTL)
        assert got is not None
        nxt = got
    return ex.finalize_unwind(journal, nxt.run_id, nxt.unwind_id)


def state(journal: Journal, run_id: str) -> tuple[UnwindState, str]:
    info = journal.get_run(run_id)
    assert info is not None
    return info.unwind_state, info.unwind_note or ""


def test_in_process_a_missing_tool_is_skipped_says_why_and_flags_the_unwind_for_a_person(
    journal: Journal, run_id: str
) -> None:
    provider = Provider()
    place(journal, provider, run_id)

    report = compensate_run(run_id, journal=journal, tools=without_gift(provider))

    assert [(e.tool_name, e.status.value, e.tool_missing) for e in report.entries] == [
        ("notify", "compensated", False),
        ("gift", "skipped-no-hook", True),
        ("charge", "compensated", False),
    ]
    assert report.entries[1].error == (
        "no tool named 'gift' in the tools given to compensate_run (it has: charge, notify); nothing was "
        "undone: the unwind is flagged for a person; deploy the tool, then re-drive the run"
    )
    assert not report.complete and report.missing_tools == [report.entries[1]]
    unwind, note = state(journal, run_id)
    assert unwind is UnwindState.ATTENTION and "call-2 (tool 'gift')" in note

    # The deploy is fixed; re-driving the run undoes the step it skipped, and only that one.
    again = compensate_run(run_id, journal=journal, tools=provider.tools())
    assert [e.status.value for e in again.entries] == [
        "already-compensated",
        "compensated",
        "already-compensated",
    ]
    assert again.complete and state(journal, run_id)[0] is UnwindState.COMPLETE
    assert provider.undone == ["notify", "charge", "gift"]


def test_a_tool_without_a_compensate_hook_still_completes_the_unwind(journal: Journal, run_id: str) -> None:
    provider = Provider()
    place(journal, provider, run_id)
    tools = provider.tools()
    tools["gift"] = Tool(lambda input, opts: None)  # deployed, and nothing to undo: the contract's skip

    report = compensate_run(run_id, journal=journal, tools=tools)

    assert [e.status.value for e in report.entries] == ["compensated", "skipped-no-hook", "compensated"]
    assert report.entries[1].error is None and not report.entries[1].tool_missing
    assert report.complete and state(journal, run_id)[0] is UnwindState.COMPLETE


def test_on_a_worker_a_missing_tool_names_the_workers_tools_and_flags_the_unwind_for_a_person(
    journal: Journal, run_id: str
) -> None:
    provider = Provider()
    place(journal, provider, run_id)

    report = chain(journal, without_gift(provider), run_id, f"{run_id}-u1")

    assert [e.status.value for e in report.entries] == ["compensated", "skipped-no-hook", "compensated"]
    assert report.entries[1].tool_missing
    assert "no tool named 'gift' in this worker's tools (it has: charge, notify)" in (
        report.entries[1].error or ""
    )
    assert not report.complete and state(journal, run_id)[0] is UnwindState.ATTENTION

    again = chain(journal, provider.tools(), run_id, f"{run_id}-u2")
    assert [e.status.value for e in again.entries] == [
        "already-compensated",
        "compensated",
        "already-compensated",
    ]
    assert state(journal, run_id)[0] is UnwindState.COMPLETE


def test_a_missing_tool_behind_a_failed_step_leaves_the_unwind_to_the_sweeper(
    journal: Journal, run_id: str
) -> None:
    provider = Provider()
    place(journal, provider, run_id)
    tools = without_gift(provider)

    def refuse(input: Any, output: Any, opts: CallOptions) -> None:
        raise RuntimeError("provider down")

    tools["charge"] = Tool(lambda input, opts: None, refuse)

    report = compensate_run(run_id, journal=journal, tools=tools)

    assert [e.status.value for e in report.entries] == ["compensated", "skipped-no-hook", "failed"]
    assert state(journal, run_id)[0] is UnwindState.INCOMPLETE  # a retry may help the failed step
