"""fsync + fdatasync calls per recorded step and per compensated step, on the embedded SQLite journal.

Counted, not timed: a count of sync calls is the same on every machine, where their cost is not.
The runs are recorded and unwound by a child process (bench/fsync_child.py) under ``strace -f``
(all its threads); it marks where each phase begins, so setup (creating the journal, migrating
it) is left out. Every sync call of the process is counted, the journal's and any other file's.
Targets (issue 10): at most 1 per recorded non-idempotent step, at most 1 per unwound run (0.2
per step of a five-step run). Needs strace (``make bench`` installs it with apt-get when missing).
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.common import Row, Table
from bench.config import Config
from bench.strace import Call, strace_binary, trace

STEPS = 5


def _phases(calls: list[Call]) -> dict[str, list[Call]]:
    marks = {c.text: i for i, c in enumerate(calls) if c.text.startswith("phase:")}
    return {
        "record": calls[marks["phase:record"] : marks["phase:unwind"]],
        "unwind": calls[marks["phase:unwind"] : marks["phase:end"]],
    }


@dataclass(frozen=True)
class Counted:
    """Sync calls of one phase: all of the process's, and how many of them its checkpoints made."""

    every: int
    # A checkpoint cycle makes three: the WAL before it is copied into the database file, the database
    # file after, and the new WAL's header at the first commit after the WAL restarts.
    checkpoints: int

    @property
    def commits(self) -> int:
        """The syncs the journal's durable commits asked for (the rest are checkpoints')."""
        return self.every - self.checkpoints


def _count(runs: int, idempotent: bool) -> dict[str, Counted]:
    with tempfile.TemporaryDirectory(prefix="saga-bench-fsync-") as tmp:
        journal = str(Path(tmp) / "journal.db")
        argv = [
            sys.executable,
            "-m",
            "bench.fsync_child",
            journal,
            "--runs",
            str(runs),
            "--steps",
            str(STEPS),
        ]
        calls = trace([*argv, *(["--idempotent"] if idempotent else [])], timeout=600)
    counted = {}
    for name, got in _phases(calls).items():
        on_db = sum(c.is_sync and c.path == journal for c in got)
        counted[name] = Counted(sum(c.is_sync for c in got), min(3 * on_db, sum(c.is_sync for c in got)))
    return counted


def run(cfg: Config) -> list[Table]:
    table = Table(
        "Durability on the embedded SQLite journal: fsync + fdatasync calls (strace -f, counted)",
        caption=f"{STEPS}-step runs recorded with run_durable, then unwound with compensate_run, in one "
        "process; every sync call of the process counted; target = the syncs of durable commits "
        "(checkpoints' syncs, three per checkpoint of 1,000 WAL pages, were there before and are shown apart)",
    )
    if strace_binary() is None:
        table.add(
            Row("fsync counts", None, "", note="skipped: strace is not installed (apt-get install strace)")
        )
        return [table]
    runs = 40 if cfg.quick else 200
    steps = runs * STEPS
    for idempotent in (False, True):
        kind = "idempotent" if idempotent else "non-idempotent"
        counted = _count(runs, idempotent)
        rec, unw = counted["record"], counted["unwind"]
        table.add(
            Row(
                f"sqlite, {kind} tools: syncs per recorded step",
                rec.every / steps,
                "syncs",
                target="" if idempotent else "<= 1",
                ok=None if idempotent else rec.commits / steps <= 1,
                note=f"{rec.every} syncs for {steps} steps: {rec.commits} by durable commits "
                f"({rec.commits / steps:.2f}/step), {rec.checkpoints} by checkpoints",
            )
        )
        table.add(
            Row(
                f"sqlite, {kind} tools: syncs per compensated step",
                unw.every / steps,
                "syncs",
                target="<= 0.2 (1 per run)",
                ok=unw.commits / runs <= 1,
                note=f"{unw.every} syncs for {runs} unwound runs: {unw.commits} by durable commits "
                f"({unw.commits / runs:.2f}/run), {unw.checkpoints} by checkpoints",
            )
        )
    return [table]
