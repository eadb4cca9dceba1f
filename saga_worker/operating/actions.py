"""What an operator does to a run, for the CLI and the console alike: plan, unwind, re-drive,
and decide on what waits for a person (a suspended call, an approval-gated compensation).

Each action goes through the library or the Celery task, never around them: a plan is the engine's
dry run, an unwind is ``saga.compensate_run`` on the workers, a re-drive hands a run the sweeper
gave up on back to the workers once, a decision is ``saga_worker.approve`` and its siblings. ``actor``
is who asked (a console token's name, or the shell's user); it goes to the run's audit trail with
``reason`` and ``via`` (through what: ``cli``, ``console``, ``sweeper``).

Every unwind request starts here: :func:`enqueue_unwind` sends one to the workers (the CLI's
``compensate``, the console's Compensate, ``saga-worker demo``, a re-drive, and the beat sweeper's
re-drives, :func:`sweeper_redrive`, which the Celery layer hands the sweeper), :func:`unwind_here`
runs one in this process (``saga-worker compensate --local``). Both check the request
(``UnwindRequest.checked``: run id, actor, reason, ``via``) before anything is enqueued or written.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from ..compensation.actors import check_via
from ..compensation.chain import SWEEP_GRACE_TTLS
from ..compensation.engine import UnwindRequest, compensate_run
from ..compensation.report import CompensationReport
from ..compensation.sweeper import UnwindsAndTrail, unfinished_unwinds
from ..core.checks import check_actor, check_parallel, check_reason, check_run_id
from ..errors import InvalidInputError, SagaError, UnknownRunError
from ..executor.context import WorkerContext
from ..journal.records import AuditAction, AuditRecord, NewAudit, UnwindState
from ..journal.roles import OperatorJournal
from . import approvals
from .stuck import REDRIVABLE

log = logging.getLogger(__name__)


class Enqueue(Protocol):
    """Send ``saga.compensate_run`` for the run; the task id (``task_id`` when given). ``actor``,
    ``reason`` and ``via`` go with it to the run's audit trail. A sender that can ask for a grouped
    unwind also takes ``parallel=True`` (``celery_enqueue``): it is passed only when asked for."""

    def __call__(
        self, run_id: str, dry_run: bool, *, actor: str, reason: str, via: str, task_id: str | None = None
    ) -> str: ...


# The decisions a person takes on what waits for them: name -> (library call, what it decides on).
DECISIONS: dict[str, tuple[Callable[..., Any], str]] = {
    "approve": (approvals.approve, "call"),
    "deny": (approvals.deny, "call"),
    "approve-compensation": (approvals.approve_compensation, "compensation"),
    "deny-compensation": (approvals.deny_compensation, "compensation"),
}


class ActionRefusedError(SagaError):
    """The run is not in a state the action applies to (the console answers 409)."""

    def __init__(self, run_id: str, action: str, why: str) -> None:
        super().__init__(f"cannot {action} run {run_id!r}: {why}", run_id=run_id, action=action)
        self._rebuilds_from(run_id, action, why)


Workers = Callable[[], "list[str] | None"]


def plan(run_id: str, *, context: WorkerContext) -> CompensationReport:
    """The dry run: what an unwind would do now (writes nothing; ``recover`` probes are reads)."""
    check_run_id(run_id)
    return compensate_run(
        run_id,
        journal=context.journal,
        tools=context.require_tools("the dry run"),
        dry_run=True,
        lock=context.lock,
    )


def _known(journal: OperatorJournal, run_id: str) -> Any:
    check_run_id(run_id)
    run = journal.get_run(run_id)
    if run is None:
        raise UnknownRunError(run_id)
    return run


def enqueue_unwind(
    run_id: str,
    *,
    enqueue: Enqueue,
    actor: str | None,
    reason: str | None,
    via: str,
    dry_run: bool = False,
    task_id: str | None = None,
    parallel: bool = False,
) -> str:
    """The one way an unwind is sent to the workers (the console's Compensate, ``saga-worker
    compensate``, ``saga-worker demo``, a re-drive, the sweeper's re-drives); the task id. The run
    id, the actor (None: ``SAGA_ACTOR`` or the OS user), the reason and ``via`` are refused here,
    before anything is enqueued (the worker would refuse them too, later and unseen).

    ``parallel`` goes into the message only when asked for: a sequential unwind's message stays what
    the previous release reads (an older worker refuses the ``parallel`` argument, running nothing)."""
    request = UnwindRequest.checked(run_id, actor=actor, reason=reason, via=via)
    who, why, through = request.actor, request.reason, request.via.value
    extra: dict[str, Any] = {} if task_id is None else {"task_id": task_id}
    if check_parallel(parallel):
        extra["parallel"] = True
    return enqueue(run_id, dry_run, actor=who, reason=why, via=through, **extra)


def unwind_here(
    run_id: str,
    *,
    context: WorkerContext,
    actor: str | None,
    reason: str | None,
    via: str,
    dry_run: bool = False,
    what: str = "the unwind",
    parallel: bool = False,
) -> CompensationReport:
    """An unwind in this process rather than on a worker (``saga-worker compensate --local``): the
    same checks as :func:`enqueue_unwind`, before the tools are loaded or anything is written; then
    the tools (``what`` names the caller in the error without them), then the engine's unwind
    (``parallel``: each group's steps side by side)."""
    request = UnwindRequest.checked(run_id, actor=actor, reason=reason, via=via)
    check_parallel(parallel)
    tools = context.require_tools(what)  # without tools nothing is opened, condemned or planned
    return compensate_run(
        request.run_id,
        journal=context.journal,
        tools=tools,
        dry_run=dry_run,
        lock=context.lock,
        actor=request.actor,
        reason=request.reason,
        via=request.via,
        parallel=parallel,
    )


def sweeper_redrive(
    run_id: str, *, journal: UnwindsAndTrail, enqueue: Enqueue, answered: Callable[[str], bool]
) -> list[str]:
    """The sweeper's re-drive of ``run_id`` (``executor.sweep`` is handed it by the Celery layer):
    each of its unwinds that never ended, and under whose id nothing final is stored
    (``answered``), goes on under that id (the coordinator's message again: the steps it did pass
    on, the report lands where its caller waits); with none, a new unwind. The task ids sent."""
    waiting = [u for u in unfinished_unwinds(journal, run_id) if not answered(u)]
    for unwind_id in waiting:
        enqueue_unwind(run_id, enqueue=enqueue, actor=None, reason=None, via="sweeper", task_id=unwind_id)
    if waiting:
        return waiting
    return [enqueue_unwind(run_id, enqueue=enqueue, actor=None, reason=None, via="sweeper")]


class UnwindQueuedError(SagaError):
    """An unwind queued earlier for the run has not started yet."""

    def __init__(self, run_id: str, task_id: str, age: float) -> None:
        super().__init__(
            f"the unwind of run {run_id!r} queued as task {task_id} has not started", run_id=run_id
        )
        self._rebuilds_from(run_id, task_id, age)
        self.task_id, self.age = task_id, age


def queued_unwind(journal: OperatorJournal, run_id: str, pending_for: float) -> AuditRecord | None:
    """The run's newest ``unwind-queued`` row if its task has not started an unwind and was queued
    less than ``pending_for`` seconds ago (after that, its message is taken to be lost)."""
    rows = [r for r in journal.read_audit(run_id) if r.action is AuditAction.UNWIND_QUEUED]
    last = rows[-1] if rows else None
    if last is None or last.target is None:
        return None
    if journal.get_unwind(last.target) is not None or journal.now() - last.at >= pending_for:
        return None
    return last


def request_unwind(
    run_id: str,
    *,
    journal: OperatorJournal,
    enqueue: Enqueue,
    actor: str,
    reason: str,
    via: str = "console",
    pending_for: float = 300.0,
    parallel: bool = False,
) -> str:
    """Condemn and unwind a run the journal knows on the workers (the console's Compensate); the task
    id. A reason is required: it is the answer to "why was order 7 reversed?" (the audit trail's
    ``condemned`` row keeps it). ``parallel``: each recorded group's steps side by side.

    At most one such request waits at a time, whichever process asks: the request is an
    ``unwind-queued`` audit row, appended insert-if-absent on the run's next request number before
    anything is sent, so of two racing requests one writes it and the other is refused
    (UnwindQueuedError) until the queued task starts its unwind or ``pending_for`` seconds pass."""
    _known(journal, run_id)
    reason = " ".join((reason or "").split())
    if not reason:
        raise InvalidInputError("a reason is required to compensate a run", run_id=run_id)
    actor = check_actor(actor)
    waiting = queued_unwind(journal, run_id, pending_for)
    if waiting is not None and waiting.target is not None:
        raise UnwindQueuedError(run_id, waiting.target, journal.now() - waiting.at)
    earlier = sum(1 for r in journal.read_audit(run_id) if r.action is AuditAction.UNWIND_QUEUED)
    task_id = str(uuid.uuid4())
    request = NewAudit(
        run_id,
        AuditAction.UNWIND_QUEUED,
        actor,
        check_via(via),
        check_reason(reason) or "",
        target=task_id,
        event_key=f"unwind-queued:{earlier}:{run_id}",
    )
    if not journal.append_audit(request):
        winner = queued_unwind(journal, run_id, pending_for)
        raise UnwindQueuedError(run_id, winner.target if winner and winner.target else "?", 0.0)
    task_id = enqueue_unwind(
        run_id, enqueue=enqueue, actor=actor, reason=reason, via=via, task_id=task_id, parallel=parallel
    )
    log.info("unwind of run %s requested by %s (task %s): %s", run_id, actor, task_id, reason)
    return task_id


def redrive(
    run_id: str,
    *,
    journal: OperatorJournal,
    enqueue: Enqueue,
    actor: str,
    claim_ttl: float,
    via: str = "console",
    reason: str | None = None,
) -> str:
    """Hand a run's unwind back to the workers once, now: one flagged ``attention`` (the sweeper
    spent its budget) or a stuck one (``pending`` or ``incomplete``: the inbox's stuck lane), without
    waiting for the sweeper's next look. ``reason``, the person's, goes to the audit trail (a default
    one says what happened).

    The run is held off the sweeper while the unwind starts (as a fresh unwind holds it); if it
    halts again the sweeper, whose budget is still spent, flags it for a person again. A re-drive of
    an unwind a live unwinder holds is harmless: its steps read busy and the sweeper comes back."""
    run = _known(journal, run_id)
    actor = check_actor(actor)
    said = " ".join(check_reason(reason).split())
    if not run.condemned or run.unwind_state not in REDRIVABLE:
        raise ActionRefusedError(
            run_id,
            "re-drive",
            f"its unwind is {run.unwind_state.value}: not stuck, and not flagged for attention",
        )
    gave_up = run.unwind_state is UnwindState.ATTENTION
    by = actor if via == "console" else f"{via}:{actor}"  # a console token's name is its own
    journal.hold_sweep(run_id, SWEEP_GRACE_TTLS * claim_ttl, f"re-driven by {by}"[:2000])
    why = said or (
        "re-driven after the sweeper gave up" if gave_up else "re-driven now, before the sweeper's next look"
    )
    task_id = enqueue_unwind(run_id, enqueue=enqueue, actor=actor, reason=why, via=via)
    log.info("run %s re-driven by %s (task %s)", run_id, actor, task_id)
    return task_id


def decide(
    decision: str, run_id: str, target: str, *, journal: OperatorJournal, actor: str, reason: str, via: str
) -> Any:
    """Approve or deny a suspended call (``target`` its tool call id) or an approval-gated
    compensation (``target`` the step's suffix). Deciding again as before is a no-op; the library
    raises CompensatedRunError for a condemned run's call, RunEndedError for an undecided call of a
    run that has ended, and ApprovalError for a decision that cannot apply (no such call or step,
    or decided the other way)."""
    if decision not in DECISIONS:
        raise InvalidInputError(f"unknown decision {decision!r}; one of {', '.join(DECISIONS)}")
    call, _ = DECISIONS[decision]
    _known(journal, run_id)
    outcome = call(journal, run_id, target, actor=actor, reason=" ".join((reason or "").split()), via=via)
    log.info("%s of %s in run %s by %s", decision, target, run_id, actor)
    return outcome
