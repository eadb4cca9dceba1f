"""What an operator does to a run, for the CLI and the console alike: plan, unwind, re-drive.

Each action goes through the library or the Celery task, never around them: a plan is the engine's
dry run, an unwind is ``saga.compensate_run`` on the workers, a re-drive hands a run the sweeper
gave up on back to the workers once. ``actor`` is who asked (a console token's name, or the
shell's user); it is logged with the action.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from .compensation.engine import compensate_run
from .compensation.report import CompensationReport
from .errors import InvalidInputError, SagaError, UnknownRunError
from .executor.context import WorkerContext
from .executor.unwind import SWEEP_GRACE_TTLS
from .journal.base import Journal
from .journal.records import UnwindState
from .keys import check_run_id

log = logging.getLogger(__name__)

# enqueue(run_id, dry_run) -> the task id
Enqueue = Callable[[str, bool], str]


class ActionRefusedError(SagaError):
    """The run is not in a state the action applies to (the console answers 409)."""

    def __init__(self, run_id: str, action: str, why: str) -> None:
        super().__init__(f"cannot {action} run {run_id!r}: {why}", run_id=run_id, action=action)


def celery_enqueue() -> Enqueue:
    """Enqueue on the workers with ``saga.compensate_run``, as ``saga-worker compensate`` does."""
    tasks: Any = importlib.import_module("saga_worker.celery")

    def enqueue(run_id: str, dry_run: bool) -> str:
        return str(tasks.compensate_run.delay(run_id, dry_run=dry_run).id)

    return enqueue


def plan(run_id: str, *, context: WorkerContext) -> CompensationReport:
    """The dry run: what an unwind would do now (writes nothing; ``recover`` probes are reads)."""
    check_run_id(run_id)
    return compensate_run(
        run_id, journal=context.journal, tools=context.tools, dry_run=True, lock=context.lock
    )


def _known(journal: Journal, run_id: str) -> Any:
    check_run_id(run_id)
    run = journal.get_run(run_id)
    if run is None:
        raise UnknownRunError(run_id)
    return run


def unwind(run_id: str, *, journal: Journal, enqueue: Enqueue, actor: str, reason: str) -> str:
    """Condemn and unwind the run on the workers; the task id. A reason is required: it is the
    answer to "why was order 7 reversed?"."""
    _known(journal, run_id)
    reason = " ".join((reason or "").split())
    if not reason:
        raise InvalidInputError("a reason is required to compensate a run", run_id=run_id)
    task_id = enqueue(run_id, False)
    log.info("unwind of run %s requested by %s (task %s): %s", run_id, actor, task_id, reason)
    return task_id


def redrive(run_id: str, *, journal: Journal, enqueue: Enqueue, actor: str, claim_ttl: float) -> str:
    """Hand a run flagged ``attention`` (the sweeper spent its budget) back to the workers once.

    The run is held off the sweeper while the unwind starts (as a fresh unwind holds it); if it
    halts again the sweeper, whose budget is still spent, flags it for a person again."""
    run = _known(journal, run_id)
    if not run.condemned or run.unwind_state is not UnwindState.ATTENTION:
        raise ActionRefusedError(
            run_id, "re-drive", f"its unwind is {run.unwind_state.value}, not flagged for attention"
        )
    journal.hold_sweep(run_id, SWEEP_GRACE_TTLS * claim_ttl, f"re-driven by {actor}"[:2000])
    task_id = enqueue(run_id, False)
    log.info("run %s re-driven by %s (task %s)", run_id, actor, task_id)
    return task_id
