"""``saga()``: tool calls recorded from ordinary code, no planner (docs/reference/integration.md), on every journal.

The tools apply their effects to a ledger whose effect key is UNIQUE (as a provider deduplicates on
the idempotency key) and whose raw call log shows any second execution.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from saga_worker import (
    CallOptions,
    CompensatedRunError,
    CompensationStatus,
    InvalidInputError,
    Journal,
    RecoverResult,
    Tool,
    ToolCall,
    ToolFailedError,
    UnknownToolError,
    compensate_run,
    fork_run,
    run_durable,
    saga,
    scripted,
    tool,
)
from saga_worker.journal.records import RecordStatus, RunStatus
from tests.leases import lapse_execute_lease
from tests.ledger import Ledger, order_script, order_tools
from tests.reads import record_of, run_of

ORDER = [(c.tool, c.input) for c in order_script()]


def _place(journal: Journal, run_id: str, tools: dict[str, Tool], calls: list[tuple[str, Any]]) -> list[Any]:
    with saga(run_id, journal=journal, tools=tools, prompt="place order") as run:
        return [run.call(name, input) for name, input in calls]


def _journal_view(journal: Journal, run_id: str) -> dict[str, Any]:
    run = journal.get_run(run_id)
    assert run is not None
    return {
        "run": (run.status, run.prompt, run.text, run.error),
        "decisions": journal.list_decisions(run_id),
        "records": [
            (r.suffix, r.step, r.tool_call_id, r.tool_name, r.status, r.input, r.output, r.error)
            for r in journal.list_records(run_id)
        ],
    }


class Crash(BaseException):
    """A process going down mid-block (not an Exception: the run is left as it was)."""


def test_a_block_journals_the_same_decisions_and_records_as_the_scripted_run_of_the_same_calls(
    journal: Journal, ledger: Ledger
) -> None:
    tools = order_tools(ledger)
    _place(journal, "by-block", tools, ORDER)
    run_durable(
        "by-script", journal=journal, tools=tools, planner=scripted(*order_script()), prompt="place order"
    )
    block, script = _journal_view(journal, "by-block"), _journal_view(journal, "by-script")
    # Outputs carry the key, which names the run: compare them with the run ids swapped.
    assert block["run"] == script["run"] == (RunStatus.FINISHED, "place order", "", None)
    assert block["decisions"] == script["decisions"]
    assert [r[:6] for r in block["records"]] == [r[:6] for r in script["records"]]
    assert [r[6] for r in block["records"]] == [r[6] for r in script["records"]]


def test_calls_return_their_outputs_and_each_side_effect_happens_once(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    outputs = _place(journal, run_id, order_tools(ledger), ORDER)
    assert outputs == [
        {"id": f"{name}-call-{n}", "input": input} for n, (name, input) in enumerate(ORDER, start=1)
    ]
    assert ledger.effect_counts("execute") == {f"{run_id}:call-{n}": 1 for n in (1, 2, 3)}


def test_re_entering_after_a_crash_replays_what_was_done_and_executes_only_the_rest(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    tools = order_tools(ledger)
    with pytest.raises(Crash), saga(run_id, journal=journal, tools=tools) as run:
        run.call("charge", {"amount": 10})
        raise Crash()
    assert run_of(journal, run_id).status is RunStatus.RUNNING
    with saga(run_id, journal=journal, tools=tools) as run:
        first = run.call("charge", {"amount": 10})
        run.call("reserve", {"sku": "A1"})
    assert first == {"id": "charge-call-1", "input": {"amount": 10}}
    assert ledger.call_counts("execute") == {f"{run_id}:call-1": 1, f"{run_id}:call-2": 1}
    assert run_of(journal, run_id).status is RunStatus.FINISHED


def test_explicit_ids_name_the_calls_and_key_them(journal: Journal, ledger: Ledger, run_id: str) -> None:
    with saga(run_id, journal=journal, tools=order_tools(ledger)) as run:
        run.call("charge", {"amount": 10}, id="charge")
        run.call("reserve", {"sku": "A1"})
    assert [r.tool_call_id for r in journal.list_records(run_id)] == ["charge", "call-2"]
    assert sorted(ledger.effect_counts("execute")) == [f"{run_id}:call-2", f"{run_id}:charge"]


def test_an_exception_in_the_block_marks_the_run_failed_propagates_and_compensates_nothing(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    with (
        pytest.raises(RuntimeError, match="out of stock"),
        saga(run_id, journal=journal, tools=order_tools(ledger)) as run,
    ):
        run.call("charge", {"amount": 10})
        raise RuntimeError("out of stock")
    info = journal.get_run(run_id)
    assert info is not None and info.status is RunStatus.FAILED and not info.condemned
    assert info.error == "RuntimeError: out of stock"
    assert journal.list_decisions(run_id)[-1] == {"kind": "finish", "text": "", "error": info.error}
    assert ledger.call_counts("compensate") == {}


def test_a_tool_that_raises_is_recorded_failed_and_ends_the_run_as_scripted_would(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    def declined(input: Any, opts: CallOptions) -> Any:
        raise ValueError("card declined")

    tools = {**order_tools(ledger), "charge": Tool(declined)}
    with pytest.raises(ToolFailedError) as caught, saga(run_id, journal=journal, tools=tools) as run:
        run.call("charge", {"amount": 10})
    assert caught.value.detail["tool_call_id"] == "call-1"
    run_durable(
        "scripted", journal=journal, tools=tools, planner=scripted(ToolCall("charge", {"amount": 10}))
    )
    assert run_of(journal, run_id).error == run_of(journal, "scripted").error
    assert record_of(journal, run_id, "call-1").status is RecordStatus.FAILED


def test_a_condemned_run_refuses_the_block_at_entry_and_writes_nothing(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    compensate_run(run_id, journal=journal)
    with pytest.raises(CompensatedRunError), saga(run_id, journal=journal, tools=order_tools(ledger)):
        pytest.fail("the block must not run")
    assert journal.list_decisions(run_id) == [] and journal.list_records(run_id) == []


def test_a_run_condemned_mid_block_refuses_its_next_side_effecting_call_and_stays_unended(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    tools = order_tools(ledger)
    with pytest.raises(CompensatedRunError), saga(run_id, journal=journal, tools=tools) as run:
        run.call("charge", {"amount": 10})
        report = compensate_run(run_id, journal=journal, tools=tools)
        run.call("reserve", {"sku": "A1"})
    assert [e.status for e in report.entries] == [CompensationStatus.COMPENSATED]
    assert [r.tool_name for r in journal.list_records(run_id)] == ["charge"]
    assert ledger.call_counts("execute:reserve") == {}
    info = journal.get_run(run_id)
    assert info is not None and info.condemned and info.status is RunStatus.RUNNING


def test_a_block_run_unwinds_in_reverse_and_a_fork_of_it_unwinds_with_the_origins_keys(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    tools = order_tools(ledger)
    _place(journal, run_id, tools, ORDER)
    fork = fork_run(journal, run_id, 2, f"{run_id}-fork")
    report = compensate_run(fork, journal=journal, tools=tools)
    assert [(e.tool_name, e.status) for e in report.entries] == [
        ("reserve", CompensationStatus.COMPENSATED),
        ("charge", CompensationStatus.COMPENSATED),
    ]
    assert sorted(ledger.effect_counts("compensate")) == [f"{run_id}:comp:call-1", f"{run_id}:comp:call-2"]
    again = compensate_run(run_id, journal=journal, tools=tools)
    assert [(e.tool_name, e.status) for e in again.entries] == [
        ("notify", CompensationStatus.COMPENSATED),
        ("reserve", CompensationStatus.ALREADY_COMPENSATED),
        ("charge", CompensationStatus.ALREADY_COMPENSATED),
    ]


def test_code_that_changed_under_its_journal_is_refused_with_the_call_named(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    tools = order_tools(ledger)
    with pytest.raises(Crash), saga(run_id, journal=journal, tools=tools) as run:
        run.call("charge", {"amount": 10})
        raise Crash()
    with (
        pytest.raises(InvalidInputError, match="call-1.*charge.*amount.*20"),
        saga(run_id, journal=journal, tools=tools) as run,
    ):
        run.call("charge", {"amount": 20})
    assert ledger.call_counts("execute") == {f"{run_id}:call-1": 1}
    assert run_of(journal, run_id).status is RunStatus.RUNNING


def test_an_ended_run_re_entered_replays_its_calls_and_executes_nothing_new(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    tools = order_tools(ledger)
    first = _place(journal, run_id, tools, ORDER[:2])
    assert _place(journal, run_id, tools, ORDER[:2]) == first
    with (
        pytest.raises(InvalidInputError, match="has ended"),
        saga(run_id, journal=journal, tools=tools) as run,
    ):
        run.call("charge", ORDER[0][1])
        run.call("reserve", ORDER[1][1])
        run.call("notify", ORDER[2][1])
    assert sum(ledger.call_counts("execute").values()) == 2


def test_an_interrupted_call_is_asked_to_recover_and_not_executed_when_done(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    def charge(input: Any, opts: CallOptions) -> Any:
        ledger.effect(opts.idempotency_key, "execute:charge")
        raise Crash()  # the effect happened; the process died before recording it

    def probe(input: Any, opts: CallOptions) -> RecoverResult:
        done = any(e.key == opts.idempotency_key for e in ledger.effects())
        return RecoverResult(done=done, output={"recovered": True})

    with (
        pytest.raises(Crash),
        saga(run_id, journal=journal, tools={"charge": Tool(charge, recover=probe)}) as run,
    ):
        run.call("charge", {"amount": 10})
    lapse_execute_lease(journal, run_id, "call-1")  # the dead process renews it no more
    healthy = Tool(lambda i, o: pytest.fail("must not execute again"), recover=probe)
    with saga(run_id, journal=journal, tools={"charge": healthy}) as run:
        assert run.call("charge", {"amount": 10}) == {"recovered": True}


def test_misuse_is_refused_before_anything_is_written(journal: Journal, ledger: Ledger, run_id: str) -> None:
    tools = order_tools(ledger)
    with pytest.raises(UnknownToolError), saga(run_id, journal=journal, tools=tools) as run:
        run.call("teleport", {})
    with pytest.raises(InvalidInputError, match="JSON"), saga(run_id, journal=journal, tools=tools) as run:
        run.call("charge", {"at": object()})
    with (
        pytest.raises(InvalidInputError, match="used twice"),
        saga(run_id, journal=journal, tools=tools) as run,
    ):
        run.call("charge", {"amount": 1}, id="c")
        run.call("reserve", {"sku": "A"}, id="c")
    assert [r.tool_call_id for r in journal.list_records(run_id)] == ["c"]
    with pytest.raises(InvalidInputError):
        saga("", journal=journal, tools=tools).__enter__()


def test_acall_records_from_async_code(journal: Journal, ledger: Ledger, run_id: str) -> None:
    async def place() -> Any:
        with saga(run_id, journal=journal, tools=order_tools(ledger)) as run:
            return await run.acall("charge", {"amount": 10})

    assert asyncio.run(place())["id"] == "charge-call-1"
    assert run_of(journal, run_id).status is RunStatus.FINISHED


# -- the decorator --------------------------------------------------------------------------------


def test_the_tool_decorator_makes_a_tool_whose_hooks_and_options_are_used(
    journal: Journal, ledger: Ledger, run_id: str
) -> None:
    def refund(input: Any, output: Any, opts: CallOptions) -> None:
        ledger.effect(opts.idempotency_key, "compensate:charge")

    @tool(compensate=refund, idempotency="args")
    def charge(input: Any, opts: CallOptions) -> Any:
        """Charge the customer's card."""
        ledger.effect(opts.idempotency_key, "execute:charge")
        return {"charged": input["amount"]}

    @tool
    def lookup(input: Any, opts: CallOptions) -> Any:
        return {"found": True}

    assert isinstance(charge, Tool) and isinstance(lookup, Tool)
    assert charge.description == "Charge the customer's card." and charge.idempotency == "args"
    assert charge.compensate is refund and lookup.compensate is None and lookup.description == ""
    with saga(run_id, journal=journal, tools={"charge": charge, "lookup": lookup}) as run:
        assert run.call("charge", {"amount": 5}) == {"charged": 5}
        run.call("lookup", {})
    report = compensate_run(run_id, journal=journal, tools={"charge": charge, "lookup": lookup})
    assert [(e.tool_name, e.status) for e in report.entries] == [
        ("lookup", CompensationStatus.SKIPPED_NO_HOOK),
        ("charge", CompensationStatus.COMPENSATED),
    ]
    assert list(ledger.effect_counts("compensate")) == [report.entries[1].idempotency_key]


def test_the_tool_decorator_refuses_a_bad_option() -> None:
    with pytest.raises(InvalidInputError):
        tool(idempotency="sometimes")(lambda i, o: None)
