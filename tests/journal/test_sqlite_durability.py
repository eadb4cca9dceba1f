"""The embedded SQLite journal syncs exactly what the contract needs (issue 10, item 8).

Its commits are lazy (WAL, ``synchronous=NORMAL``) except two: the tombstone is on stable storage
before the first compensate hook runs (lost in a power cut, the run could be resumed and its undone
effects redone), and so is the claim of a side-effecting call that is not idempotent, before
``execute`` (lost, the call would read as never started and be executed again). Checked on the
syscalls themselves: the traced process writes a marker before each unwind and inside every hook,
so strace's log orders the journal's writes, its fsync/fdatasync calls and the hooks on one line.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.strace import Call, trace
from tests.services import require_program

RUNS, STEPS = 3, 4


def traced(tmp_path: Path, *flags: str) -> tuple[str, list[Call]]:
    require_program("strace")
    journal = str(tmp_path / "journal.db")
    argv = [sys.executable, "-m", "bench.fsync_child", journal, "--runs", str(RUNS), "--steps", str(STEPS)]
    return journal, trace([*argv, "--mark-hooks", *flags], timeout=110)


def segments(calls: list[Call], opening: str, closing: str) -> list[list[Call]]:
    """The calls from each ``opening`` mark up to the next ``closing`` mark (exclusive)."""
    found: list[list[Call]] = []
    current: list[Call] | None = None
    for call in calls:
        if call.text == opening:
            current = []
        elif call.text == closing and current is not None:
            found.append(current)
            current = None
        elif current is not None:
            current.append(call)
    return found


def test_the_tombstone_is_fsynced_after_its_write_and_before_the_first_compensate_hook(
    tmp_path: Path,
) -> None:
    journal, calls = traced(tmp_path)
    before_first_hook = segments(calls, "unwind", "hook")
    assert len(before_first_hook) == RUNS
    for run, segment in enumerate(before_first_hook):
        on_journal = [c for c in segment if c.on_journal(journal)]
        # The unwind's first write is the tombstone (condemn comes before any read or claim).
        first_write = next(i for i, c in enumerate(on_journal) if c.name == "pwrite64")
        synced = [c for c in on_journal[first_write + 1 :] if c.is_sync]
        assert synced, (
            f"unwind {run}: no fsync/fdatasync of the journal between its tombstone and the first hook"
        )


def test_the_claim_of_a_non_idempotent_call_is_fsynced_before_execute(tmp_path: Path) -> None:
    journal, calls = traced(tmp_path)
    executes = [i for i, c in enumerate(calls) if c.text == "execute"]
    assert len(executes) == RUNS * STEPS
    start = next(i for i, c in enumerate(calls) if c.text == "phase:record")
    for n, at in enumerate(executes):
        on_journal = [c for c in calls[start:at] if c.on_journal(journal)]
        last_write = max(i for i, c in enumerate(on_journal) if c.name == "pwrite64")
        # Everything written before execute (the claim last) is synced after its last write.
        assert any(c.is_sync for c in on_journal[last_write + 1 :]), f"call {n}: its claim was not fsynced"
        start = at


@pytest.mark.parametrize("idempotent", [False, True], ids=["non-idempotent", "idempotent"])
def test_everything_else_stays_lazy_one_sync_per_unwound_run_and_per_non_idempotent_claim(
    tmp_path: Path, idempotent: bool
) -> None:
    journal, calls = traced(tmp_path, *(["--idempotent"] if idempotent else []))
    marks = {c.text: i for i, c in enumerate(calls) if c.text.startswith("phase:")}
    recording = calls[marks["phase:record"] : marks["phase:unwind"]]
    unwinding = calls[marks["phase:unwind"] : marks["phase:end"]]
    assert sum(c.is_sync for c in recording) == (0 if idempotent else RUNS * STEPS)
    assert sum(c.is_sync for c in unwinding) == RUNS
