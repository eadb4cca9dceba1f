"""Retention for the operator: what ``saga-worker db prune`` (and the beat job) would remove, and
removing it in bounded batches, each written to an archive first when one is asked for. The rule of
what may go is the journal's (``journal/retention.py``)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import InvalidInputError
from ..journal.parts import RetentionPart
from ..journal.records import RunInfo
from ..journal.retention import DEFAULT_BATCH, Archive

# How many of the runs a dry run lists by name (it counts them all).
SAMPLE = 20


@dataclass(frozen=True)
class PrunePlan:
    """What a prune would remove now: how many runs, and the least recently updated of them."""

    cutoff: float
    count: int
    sample: list[RunInfo]


@dataclass
class PruneSummary:
    """What a prune removed: each run's id and final status (their stubs stay), in batches."""

    cutoff: float
    pruned: int = 0
    batches: int = 0
    condemned: int = 0
    archive: str | None = None
    run_ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cutoff": self.cutoff,
            "pruned": self.pruned,
            "batches": self.batches,
            "condemned": self.condemned,
            "archive": self.archive,
        }


def cutoff_for(journal: RetentionPart, older_than: float) -> float:
    """The time before which a run's last update makes it old enough, on the journal's clock."""
    if not older_than > 0:
        raise InvalidInputError(f"the age to prune at must be more than zero seconds, got {older_than!r}")
    return journal.now() - older_than


def plan_prune(journal: RetentionPart, older_than: float) -> PrunePlan:
    cutoff = cutoff_for(journal, older_than)
    return PrunePlan(cutoff, journal.count_prunable(cutoff), journal.prunable_runs(cutoff, limit=SAMPLE))


def prune(
    journal: RetentionPart,
    older_than: float,
    *,
    archive: Archive | None = None,
    batch: int = DEFAULT_BATCH,
    progress: Callable[[Sequence[RunInfo]], None] | None = None,
) -> PruneSummary:
    """Prune every run the rule allows that was last updated more than ``older_than`` seconds ago, in
    transactions of at most ``batch`` runs. Stopped midway, what was pruned stays pruned and a new
    prune goes on from there."""
    if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= 10_000:
        raise InvalidInputError(f"the batch size must be a whole number from 1 to 10000, got {batch!r}")
    summary = PruneSummary(cutoff_for(journal, older_than))
    after: tuple[float, str] | None = None
    empty = 0
    while True:
        stubs = journal.prune_runs(summary.cutoff, limit=batch, after=after, archive=archive)
        if not stubs:
            # A batch whose every run changed as it was pruned (condemned, say) stamps none: look once
            # more, and stop at a second empty one (the next prune goes on from the start).
            empty += 1
            if empty > 1 or not journal.prunable_runs(summary.cutoff, limit=1, after=after):
                return summary
            continue
        empty = 0
        after = (stubs[-1].updated_at, stubs[-1].run_id)
        summary.batches += 1
        summary.pruned += len(stubs)
        summary.condemned += sum(1 for s in stubs if s.condemned)
        if progress is not None:
            progress(stubs)


@contextmanager
def archive_file(path: str | os.PathLike[str]) -> Iterator[Archive]:
    """An archive appending one JSON line per pruned run to ``path`` (its row and every row that went
    with it: decisions, calls, claims, gates, unwinds and their entries, audit rows, as stored). Each
    batch is written, flushed and synced to disk before its rows are deleted."""
    target = Path(path)
    with target.open("a", encoding="utf-8") as handle:
        yield lambda runs: _write_batch(handle, runs)


def _write_batch(handle: IO[str], runs: Sequence[dict[str, Any]]) -> None:
    at = time.time()
    for run in runs:
        handle.write(json.dumps({"pruned_at": at, **run}, sort_keys=True, default=_plain) + "\n")
    handle.flush()
    os.fsync(handle.fileno())


def _plain(value: Any) -> Any:
    """What JSON cannot hold as it is (a memoryview, a decimal): as text."""
    return str(value)
