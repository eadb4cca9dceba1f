"""The beat sweeper (``saga.retry_uncertain``): re-drive interrupted unwinds, with backoff and a budget.

A run is due when it is condemned and its unwind is ``pending`` (begun, never finished: a worker
died, a message was lost) or ``incomplete`` (halted on a failed or busy step, or left an uncertain
one). Each re-drive is a fresh ``compensate_run``; the engine's claims make a re-drive of a run that
a live unwinder holds harmless (it reads busy and is retried later). After ``sweep_max_attempts``
re-drives the run is flagged ``attention``: a person must look, it is not retried forever.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .. import metrics
from ..journal.base import Journal
from ..journal.records import UnwindState
from ..settings import SagaSettings, get_settings


@dataclass
class SweepOutcome:
    redriven: list[str] = field(default_factory=list)
    flagged: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[str]]:
        return {"redriven": list(self.redriven), "flagged": list(self.flagged)}


def backoff_delay(attempt: int, *, base: float, cap: float) -> float:
    """Seconds before re-drive ``attempt + 1``: ``base``, doubling per attempt, at most ``cap``."""
    return float(min(cap, base * 2.0 ** min(attempt, 62)))


def sweep(
    journal: Journal,
    *,
    enqueue: Callable[[str], object],
    settings: SagaSettings | None = None,
    now: float | None = None,
    limit: int = 100,
) -> SweepOutcome:
    """Re-drive every due run once (``enqueue(run_id)``) or flag it for a person."""
    s = settings if settings is not None else get_settings()
    now = journal.now() if now is None else now
    outcome = SweepOutcome()
    for run in journal.runs_to_sweep(now, limit=limit):
        if run.unwind_attempts >= s.sweep_max_attempts:
            why = run.unwind_note or "unwind never completed"
            journal.set_unwind_state(
                run.run_id,
                UnwindState.ATTENTION,
                next_at=None,
                note=f"gave up after {run.unwind_attempts} re-drives: {why}"[:2000],
            )
            outcome.flagged.append(run.run_id)
            metrics.SWEEPER_FLAGGED.inc()
            continue
        delay = backoff_delay(run.unwind_attempts, base=s.sweep_backoff, cap=s.sweep_backoff_max)
        # Book the next look before enqueueing: a lost message just makes the run due again later.
        journal.set_unwind_state(
            run.run_id, run.unwind_state, note=run.unwind_note, next_at=now + delay, count_attempt=True
        )
        enqueue(run.run_id)
        outcome.redriven.append(run.run_id)
        metrics.SWEEPER_REDRIVES.inc()
    return outcome
