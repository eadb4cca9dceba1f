"""The in-process unwind's first claim, taken in the tombstone's commit
(``Journal.condemn_read_and_claim``): the step's hook runs under it once, and a commit whose answer
was lost (the claim taken, the caller never told) costs no step: its owner takes its claim back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from saga_worker import (
    CallOptions,
    Journal,
    Tool,
    ToolCall,
    compensate_run,
    open_journal,
    run_durable,
    scripted,
)
from saga_worker.journal.records import ClaimStatus

STEPS = 3


@pytest.fixture
def sqlite_journal(sqlite_url: str) -> Iterator[Journal]:
    journal = open_journal(sqlite_url, migrate=True)
    yield journal
    journal.close()


def _tools(keys: list[str]) -> dict[str, Tool]:
    def undo(_input: Any, _output: Any, options: CallOptions) -> None:
        keys.append(options.idempotency_key)

    return {f"t{i}": Tool(execute=lambda *_: {"ok": True}, compensate=undo) for i in range(STEPS)}


def _recorded(journal: Journal, run_id: str, tools: dict[str, Tool]) -> None:
    calls = [ToolCall(f"t{i}", {"i": i}) for i in range(STEPS)]
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*calls), max_steps=STEPS + 1)


def test_the_first_step_runs_once_under_the_claim_taken_with_the_tombstone(
    sqlite_journal: Journal, run_id: str
) -> None:
    keys: list[str] = []
    tools = _tools(keys)
    _recorded(sqlite_journal, run_id, tools)

    report = compensate_run(run_id, journal=sqlite_journal, tools=tools)

    assert report.complete and [e.status.value for e in report.entries] == ["compensated"] * STEPS
    assert keys == [f"{run_id}:comp:call-{i}" for i in range(STEPS, 0, -1)]
    first = sqlite_journal.get_claim(run_id, f"call-{STEPS}")
    assert first is not None and (first.status, first.attempts) == (ClaimStatus.COMPENSATED, 1)


def test_a_first_claim_whose_answer_was_lost_is_taken_back_not_read_busy(
    sqlite_journal: Journal, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys: list[str] = []
    tools = _tools(keys)
    _recorded(sqlite_journal, run_id, tools)
    real = sqlite_journal.condemn_read_and_claim

    def answer_lost(*args: Any, **kwargs: Any) -> Any:
        view, got = real(*args, **kwargs)
        assert got is not None and got.acquired  # committed, but the caller is not told
        return view, None

    monkeypatch.setattr(sqlite_journal, "condemn_read_and_claim", answer_lost)

    report = compensate_run(run_id, journal=sqlite_journal, tools=tools)

    assert report.complete and [e.status.value for e in report.entries] == ["compensated"] * STEPS
    assert keys == [f"{run_id}:comp:call-{i}" for i in range(STEPS, 0, -1)]  # each hook once
    first = sqlite_journal.get_claim(run_id, f"call-{STEPS}")
    assert first is not None and (first.status, first.attempts) == (ClaimStatus.COMPENSATED, 2)
