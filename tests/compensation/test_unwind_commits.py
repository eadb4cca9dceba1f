"""What an in-process unwind asks of the journal, counted (issue 26), and the order the contract needs
(docs/reference/compensation.md): the tombstone durable and visible to every other process before the
first compensate hook, each step's claim before its hook, its outcome after."""

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
from saga_worker.journal import driver
from saga_worker.journal.records import ClaimStatus

STEPS = 5


def _record(journal: Journal, run_id: str, tools: dict[str, Tool]) -> None:
    calls = [ToolCall(f"t{i}", {"i": i}) for i in range(STEPS)]
    run_durable(run_id, journal=journal, tools=tools, planner=scripted(*calls), max_steps=STEPS + 1)


def _noop(*_args: object) -> dict[str, bool]:
    return {"ok": True}


@pytest.fixture
def sqlite_journal(sqlite_url: str) -> Iterator[Journal]:
    journal = open_journal(sqlite_url, migrate=True)
    yield journal
    journal.close()


def test_sqlite_unwind_of_n_steps_commits_n_plus_1_times_and_syncs_once(
    sqlite_journal: Journal, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tombstone with the first claim, each later claim with the outcome before it, the last
    # outcome with the unwind state: n+1 commits. The worklist is read inside the tombstone's
    # transaction (a SQLite transaction costs no round trip), and only that commit is synced.
    tools = {f"t{i}": Tool(execute=_noop, compensate=_noop) for i in range(STEPS)}
    _record(sqlite_journal, run_id, tools)
    commits: list[bool] = []
    real = driver.transaction

    def counted(*args: Any, **kwargs: Any) -> Any:
        commits.append(bool(kwargs.get("durable")))
        return real(*args, **kwargs)

    monkeypatch.setattr(driver, "transaction", counted)
    report = compensate_run(run_id, journal=sqlite_journal, tools=tools)

    assert report.complete and len(report.entries) == STEPS
    assert len(commits) == STEPS + 1
    assert commits.count(True) == 1


def test_postgres_unwind_of_n_steps_commits_n_plus_1_times(
    pg_url: str, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tombstone's pipeline with the first claim in the stamp's statement, one statement per later
    # step (its claim with the outcome before it), the last outcome with the unwind state.
    journal = open_journal(pg_url, migrate=True)
    try:
        tools = {f"t{i}": Tool(execute=_noop, compensate=_noop) for i in range(STEPS)}
        _record(journal, run_id, tools)
        commits: list[bool] = []
        real = driver.transaction

        def counted(*args: Any, **kwargs: Any) -> Any:
            commits.append(bool(kwargs.get("write")))
            return real(*args, **kwargs)

        monkeypatch.setattr(driver, "transaction", counted)
        report = compensate_run(run_id, journal=journal, tools=tools)
    finally:
        journal.close()

    assert report.complete and len(report.entries) == STEPS
    assert commits == [True] * (STEPS + 1)


def test_every_hook_finds_the_tombstone_and_its_own_claim_committed_for_other_processes(
    shared_journal_url: str, run_id: str
) -> None:
    journal = open_journal(shared_journal_url, migrate=True)
    other = open_journal(shared_journal_url)  # its own connections, as another process would have
    seen: list[tuple[bool, ClaimStatus | None, list[ClaimStatus | None]]] = []

    def compensate(input: Any, _output: Any, options: CallOptions) -> None:
        run = other.get_run(run_id)
        mine = other.get_claim(run_id, f"call-{input['i'] + 1}")
        done = [
            c.status if (c := other.get_claim(run_id, f"call-{j + 1}")) else None
            for j in range(input["i"] + 1, STEPS)
        ]
        seen.append((run is not None and run.condemned, None if mine is None else mine.status, done))

    tools = {f"t{i}": Tool(execute=_noop, compensate=compensate) for i in range(STEPS)}
    try:
        _record(journal, run_id, tools)
        report = compensate_run(run_id, journal=journal, tools=tools)
    finally:
        other.close()
        journal.close()

    assert report.complete
    assert len(seen) == STEPS
    for condemned, claim, later_steps in seen:
        assert condemned  # the tombstone before the first hook
        assert claim is ClaimStatus.CLAIMED  # this step's claim before its hook
        assert all(s is ClaimStatus.COMPENSATED for s in later_steps)  # each outcome before the next step
