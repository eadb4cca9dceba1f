"""Questions and refusals about condemned runs: has the tombstone been written?"""

from __future__ import annotations

from typing import Protocol

from ..errors import CompensatedRunError
from ..journal.records import RunInfo


class ReadsRuns(Protocol):
    """All these questions read: a run's row (every journal role has it, so a run, an unwind and an
    operator can each ask)."""

    def get_run(self, run_id: str) -> RunInfo | None: ...


def run_compensated(journal: ReadsRuns, run_id: str) -> bool:
    """True once the run is condemned (its tombstone is written): it can never move forward again."""
    run = journal.get_run(run_id)
    return run is not None and run.condemned


def assert_not_compensated(journal: ReadsRuns, run_id: str) -> None:
    if run_compensated(journal, run_id):
        raise CompensatedRunError(run_id)
