"""Group commit on SQLite (``journal/group_commit.py``): writes of threads that are ready at the same
time share one commit, and each still keeps the safety rules alone: a claim committed in a shared
commit is visible to another process before its hook runs, and a write that fails in a shared
commit is undone alone, its caller told, while the others' writes commit."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
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
from saga_worker.core import faults
from saga_worker.journal.group_commit import GroupCommit
from saga_worker.journal.records import ClaimStatus, FinishedClaim

OTHERS = 3  # writers that queue while a first one holds its transaction open


@pytest.fixture
def journal(sqlite_url: str) -> Iterator[Journal]:
    with open_journal(sqlite_url, migrate=True) as opened:
        yield opened


@pytest.fixture
def shared_commits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many writes each shared commit held (a write committed alone is not listed)."""
    sizes: list[int] = []
    together = GroupCommit._commit_together

    def counted(connections: Any, batch: list[Any]) -> None:
        sizes.append(len(batch))
        together(connections, batch)

    monkeypatch.setattr(GroupCommit, "_commit_together", staticmethod(counted))
    return sizes


@pytest.fixture(autouse=True)
def fault_points() -> Iterator[None]:
    faults.enable()
    yield
    faults.disable()


def _group(journal: Journal) -> GroupCommit:
    group = getattr(journal, "_group", None)
    assert isinstance(group, GroupCommit), "a SQLite journal groups its commits"
    return group


def _holding_until_others_wait(journal: Journal, inside: threading.Event) -> Callable[[str, str], None]:
    """A fault-point callback, inside a write's transaction: it says so, then keeps the transaction
    open until ``OTHERS`` writes wait for the next commit (which they will then share)."""

    def hold(_name: str, _key: str) -> None:
        inside.set()
        deadline = time.monotonic() + 60
        while _group(journal).waiting() < OTHERS:
            assert time.monotonic() < deadline, "the other writes never came"
            time.sleep(0.005)

    return hold


def _in_threads(targets: list[Callable[[], object]], *, after: threading.Event | None = None) -> list[object]:
    """Each target's result or the exception it raised, in order; with ``after``, every target but
    the first starts once the event is set."""
    results: list[object] = [None] * len(targets)

    def run(i: int) -> None:
        try:
            results[i] = targets[i]()
        except BaseException as exc:  # handed to the test's thread
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(targets))]
    threads[0].start()
    if after is not None:
        assert after.wait(timeout=60)
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def _claim_in_another_process(url: str, run_id: str, suffix: str) -> str:
    """The step's claim as a separate process reads it from the journal's file: ``status owner``.
    Plain ``sqlite3``, a read that never waits for the write lock: it sees what is committed."""
    code = (
        "import sqlite3, sys\n"
        "db = sqlite3.connect(sys.argv[1])\n"
        "row = db.execute('SELECT status, owner FROM saga_compensations WHERE origin_run_id = ? AND suffix = ?',"
        " sys.argv[2:]).fetchone()\n"
        "print('none' if row is None else f'{row[0]} {row[1]}')\n"
    )
    path = url.removeprefix("sqlite:///")
    done = subprocess.run(
        [sys.executable, "-c", code, path, run_id, suffix],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_a_claim_committed_in_a_shared_commit_is_visible_to_another_process_before_its_hook_runs(
    journal: Journal, shared_commits: list[int]
) -> None:
    seen: dict[tuple[str, str], str] = {}

    def execute(input: Any, opts: CallOptions) -> Any:
        return {"ok": True}

    def compensate(input: Any, output: Any, opts: CallOptions) -> None:
        seen[opts.run_id, opts.tool_call_id] = _claim_in_another_process(
            journal.url, opts.run_id, opts.tool_call_id
        )

    tools = {name: Tool(execute, compensate) for name in ("charge", "reserve")}
    runs = [f"grouped-claim-{i}" for i in range(1 + OTHERS)]
    for run_id in runs:
        run_durable(
            run_id,
            journal=journal,
            tools=tools,
            planner=scripted(ToolCall("charge", {}), ToolCall("reserve", {})),
        )
    inside = threading.Event()
    # The first unwind keeps its merged commit (reserve's outcome, charge's claim) open until each other
    # unwind's first write (its tombstone and first claim) waits: those then go in one shared commit.
    with faults.calling(
        "before_next_claim", _holding_until_others_wait(journal, inside), match=runs[0], times=1
    ):
        reports = _in_threads(
            [lambda r=r: compensate_run(r, journal=journal, tools=tools) for r in runs],  # type: ignore[misc]
            after=inside,
        )

    assert OTHERS in shared_commits  # the other unwinds' tombstones and first claims, in one commit
    for run_id, report in zip(runs, reports, strict=True):
        assert not isinstance(report, BaseException), report
        assert [e.status.value for e in report.entries] == ["compensated", "compensated"]  # type: ignore[attr-defined]
        for step in ("call-1", "call-2"):
            status, _, owner = seen[run_id, step].partition(" ")
            assert status == ClaimStatus.CLAIMED.value and owner, (run_id, step, seen[run_id, step])


def _claim(journal: Journal, run_id: str, suffix: str, owner: str) -> None:
    got = journal.claim_compensation(
        run_id, suffix, via_run_id=run_id, owner=owner, ttl=30.0, idempotency_key=f"{run_id}:comp:{suffix}"
    )
    assert got is not None and got.acquired


def _finish_and_claim_next(journal: Journal, run_id: str, owner: str) -> object:
    """call-2's outcome and call-1's claim, one write (the in-process unwind's merged commit)."""
    return journal.finish_and_claim(
        FinishedClaim(run_id, "call-2", owner, ClaimStatus.COMPENSATED),
        run_id,
        "call-1",
        via_run_id=run_id,
        owner=owner,
        ttl=30.0,
        idempotency_key=f"{run_id}:comp:call-1",
    )


def test_a_write_that_fails_in_a_shared_commit_is_undone_alone_and_the_others_commit(
    journal: Journal, shared_commits: list[int]
) -> None:
    runs = [f"grouped-fail-{i}" for i in range(1 + OTHERS)]
    failing = runs[2]
    for run_id in runs:
        _claim(journal, run_id, "call-2", f"owner-{run_id}")
    inside = threading.Event()
    holding = faults.calling(
        "before_next_claim", _holding_until_others_wait(journal, inside), match=runs[0], times=1
    )
    # The failing write fails after its outcome is written, before its next claim: in its savepoint.
    with holding, faults.calling("before_next_claim", _fail, match=failing):
        results = _in_threads(
            [lambda r=r: _finish_and_claim_next(journal, r, f"owner-{r}") for r in runs],  # type: ignore[misc]
            after=inside,
        )

    assert OTHERS in shared_commits  # the failing write shared its commit with two others
    with open_journal(journal.url, migrate=False) as another:  # its own connection: what was committed
        for run_id, result in zip(runs, results, strict=True):
            done, claimed = another.get_claim(run_id, "call-2"), another.get_claim(run_id, "call-1")
            assert done is not None
            if run_id == failing:
                assert isinstance(result, faults.InjectedFault)
                assert done.status is ClaimStatus.CLAIMED  # its outcome undone with it
                assert claimed is None
            else:
                assert not isinstance(result, BaseException), result
                assert done.status is ClaimStatus.COMPENSATED
                assert claimed is not None and claimed.status is ClaimStatus.CLAIMED
                assert claimed.owner == f"owner-{run_id}"


def _fail(_name: str, _key: str) -> None:
    raise faults.InjectedFault("the write fails inside its transaction")
