"""Text and values the database cannot store (issue 10, item 3), on every journal.

A hook's error text may hold a NUL character (PostgreSQL's text refuses it) or a lone surrogate
(not UTF-8 at all: neither SQLite nor PostgreSQL take it). Such text is stored escaped, readably,
and says so; the step reads ``failed`` and its claim is released. Inputs and outputs that are not
storable JSON are refused at the boundary with an error naming the tool and the field."""

from __future__ import annotations

from typing import Any

import pytest

from saga_worker import (
    CallOptions,
    CompensationStatus,
    Finish,
    InvalidInputError,
    Journal,
    RecoverResult,
    Tool,
    ToolCall,
    ToolFailedError,
    compensate_run,
    run_durable,
    saga,
    scripted,
)
from saga_worker import executor as ex
from saga_worker.core.storable import ESCAPED_NOTE
from saga_worker.executor import Step
from saga_worker.journal.records import ClaimStatus, RecordStatus

S = CompensationStatus
# What the provider's exception says, and what the journal can hold of it.
UNSTORABLE = {
    "nul": ("refund refused: card \x00 blocked", "refund refused: card \\x00 blocked"),
    "lone-surrogate": ("refund refused: card \ud800 blocked", "refund refused: card \\ud800 blocked"),
}


class Flaky:
    """One tool whose hooks raise ``message`` while ``failing`` is set."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.failing = {"execute": False, "compensate": True, "recover": False}
        self.compensated: list[str] = []

    def tool(self, *, recover: bool = False) -> Tool:
        def execute(input: Any, opts: CallOptions) -> Any:
            if self.failing["execute"]:
                raise RuntimeError(self.message)
            return {"charged": input["amount"]}

        def compensate(input: Any, output: Any, opts: CallOptions) -> None:
            if self.failing["compensate"]:
                raise RuntimeError(self.message)
            self.compensated.append(opts.idempotency_key)

        def recover_hook(input: Any, opts: CallOptions) -> RecoverResult:
            if self.failing["recover"]:
                raise RuntimeError(self.message)
            return RecoverResult(done=True, output={"charged": input["amount"]})

        return Tool(execute, compensate, recover_hook if recover else None)


def charge_run(journal: Journal, run_id: str, tools: dict[str, Tool]) -> Any:
    return run_durable(
        run_id, journal=journal, tools=tools, planner=scripted(ToolCall("charge", {"amount": 10}))
    )


def assert_readable(error: str | None, expected: str) -> None:
    assert error is not None
    assert expected in error and ESCAPED_NOTE in error
    assert "\x00" not in error
    error.encode("utf-8")  # no lone surrogate left


@pytest.mark.parametrize("kind", list(UNSTORABLE))
def test_compensate_hook_raising_unstorable_text_reads_failed_readably_and_releases_its_claim(
    journal: Journal, run_id: str, kind: str
) -> None:
    message, readable = UNSTORABLE[kind]
    flaky = Flaky(message)
    tools = {"charge": flaky.tool()}
    charge_run(journal, run_id, tools)

    report = compensate_run(run_id, journal=journal, tools=tools)

    [entry] = report.entries
    assert entry.status is S.FAILED
    assert_readable(entry.error, readable)
    claim = journal.get_claim(run_id, "call-1")
    assert claim is not None and claim.status is ClaimStatus.FAILED
    assert_readable(claim.error, readable)
    # Released: the next unwind retries the step at once (not `busy`) and it is compensated.
    flaky.failing["compensate"] = False
    again = compensate_run(run_id, journal=journal, tools=tools)
    assert [e.status for e in again.entries] == [S.COMPENSATED]
    assert flaky.compensated == [f"{run_id}:comp:call-1"]


@pytest.mark.parametrize("kind", list(UNSTORABLE))
def test_execute_raising_unstorable_text_returns_a_failed_run_with_a_readable_error(
    journal: Journal, run_id: str, kind: str
) -> None:
    message, readable = UNSTORABLE[kind]
    flaky = Flaky(message)
    flaky.failing["execute"] = True

    result = charge_run(journal, run_id, {"charge": flaky.tool()})

    assert result.status == "failed"
    assert_readable(result.error, readable)
    record = journal.get_record(run_id, "call-1")
    assert record is not None and record.status is RecordStatus.FAILED
    assert_readable(record.error, readable)
    run = journal.get_run(run_id)
    assert run is not None
    assert_readable(run.error, readable)


@pytest.mark.parametrize("kind", list(UNSTORABLE))
def test_recover_raising_unstorable_text_reads_uncertain_with_a_readable_error(
    journal: Journal, run_id: str, kind: str
) -> None:
    message, readable = UNSTORABLE[kind]
    flaky = Flaky(message)
    flaky.failing.update(execute=True, recover=True)
    tools = {"charge": flaky.tool(recover=True)}
    charge_run(journal, run_id, tools)

    report = compensate_run(run_id, journal=journal, tools=tools)

    [entry] = report.entries
    assert entry.status is S.UNCERTAIN
    assert_readable(entry.error, readable)


@pytest.mark.parametrize("kind", list(UNSTORABLE))
def test_distributed_unwind_step_raising_unstorable_text_stores_its_entry_and_halts_with_a_report(
    journal: Journal, run_id: str, kind: str
) -> None:
    message, readable = UNSTORABLE[kind]
    flaky = Flaky(message)
    tools = {"charge": flaky.tool()}
    charge_run(journal, run_id, tools)

    nxt = ex.start_unwind(journal, run_id, f"u-{run_id}", dry_run=False, claim_ttl=5.0)
    assert isinstance(nxt, Step)
    done = ex.run_step(journal, tools, run_id, nxt.unwind_id, nxt.suffix, claim_ttl=5.0)
    assert done is not None
    report = ex.finalize_unwind(journal, run_id, nxt.unwind_id)

    [entry] = report.entries
    assert entry.status is S.FAILED
    assert_readable(entry.error, readable)
    assert_readable(journal.list_unwind_entries(nxt.unwind_id)[0]["error"], readable)
    claim = journal.get_claim(run_id, "call-1")
    assert claim is not None and claim.status is ClaimStatus.FAILED


@pytest.mark.parametrize("kind", list(UNSTORABLE))
def test_saga_block_whose_tool_raises_unstorable_text_ends_the_run_failed_readably(
    journal: Journal, run_id: str, kind: str
) -> None:
    message, readable = UNSTORABLE[kind]
    flaky = Flaky(message)
    flaky.failing["execute"] = True

    with pytest.raises(ToolFailedError), saga(run_id, journal=journal, tools={"charge": flaky.tool()}) as run:
        run.call("charge", {"amount": 10})

    record = journal.get_record(run_id, "call-1")
    assert record is not None and record.status is RecordStatus.FAILED
    assert_readable(record.error, readable)
    ended = journal.get_run(run_id)
    assert ended is not None
    assert_readable(ended.error, readable)


def test_planner_finishing_with_unstorable_error_text_ends_the_run_failed_readably(
    journal: Journal, run_id: str
) -> None:
    result = run_durable(
        run_id, journal=journal, tools={}, planner=lambda state: Finish(error="gave up \x00 \udc80")
    )
    assert result.status == "failed"
    assert_readable(result.error, "gave up \\x00 \\udc80")


def test_execute_output_holding_a_lone_surrogate_records_the_call_failed_naming_tool_and_output(
    journal: Journal, run_id: str
) -> None:
    tools = {"charge": Tool(lambda input, opts: {"receipt": "r-\ud801"}, lambda i, o, opts: None)}

    result = charge_run(journal, run_id, tools)

    assert result.status == "failed"
    record = journal.get_record(run_id, "call-1")
    assert record is not None and record.status is RecordStatus.FAILED
    assert record.error is not None
    assert "'charge'" in record.error and "output" in record.error and "$.receipt" in record.error
    assert "surrogate" in record.error


def test_input_holding_a_lone_surrogate_is_refused_naming_tool_and_input_and_nothing_is_written(
    journal: Journal, run_id: str
) -> None:
    tools = {"charge": Tool(lambda input, opts: None)}
    with pytest.raises(InvalidInputError) as refused:
        run_durable(
            run_id,
            journal=journal,
            tools=tools,
            planner=scripted(ToolCall("charge", {"note": ["ok", "bad \udfff"]})),
        )
    text = str(refused.value)
    assert "'charge'" in text and "input" in text and "$.note[1]" in text and "surrogate" in text
    assert journal.get_run(run_id) is None


def test_saga_block_call_with_an_unstorable_input_is_refused_naming_tool_and_input(
    journal: Journal, run_id: str
) -> None:
    tools = {"charge": Tool(lambda input, opts: None)}
    with pytest.raises(InvalidInputError) as refused, saga(run_id, journal=journal, tools=tools) as run:
        run.call("charge", {"bad \ud800 key": 1})
    assert "'charge'" in str(refused.value) and "input" in str(refused.value)
    assert journal.get_record(run_id, "call-1") is None


@pytest.mark.parametrize("prompt", ["order \x00 seven", "order \ud800 seven"])
def test_prompt_the_journal_cannot_store_is_refused_naming_the_prompt(
    journal: Journal, run_id: str, prompt: str
) -> None:
    with pytest.raises(InvalidInputError, match="prompt"):
        run_durable(run_id, journal=journal, tools={}, planner=scripted(), prompt=prompt)
    assert journal.get_run(run_id) is None


@pytest.mark.parametrize("field", ["actor", "reason"])
def test_unwind_audit_words_the_journal_cannot_store_are_refused_before_the_tombstone(
    journal: Journal, run_id: str, field: str
) -> None:
    tools = {"charge": Flaky("unused").tool()}
    charge_run(journal, run_id, tools)
    words = {"actor": "ops", "reason": "customer asked", field: "bad \x00 words"}
    with pytest.raises(InvalidInputError, match=field):
        compensate_run(run_id, journal=journal, tools=tools, actor=words["actor"], reason=words["reason"])
    run = journal.get_run(run_id)
    assert run is not None and not run.condemned
