"""The beat sweeper (``saga.retry_uncertain``): re-drive interrupted unwinds, with backoff and a budget.

A run is due when it is condemned and its unwind is ``pending`` (begun, never finished: a worker
died, a message was lost) or ``incomplete`` (halted on a failed or busy step, or left an uncertain
one). Each re-drive is sent by the ``enqueue`` the caller hands :func:`sweep` (the Celery layer
hands it ``actions.sweeper_redrive``: the sweeper's requests are checked and sent as every unwind
request is); the engine's claims make a re-drive of a run that a live unwinder holds harmless (it
reads busy and is retried later). After ``sweep_max_attempts``
re-drives the run is flagged ``attention``: a person must look, it is not retried forever. So is a
due run whose row cannot be read (a status this code does not know): it is logged and flagged,
naming the bad value, and the sweep goes on with the others.

A re-drive of a run whose unwind never ended (its messages lost with a broker restart, say) goes
on with that very unwind (``unfinished_unwinds``, read by ``actions.sweeper_redrive``), under its own
id, rather than beside it: its caller waits on that id, and the steps it already did just pass on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tenacity import RetryCallState, Retrying, wait_exponential

from ..errors import MalformedRecordError
from ..journal.records import AuditAction, AuditRecord, UnwindInfo, UnwindState
from ..journal.roles import UnwindJournal
from ..observing import metrics
from ..settings import SagaSettings, get_settings
from . import alerts

log = logging.getLogger(__name__)


@dataclass
class SweepOutcome:
    redriven: list[str] = field(default_factory=list)
    flagged: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[str]]:
        return {"redriven": list(self.redriven), "flagged": list(self.flagged)}


class UnwindsAndTrail(Protocol):
    """What ``unfinished_unwinds`` reads: a run's unwinds, and its trail's ``unwound`` rows (an
    unwind's journal and an operator's both have them: the sweeper's re-drive goes through actions)."""

    def list_unwinds(self, run_id: str, *, limit: int = 20) -> list[UnwindInfo]: ...

    def read_audit(self, run_id: str) -> list[AuditRecord]: ...


def unfinished_unwinds(journal: UnwindsAndTrail, run_id: str, *, limit: int = 20) -> list[str]:
    """The ids of ``run_id``'s unwinds (dry runs aside) that never ended, newest first: every unwind
    that ends writes an ``unwound`` row naming its id before its report is stored, so one without
    that row has a caller that has had no report from it."""
    ended = {
        row.detail.get("unwind_id") for row in journal.read_audit(run_id) if row.action is AuditAction.UNWOUND
    }
    return [
        u.unwind_id
        for u in journal.list_unwinds(run_id, limit=limit)
        if not u.dry_run and u.unwind_id not in ended
    ]


def backoff_delay(attempt: int, *, base: float, cap: float) -> float:
    """Seconds before re-drive ``attempt + 1``: ``base``, doubling per attempt, at most ``cap``
    (tenacity's ``wait_exponential``; the journal stores the time it gives as the run's next look)."""
    state = RetryCallState(Retrying(), fn=None, args=(), kwargs={})
    state.attempt_number = attempt + 1
    return float(wait_exponential(multiplier=base, max=cap)(state))


def sweep(
    journal: UnwindJournal,
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
    unreadable: list[MalformedRecordError] = []
    for run in journal.runs_to_sweep(now, limit=limit, unreadable=unreadable):
        if run.unwind_attempts >= s.sweep_max_attempts:
            why = run.unwind_note or "unwind never completed"
            note = f"gave up after {run.unwind_attempts} re-drives: {why}"[:2000]
            journal.set_unwind_state(run.run_id, UnwindState.ATTENTION, next_at=None, note=note)
            outcome.flagged.append(run.run_id)
            metrics.inc(metrics.SWEEPER_FLAGGED)
            alerts.needs_attention(run.run_id, f"the sweeper {note}")
            continue
        delay = backoff_delay(run.unwind_attempts, base=s.sweep_backoff, cap=s.sweep_backoff_max)
        # Book the next look before enqueueing: a lost message just makes the run due again later.
        journal.set_unwind_state(
            run.run_id, run.unwind_state, note=run.unwind_note, next_at=now + delay, count_attempt=True
        )
        enqueue(run.run_id)
        outcome.redriven.append(run.run_id)
        metrics.inc(metrics.SWEEPER_REDRIVES)
    for error in unreadable:
        _flag_unreadable(journal, error)
        outcome.flagged.append(error.detail["run_id"])
        metrics.inc(metrics.SWEEPER_FLAGGED)
    return outcome


def _flag_unreadable(journal: UnwindJournal, error: MalformedRecordError) -> None:
    """A due run this code cannot read cannot be re-driven (the unwind would fail closed on it every
    time): flag it for a person, naming what is wrong, instead of stopping every other re-drive."""
    run_id = error.detail["run_id"]
    note = f"flagged by the sweeper, the run cannot be read: {error}"
    journal.set_unwind_state(run_id, UnwindState.ATTENTION, next_at=None, note=note[:2000])
    alerts.needs_attention(run_id, note)
