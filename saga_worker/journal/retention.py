"""The retention rule, backend-free: which runs ``saga-worker db prune`` may remove, and what stays.

A run may be pruned only when nothing about it can still need its journal:

- it ended (``finished`` or ``failed``): a running run may be live, suspended or interrupted;
- it was never condemned (unwind state ``none``), or it was and its unwind is ``complete``: a
  pending, incomplete, awaiting (gated) or attention unwind is unresolved;
- none of its calls is ``running`` (uncertain or interrupted), ``suspended`` or ``approved``;
- no other run holds a copy of one of its calls (a fork): the fork's unwind needs this run's claims,
  which say whether its effects are already undone;
- it was last updated before the cut-off.

What stays is the run's row as a stub: its id, its final status, its tombstone (``condemned_at``) and
``pruned_at``; its prompt, text and error are cleared, its decisions, calls, claims, gates, unwinds and
audit rows deleted. The stub is why a pruned id never runs again: the run has ended (no new call or
decision is accepted, by this release or the previous one), a condemned one keeps refusing every call,
and the entry points (``run_durable``, ``resume_run``, ``saga()``, the agent adapters, the forward task,
an unwind) refuse a pruned id with ``RunPrunedError`` instead of replaying an empty journal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import CompensatedRunError, RunPrunedError
from .records import RecordStatus, RunInfo, RunStatus, UnwindState

PRUNABLE_STATUSES = (RunStatus.FINISHED, RunStatus.FAILED)
# A call in one of these keeps its run: someone (a worker, a person, the sweeper) may still act on it.
UNRESOLVED_CALLS = (RecordStatus.RUNNING, RecordStatus.SUSPENDED, RecordStatus.APPROVED)
# How many runs one prune transaction removes: bounded, so no lock is held for long.
DEFAULT_BATCH = 500

# What an archive receives for each batch before it is deleted: one dict per run (its row and every
# row that goes with it, as stored), in the order pruned.
Archive = Callable[[Sequence[dict[str, Any]]], None]


def unwind_settled(run: RunInfo) -> bool:
    """Never condemned, or condemned and fully unwound."""
    if run.condemned:
        return run.unwind_state is UnwindState.COMPLETE
    return run.unwind_state is UnwindState.NONE


def refuse_stopped(run: RunInfo | None) -> None:
    """Refuse a run that can never move again: condemned (``CompensatedRunError``) or pruned
    (``RunPrunedError``). Nothing to refuse for a run the journal has not seen."""
    if run is None:
        return
    if run.condemned:
        raise CompensatedRunError(run.run_id)
    refuse_pruned(run)


def refuse_pruned(run: RunInfo | None) -> None:
    """Raise ``RunPrunedError`` for a pruned stub."""
    if run is not None and run.pruned_at is not None:
        raise RunPrunedError(run.run_id, str(getattr(run.status, "value", run.status)), run.pruned_at)
