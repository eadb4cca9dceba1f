"""Questions and refusals about condemned runs: has the tombstone been written?"""

from __future__ import annotations

from ..errors import CompensatedRunError
from ..journal.parts import RunsPart


def run_compensated(journal: RunsPart, run_id: str) -> bool:
    """True once the run is condemned (its tombstone is written): it can never move forward again."""
    run = journal.get_run(run_id)
    return run is not None and run.condemned


def assert_not_compensated(journal: RunsPart, run_id: str) -> None:
    if run_compensated(journal, run_id):
        raise CompensatedRunError(run_id)
