"""docs/reference/compensation.md, rule by rule, on every journal (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel

from saga_worker import (
    CallOptions,
    CompensatedRunError,
    CompensationReport,
    CompensationStatus,
    Finish,
    Journal,
    MemoryJournal,
    RecoverResult,
    RunState,
    SqlJournal,
    Tool,
    ToolCall,
    compensate_run,
    run_compensated,
    run_durable,
    scripted,
)
from saga_worker.journal.records import ClaimStatus, RecordStatus
from saga_worker.journal.schema import records as records_table
from tests.reads import record_of

S = CompensationStatus
INPUTS = {
    "charge": {"amount": 10, "currency": "EUR"},
    "reserve": {"sku": "A1", "qty": 2},
    "notify": {"to": "c@example.com"},
}


class Crash(BaseException):
    """A process dying mid-execute: not an Exception, so the run engine records nothing after the claim."""


class Hooks:
    """Tools whose hooks write down every call, with switches to make them fail or answer oddly."""

    def __init__(self) -> None:
        self.compensated: list[tuple[str, Any, Any, CallOptions]] = []
        self.recovered: list[tuple[str, Any, CallOptions]] = []
        self.fail_compensate: dict[str, Exception] = {}
        self.execute_error: dict[str, BaseException] = {}
        self.recover_answer: dict[str, Callable[[], Any]] = {}
        self.on_compensate: Callable[[str], None] | None = None

    def tool(self, name: str, *, compensate: bool = True, recover: bool = False, **kw: Any) -> Tool:
        def execute(input: Any, opts: CallOptions) -> Any:
            if name in self.execute_error:
                raise self.execute_error[name]
            return {"id": f"{name}-1", "key": opts.idempotency_key}

        def undo(input: Any, output: Any, opts: CallOptions) -> None:
            self.compensated.append((name, input, output, opts))
            if self.on_compensate is not None:
                self.on_compensate(name)
            if name in self.fail_compensate:
                raise self.fail_compensate[name]

        def probe(input: Any, opts: CallOptions) -> Any:
            self.recovered.append((name, input, opts))
            return self.recover_answer[name]()

        return Tool(execute, undo if compensate else None, probe if recover else None, **kw)

    def tools(self, **recover: bool) -> dict[str, Tool]:
        return {name: self.tool(name, recover=recover.get(name, False)) for name in INPUTS}

    def names(self) -> list[str]:
        return [c[0] for c in self.compensated]


def order(*names: str) -> list[ToolCall]:
    return [ToolCall(n, INPUTS[n]) for n in (names or ("charge", "reserve", "notify"))]


def keep_going(*steps: ToolCall | list[ToolCall]) -> Callable[[RunState], Any]:
    """A planner that, unlike ``scripted``, carries on after a failed call (to leave a failed record mid-run)."""

    def plan(state: RunState) -> Any:
        return steps[state.step] if state.step < len(steps) else Finish("done")

    return plan


def statuses(report: CompensationReport) -> list[str]:
    return [e.status.value for e in report.entries]


def names(report: CompensationReport) -> list[str]:
    return [e.tool_name for e in report.entries]


def _rewrite_record(journal: Journal, run_id: str, suffix: str, **values: Any) -> None:
    if isinstance(journal, MemoryJournal):
        key = (run_id, suffix)
        journal._records[key] = replace(journal._records[key], **values)
        return
    assert isinstance(journal, SqlJournal), journal
    values = {k: v.value if isinstance(v, RecordStatus) else v for k, v in values.items()}
    with journal.engine.begin() as conn:
        conn.execute(
            sa.update(records_table)
            .where(records_table.c.run_id == run_id, records_table.c.suffix == suffix)
            .values(**values)
        )


def force_status(journal: Journal, run_id: str, suffix: str, status: RecordStatus) -> None:
    """Stand in for approvals (a later part of the contract), which make denied and suspended records."""
    _rewrite_record(journal, run_id, suffix, status=status)


def left_long_ago(journal: Journal, run_id: str, suffix: str) -> None:
    """Date a ``running`` record an hour back: its process died long ago, it is not executing right now
    (and so its execute lease lapsed long ago)."""
    _rewrite_record(
        journal,
        run_id,
        suffix,
        updated_at=journal.now() - 3600,
        created_at=journal.now() - 3600,
        exec_lease_expires_at=journal.now() - 3600,
    )


# -- the order scenario ---------------------------------------------------------------------------------


def test_order_unwinds_notify_reserve_charge_each_with_its_original_input_output_and_key(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = hooks.tools()
    assert run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order())).status == "finished"
    recorded = {r.tool_name: r for r in journal.list_records(run_id)}

    report = compensate_run(run_id, journal=journal, tools=tools)

    assert names(report) == ["notify", "reserve", "charge"]
    assert statuses(report) == ["compensated"] * 3
    assert hooks.names() == ["notify", "reserve", "charge"]
    for name, input, output, opts in hooks.compensated:
        call_id = recorded[name].tool_call_id
        assert input == INPUTS[name]
        assert output == recorded[name].output == {"id": f"{name}-1", "key": f"{run_id}:{call_id}"}
        assert opts == CallOptions(f"{run_id}:comp:{call_id}", call_id, run_id)
    assert [e.idempotency_key for e in report.entries] == [f"{run_id}:comp:call-{n}" for n in (3, 2, 1)]
    assert [(e.suffix, e.tool_call_id) for e in report.entries] == [
        (f"call-{n}", f"call-{n}") for n in (3, 2, 1)
    ]
    assert (report.run_id, report.dry_run, report.condemned) == (run_id, False, True)
    assert all(e.error is None for e in report.entries)


def test_args_mode_step_is_compensated_once_with_key_run_comp_args_tool_hash16(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    ship = hooks.tool("ship", idempotency="args")
    input = {"to": "Zoë", "items": [2, 1], "express": True}
    digest = hashlib.sha256(
        json.dumps(input, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()[:16]
    planner = scripted(ToolCall("ship", input), ToolCall("ship", dict(reversed(list(input.items())))))
    run_durable(run_id, journal=journal, tools={"ship": ship}, planner=planner)

    report = compensate_run(run_id, journal=journal, tools={"ship": ship})

    assert [(e.suffix, e.tool_call_id, e.status) for e in report.entries] == [
        (f"args-ship-{digest}", "call-1", S.COMPENSATED)
    ]
    assert [c[3].idempotency_key for c in hooks.compensated] == [f"{run_id}:comp:args-ship-{digest}"]
    assert report.entries[0].idempotency_key == f"{run_id}:comp:args-ship-{digest}"


def test_async_hooks_are_awaited_like_plain_ones(journal: Journal, run_id: str) -> None:
    undone: list[Any] = []

    async def execute(input: Any, opts: CallOptions) -> Any:
        return {"ok": input["n"]}

    async def compensate(input: Any, output: Any, opts: CallOptions) -> None:
        undone.append((output, opts.idempotency_key))

    tools = {"charge": Tool(execute, compensate)}
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(ToolCall("charge", {"n": 3})))
    assert statuses(compensate_run(run_id, journal=journal, tools=tools)) == ["compensated"]
    assert undone == [({"ok": 3}, f"{run_id}:comp:call-1")]


# -- the tombstone -----------------------------------------------------------------------------------------


def test_tombstone_is_committed_before_the_first_hook_runs(journal: Journal, run_id: str) -> None:
    hooks = Hooks()
    seen: list[bool] = []
    hooks.on_compensate = lambda name: seen.append(run_compensated(journal, run_id))
    tools = hooks.tools()
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order()))
    assert not run_compensated(journal, run_id)

    compensate_run(run_id, journal=journal, tools=tools)

    assert seen == [True, True, True]


def test_unknown_run_is_condemned_all_the_same_with_an_empty_report(journal: Journal, run_id: str) -> None:
    report = compensate_run(run_id, journal=journal, tools=Hooks().tools())

    assert (report.entries, report.condemned, report.dry_run) == ([], True, False)
    assert run_compensated(journal, run_id)
    with pytest.raises(CompensatedRunError):
        run_durable(run_id, journal=journal, tools=Hooks().tools(), planner=scripted(*order()))
    assert journal.list_records(run_id) == []


def test_run_with_nothing_to_undo_is_condemned_and_reports_no_step(journal: Journal, run_id: str) -> None:
    run_durable(run_id, journal=journal, tools={}, planner=scripted(final="nothing to do"))

    report = compensate_run(run_id, journal=journal, tools=None)

    assert (report.entries, report.condemned) == ([], True)
    assert run_compensated(journal, run_id)


def test_second_unwind_keeps_the_first_tombstone_and_redoes_nothing(journal: Journal, run_id: str) -> None:
    hooks = Hooks()
    tools = hooks.tools()
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order()))
    compensate_run(run_id, journal=journal, tools=tools)
    run = journal.get_run(run_id)
    assert run is not None and run.condemned_at is not None

    again = compensate_run(run_id, journal=journal, tools=tools)

    after = journal.get_run(run_id)
    assert after is not None and after.condemned_at == run.condemned_at
    assert statuses(again) == ["already-compensated"] * 3
    assert len(hooks.compensated) == 3
    assert journal.condemn(run_id) == run.condemned_at


# -- failure, halting and resuming ----------------------------------------------------------------------


def test_failed_hook_halts_unwind_and_a_fixed_hook_resumes_it_with_the_same_key(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = hooks.tools()
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order()))
    hooks.fail_compensate["reserve"] = RuntimeError("warehouse is down")

    first = compensate_run(run_id, journal=journal, tools=tools)

    assert statuses(first) == ["compensated", "failed", "not-attempted"]
    assert first.entries[1].error == "RuntimeError: warehouse is down"
    assert first.entries[2].error is None
    assert hooks.names() == ["notify", "reserve"]
    claim = journal.get_claim(run_id, "call-2")
    assert claim is not None and claim.status is ClaimStatus.FAILED
    assert journal.get_claim(run_id, "call-1") is None  # a step not attempted is not touched

    del hooks.fail_compensate["reserve"]
    second = compensate_run(run_id, journal=journal, tools=tools)

    assert statuses(second) == ["already-compensated", "compensated", "compensated"]
    assert hooks.names() == ["notify", "reserve", "reserve", "charge"]
    reserve_keys = [c[3].idempotency_key for c in hooks.compensated if c[0] == "reserve"]
    assert reserve_keys == [f"{run_id}:comp:call-2"] * 2
    assert second.entries[1].idempotency_key == first.entries[1].idempotency_key


def test_steps_after_a_halt_are_not_probed_and_done_steps_are_not_probed_again(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = hooks.tools(charge=True, notify=True)
    hooks.execute_error["charge"] = RuntimeError("card declined")  # charge: a failed record, unwound last
    run_durable(run_id, journal=journal, tools=tools, planner=keep_going(*order()))
    hooks.execute_error.clear()
    hooks.recover_answer["charge"] = lambda: RecoverResult(done=True, output={"id": "charge-late"})
    hooks.fail_compensate["reserve"] = RuntimeError("warehouse is down")

    first = compensate_run(run_id, journal=journal, tools=tools)

    assert statuses(first) == ["compensated", "failed", "not-attempted"]
    assert hooks.recovered == []

    del hooks.fail_compensate["reserve"]
    second = compensate_run(run_id, journal=journal, tools=tools)

    assert statuses(second) == ["already-compensated", "compensated", "compensated"]
    assert [r[0] for r in hooks.recovered] == ["charge"]  # notify (done) was not probed, charge was, once
    assert hooks.compensated[-1][:3] == ("charge", INPUTS["charge"], {"id": "charge-late"})


# -- failed and running records: what happened? --------------------------------------------------------

RECOVER_CASES = {
    "no-recover": (None, S.UNCERTAIN, "no recover hook"),
    "recover-raises": (
        lambda: (_ for _ in ()).throw(ValueError("probe timed out")),
        S.UNCERTAIN,
        "recover raised ValueError: probe timed out",
    ),
    "recover-answers-bool": (lambda: True, S.UNCERTAIN, "recover answered bool, not a RecoverResult"),
    "not-done": (lambda: RecoverResult(done=False), S.SKIPPED_NOT_EXECUTED, None),
    "done": (lambda: RecoverResult(done=True, output={"id": "reserve-recovered"}), S.COMPENSATED, None),
}


@pytest.mark.parametrize("record_status", ["failed", "running"])
@pytest.mark.parametrize("case", list(RECOVER_CASES))
def test_failed_or_running_record_asks_recover_and_never_stops_the_unwind(
    journal: Journal, run_id: str, case: str, record_status: str
) -> None:
    answer, expected, error = RECOVER_CASES[case]
    hooks = Hooks()
    tools = hooks.tools(reserve=answer is not None)
    if answer is not None:
        hooks.recover_answer["reserve"] = answer
    if record_status == "failed":
        hooks.execute_error["reserve"] = RuntimeError("stock service 503")
        run_durable(run_id, journal=journal, tools=tools, planner=keep_going(*order()))
        expected_names = ["notify", "reserve", "charge"]
    else:
        hooks.execute_error["reserve"] = Crash()  # the process dies mid-execute: reserve stays running
        with pytest.raises(Crash):
            run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order()))
        left_long_ago(journal, run_id, "call-2")
        expected_names = ["reserve", "charge"]
    assert record_of(journal, run_id, "call-2").status.value == record_status

    report = compensate_run(run_id, journal=journal, tools=tools)

    assert names(report) == expected_names
    entry = report.entries[expected_names.index("reserve")]
    assert entry.status is expected
    assert entry.record_status == record_status
    if error is None:
        assert entry.error is None
    else:
        assert entry.error is not None and error in entry.error
    assert report.entries[-1].status is S.COMPENSATED  # charge, after reserve: the unwind went on
    reserve_calls = [c for c in hooks.compensated if c[0] == "reserve"]
    if expected is S.COMPENSATED:
        assert [c[2] for c in reserve_calls] == [{"id": "reserve-recovered"}]
        assert [c[3].idempotency_key for c in reserve_calls] == [f"{run_id}:comp:call-2"]
    else:
        assert reserve_calls == []
    if answer is not None:  # recover was asked with the execute key, once
        assert [(r[0], r[1], r[2].idempotency_key) for r in hooks.recovered] == [
            ("reserve", INPUTS["reserve"], f"{run_id}:call-2")
        ]


# -- no hook ------------------------------------------------------------------------------------------------


def test_tool_without_compensate_hook_is_skipped_and_the_unwind_goes_on(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = hooks.tools()
    tools["reserve"] = hooks.tool("reserve", compensate=False)
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order()))

    report = compensate_run(run_id, journal=journal, tools=tools)

    assert statuses(report) == ["compensated", "skipped-no-hook", "compensated"]
    assert hooks.names() == ["notify", "charge"]


def test_tool_missing_from_tools_counts_as_a_tool_without_hooks(journal: Journal, run_id: str) -> None:
    hooks = Hooks()
    tools = hooks.tools()
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order()))
    del tools["reserve"]

    report = compensate_run(run_id, journal=journal, tools=tools)

    assert statuses(report) == ["compensated", "skipped-no-hook", "compensated"]


def test_failed_call_of_a_tool_missing_from_tools_is_uncertain_and_says_why(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = hooks.tools()
    hooks.execute_error["reserve"] = RuntimeError("stock service 503")
    run_durable(run_id, journal=journal, tools=tools, planner=keep_going(*order()))
    del tools["reserve"]

    report = compensate_run(run_id, journal=journal, tools=tools)

    assert statuses(report) == ["compensated", "uncertain", "compensated"]
    assert report.entries[1].error == (
        "call is failed and tool 'reserve' is not in tools: cannot tell whether its side effect happened"
    )


def test_no_tools_at_all_skips_every_step_without_raising(journal: Journal, run_id: str) -> None:
    hooks = Hooks()
    run_durable(run_id, journal=journal, tools=hooks.tools(), planner=scripted(*order()))

    report = compensate_run(run_id, journal=journal, tools=None)

    assert statuses(report) == ["skipped-no-hook"] * 3
    assert report.condemned and hooks.compensated == []
    assert statuses(compensate_run(run_id, journal=journal, tools={})) == ["skipped-no-hook"] * 3


# -- dry run ----------------------------------------------------------------------------------------------


def test_dry_run_plans_without_writing_or_calling_compensate_but_asks_recover(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = hooks.tools(reserve=True)
    hooks.execute_error["reserve"] = RuntimeError("stock service 503")
    run_durable(run_id, journal=journal, tools=tools, planner=keep_going(*order()))
    hooks.recover_answer["reserve"] = lambda: RecoverResult(done=True, output={"id": "late"})
    before = journal.get_run(run_id)

    plan = compensate_run(run_id, journal=journal, tools=tools, dry_run=True)

    assert statuses(plan) == ["would-compensate"] * 3
    assert (plan.dry_run, plan.condemned) == (True, False)
    assert hooks.compensated == []
    assert [r[0] for r in hooks.recovered] == ["reserve"]
    assert journal.get_run(run_id) == before
    assert not run_compensated(journal, run_id)
    assert all(journal.get_claim(run_id, f"call-{n}") is None for n in (1, 2, 3))


def test_dry_run_does_not_stop_where_a_real_unwind_would_be_busy(journal: Journal, run_id: str) -> None:
    hooks = Hooks()
    tools = hooks.tools()
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order()))
    journal.claim_compensation(
        run_id,
        "call-3",
        via_run_id=run_id,
        owner="elsewhere",
        ttl=600,
        idempotency_key=f"{run_id}:comp:call-3",
    )

    plan = compensate_run(run_id, journal=journal, tools=tools, dry_run=True)

    assert statuses(plan) == ["would-compensate"] * 3


def test_dry_run_of_an_unknown_run_writes_no_tombstone(journal: Journal, run_id: str) -> None:
    plan = compensate_run(run_id, journal=journal, tools=None, dry_run=True)

    assert (plan.entries, plan.condemned) == ([], False)
    assert journal.get_run(run_id) is None


def test_dry_run_after_a_partial_unwind_reads_done_steps_as_already_compensated(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = hooks.tools(notify=True)
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order()))
    hooks.fail_compensate["reserve"] = RuntimeError("warehouse is down")
    compensate_run(run_id, journal=journal, tools=tools)
    calls = len(hooks.compensated)

    plan = compensate_run(run_id, journal=journal, tools=tools, dry_run=True)

    assert statuses(plan) == ["already-compensated", "would-compensate", "would-compensate"]
    assert len(hooks.compensated) == calls and hooks.recovered == []
    assert plan.condemned  # condemned by the earlier, real unwind


# -- busy ---------------------------------------------------------------------------------------------------


def test_step_claimed_by_a_live_unwinder_reads_busy_stops_the_unwind_and_is_left_untouched(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = hooks.tools()
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order()))
    taken = journal.claim_compensation(
        run_id,
        "call-2",
        via_run_id=run_id,
        owner="other-host:42:abc",
        ttl=600,
        idempotency_key=f"{run_id}:comp:call-2",
    )
    assert taken.acquired

    report = compensate_run(run_id, journal=journal, tools=tools)

    assert statuses(report) == ["compensated", "busy", "not-attempted"]
    assert report.entries[1].error is not None and "other-host:42:abc" in report.entries[1].error
    assert hooks.names() == ["notify"]
    assert journal.get_claim(run_id, "call-2") == taken.claim
    assert journal.get_claim(run_id, "call-1") is None

    assert journal.finish_claim(run_id, "call-2", "other-host:42:abc", ClaimStatus.COMPENSATED)
    after = compensate_run(run_id, journal=journal, tools=tools)

    assert statuses(after) == ["already-compensated", "already-compensated", "compensated"]
    assert hooks.names() == ["notify", "charge"]


# -- what is in the unwind ----------------------------------------------------------------------------------


def test_denied_suspended_and_never_started_calls_are_not_in_the_report(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = {**hooks.tools(), "ship": hooks.tool("ship"), "refund": hooks.tool("refund")}
    hooks.execute_error["ship"] = Crash()
    step = [
        ToolCall("charge", {}),
        ToolCall("reserve", {}),
        ToolCall("notify", {}),
        ToolCall("ship", {}),
        ToolCall("refund", {}),
    ]
    with pytest.raises(Crash):
        run_durable(run_id, journal=journal, tools=tools, planner=scripted(step))
    force_status(journal, run_id, "call-2", RecordStatus.DENIED)
    force_status(journal, run_id, "call-3", RecordStatus.SUSPENDED)
    assert journal.get_record(run_id, "call-5") is None  # refund never started

    report = compensate_run(run_id, journal=journal, tools=tools)

    assert [(e.tool_name, e.status) for e in report.entries] == [
        ("ship", S.UNCERTAIN),
        ("charge", S.COMPENSATED),
    ]
    assert hooks.names() == ["charge"]


# -- the report ---------------------------------------------------------------------------------------------


def test_report_is_a_pydantic_model_that_dumps_the_json_of_the_contract(
    journal: Journal, run_id: str
) -> None:
    hooks = Hooks()
    tools = hooks.tools()
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*order()))
    hooks.fail_compensate["reserve"] = RuntimeError("warehouse is down")

    report = compensate_run(run_id, journal=journal, tools=tools)
    dumped = report.model_dump(mode="json")

    assert isinstance(report, BaseModel)
    assert {k: dumped[k] for k in ("run_id", "dry_run", "condemned")} == {
        "run_id": run_id,
        "dry_run": False,
        "condemned": True,
    }
    assert [
        {k: e[k] for k in ("suffix", "tool_call_id", "tool_name", "status", "error")}
        for e in dumped["entries"]
    ] == [
        {
            "suffix": "call-3",
            "tool_call_id": "call-3",
            "tool_name": "notify",
            "status": "compensated",
            "error": None,
        },
        {
            "suffix": "call-2",
            "tool_call_id": "call-2",
            "tool_name": "reserve",
            "status": "failed",
            "error": "RuntimeError: warehouse is down",
        },
        {
            "suffix": "call-1",
            "tool_call_id": "call-1",
            "tool_name": "charge",
            "status": "not-attempted",
            "error": None,
        },
    ]
    assert all(type(e["status"]) is str for e in dumped["entries"])
    assert json.loads(json.dumps(dumped)) == dumped
    assert CompensationReport.model_validate(dumped) == report
