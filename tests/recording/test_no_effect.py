"""A tool that says its call had no effect (``NoEffect``): failed, nothing to undo, safe to execute
again (issue 21, item 2), on every journal."""

from __future__ import annotations

from typing import Any

import pytest

from saga_worker import (
    CompensationStatus,
    Journal,
    NoEffect,
    SideEffectRetryBlockedError,
    Tool,
    ToolFailedError,
    compensate_run,
    saga,
)
from saga_worker.journal.records import RecordStatus
from tests.reads import record_of


class Card:
    """A provider: declines the first ``declines`` charges (before charging anything), then charges."""

    def __init__(self, declines: int, *, say_no_effect: bool = True) -> None:
        self.declines = declines
        self.say_no_effect = say_no_effect
        self.charged: list[str] = []
        self.refunded: list[str] = []

    def charge(self, input: Any, opts: Any) -> dict[str, Any]:
        if self.declines > 0:
            self.declines -= 1
            raise (NoEffect if self.say_no_effect else RuntimeError)("card declined")
        self.charged.append(opts.idempotency_key)
        return {"charged": input["amount"]}

    def refund(self, input: Any, output: Any, opts: Any) -> None:
        self.refunded.append(opts.idempotency_key)

    def tools(self) -> dict[str, Tool]:
        return {"charge": Tool(self.charge, self.refund)}


def charge_once(journal: Journal, run_id: str, card: Card) -> Any:
    """One call in a block that leaves the run open (as an agent adapter's does), so it can come back."""
    failed: ToolFailedError | None = None
    with saga(run_id, journal=journal, tools=card.tools(), finish=False) as run:
        try:
            return run.call("charge", {"amount": 10})
        except ToolFailedError as exc:
            failed = exc
    raise failed


def test_a_call_whose_tool_says_no_effect_is_failed_and_its_unwind_refunds_nothing(
    journal: Journal, run_id: str
) -> None:
    card = Card(declines=1)
    with pytest.raises(ToolFailedError, match="card declined"):
        charge_once(journal, run_id, card)

    record = journal.get_record(run_id, "call-1")
    assert record is not None and record.status is RecordStatus.FAILED and record.had_no_effect
    assert record.error == "NoEffect: card declined"
    report = compensate_run(run_id, journal=journal, tools=card.tools())  # the tool has no recover hook
    assert [(e.status, e.error) for e in report.entries] == [
        (CompensationStatus.SKIPPED_NOT_EXECUTED, "the tool said the call had no effect (NoEffect)")
    ]
    assert card.refunded == []


def test_a_call_that_failed_otherwise_stays_uncertain_without_a_recover_hook(
    journal: Journal, run_id: str
) -> None:
    card = Card(declines=1, say_no_effect=False)
    with pytest.raises(ToolFailedError):
        charge_once(journal, run_id, card)

    assert not record_of(journal, run_id, "call-1").had_no_effect
    report = compensate_run(run_id, journal=journal, tools=card.tools())
    assert [e.status for e in report.entries] == [CompensationStatus.UNCERTAIN]


def test_a_no_effect_call_is_executed_again_with_the_same_key_when_the_run_is_entered_again(
    journal: Journal, run_id: str
) -> None:
    card = Card(declines=1)
    with pytest.raises(ToolFailedError):
        charge_once(journal, run_id, card)

    assert charge_once(journal, run_id, card) == {"charged": 10}  # no recover hook, not idempotent

    assert card.charged == [f"{run_id}:call-1"]
    record = journal.get_record(run_id, "call-1")
    assert record is not None and record.status is RecordStatus.SUCCEEDED and not record.had_no_effect
    report = compensate_run(run_id, journal=journal, tools=card.tools())
    assert [e.status for e in report.entries] == [CompensationStatus.COMPENSATED]
    assert card.refunded == [f"{run_id}:comp:call-1"]


def test_a_call_that_failed_otherwise_is_still_not_executed_again_without_recover(
    journal: Journal, run_id: str
) -> None:
    card = Card(declines=1, say_no_effect=False)
    with pytest.raises(ToolFailedError):
        charge_once(journal, run_id, card)

    with pytest.raises(SideEffectRetryBlockedError):
        charge_once(journal, run_id, card)
    assert card.charged == []
