"""The saga tasks (``saga.*``), registered on a Celery app by :func:`register`.

Thin on purpose: each task parses ids, calls saga_worker.executor, and passes the continuation on.
Each step task runs under a task id of its own, derived from the run, the step and the unwind
(``task_ids.step_task_id``), so Flower shows every step as a task; none stores a result of its own. The
last step task, or the one that halts, assembles the report from the journal and stores it under the
coordinator's task id (the unwind id), so ``compensate_run.delay(run_id).get()`` returns the report:
for the caller a halt is a normal end, never an exception. A step whose hook failed then ends
``FAILURE`` itself, with the hook's error, for Flower; the caller still gets the report. Eager, the
coordinator runs the steps itself; in someone else's chain, group or chord, ``replace()`` carries
each step on under the coordinator's id.

The task bodies are plain functions registered per app rather than decorated at import: the same
tasks go on saga-worker's own app (:func:`saga_worker.celery.make_app`) or on an app that already
exists (:func:`saga_worker.celery.install`), and importing this module creates no app.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, cast

from celery import Celery, Task
from celery.exceptions import Ignore
from sqlalchemy.exc import InterfaceError, OperationalError

from .. import executor
from ..compensation.report import SETTLED, CompensationEntry, CompensationReport, CompensationStatus, halts
from ..core import faults
from ..core.checks import check_age, check_parallel
from ..errors import JournalUnavailableError
from ..journal.records import UnwindInfo
from ..operating import actions, retention
from . import health, result_store
from .redeliveries import DeliveriesExhausted, counted
from .sending import celery_enqueue
from .task_base import saga_task_base
from .task_ids import step_task_id
from .undecodable import UndecodableSagaMessages

COMPENSATE_RUN = "saga.compensate_run"
COMPENSATE_STEP = "saga.compensate_step"
FINALIZE_UNWIND = "saga.finalize_unwind"
RETRY_UNCERTAIN = "saga.retry_uncertain"
PRUNE = "saga.prune"
NAMES = (COMPENSATE_RUN, COMPENSATE_STEP, FINALIZE_UNWIND, RETRY_UNCERTAIN, PRUNE)
REQUEST = "saga_worker.celery.request:JsonOnlyRequest"

# A journal that is briefly unreachable (a database restart, a locked SQLite file) or whose storage
# refuses work until someone acts (a full disk, a read-only standby: JournalUnavailableError, which
# says what to do) is retried with backoff under the same task id; every step is idempotent, so a
# retry only finishes what it began.
RETRY: dict[str, Any] = {
    "autoretry_for": (OperationalError, InterfaceError, JournalUnavailableError),
    "retry_backoff": 1,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": 8,
}


# The request field by which a worker that sends task events tells its pool child so
# (worker_signals._mark_events sets it).
EVENTS_FLAG = "saga_task_events"


class CompensationStepFailed(Exception):
    """A step task whose compensate hook failed, halting the unwind, ends with this error: Flower shows
    the step ``FAILURE`` with it. The unwind's report, under the coordinator's task id, says the same;
    the error is expected (a failed hook), so the worker logs it without a traceback."""


def _continue(task: Task[Any, Any], nxt: executor.Next) -> Any:
    request = task.request  # read once: each read walks Celery's request stack
    if request.is_eager:
        return _continue_here(nxt)
    plain = _plain_request(task, request)
    if isinstance(nxt, executor.Wait):
        # Another step of this wave is still running: the last one to end goes on.
        request.ignore_result = True
        return _shown(nxt.run_id, nxt.done)
    if isinstance(nxt, executor.Fan):
        if not plain:
            return _continue_here(nxt)  # under someone else's chain: one task id, the wave here
        for one in nxt.steps:  # each step of the wave its own task (and Flower row), side by side
            _send_step(task, one)
        request.ignore_result = True
        return _shown(nxt.run_id, nxt.done)
    if isinstance(nxt, executor.Step):
        if not plain:
            # under this very task id: Flower shows the steps as one row
            return task.replace(_step_signature(task, nxt))
        # The next step under its own task id, then this task ends without storing a result (the
        # unwind's last task stores the report under the coordinator's id). Not replace(): its Ignore
        # cost two formatted tracebacks per step (billiard's ExceptionInfo) and left their frames as
        # cyclic garbage in the pool child.
        _send_step(task, nxt)
        request.ignore_result = True
        return _shown(nxt.run_id, nxt.done)
    # The end (or a halt): assemble the report here, from the journal, rather than in a task of its
    # own: one message fewer per unwind. A redelivery assembles the same report again.
    report = _report(nxt.run_id, nxt.unwind_id, nxt.info, nxt.report)
    if not plain:
        return report  # this task runs under the coordinator's id: its result is the report
    # The report goes under the coordinator's id where nothing final is stored yet: the first answer
    # its caller could read stays (a redelivery's, or the sweeper's re-drive of an unwind whose
    # messages were lost, comes after it). A step task ends with its own outcome, stored nowhere:
    # Flower reads it from the event.
    result_store.store_once(task.backend, nxt.unwind_id, report)
    request.ignore_result = True
    if request.id == nxt.unwind_id:
        return report
    shown = _shown(nxt.run_id, nxt.done)
    # The unwind's last step says how it ended, so a halted unwind shows in Flower without opening each row.
    return None if shown is None else {**shown, "unwind": _how_it_ended(report)}


def _step_signature(task: Task[Any, Any], step: executor.Step) -> Any:
    """The step's message as a signature (for ``replace()``): the arguments and options ``_send_step`` sends."""
    sig = task.app.tasks[COMPENSATE_STEP].si(*_step_args(step))
    sig.options.update(_step_limits(step))  # apply_async options
    return sig


def _send_step(task: Task[Any, Any], step: executor.Step) -> None:
    """Send the step's message under its own task id: what its signature's ``apply_async`` sends
    (the same arguments, options and message), without a signature made and merged for each step."""
    task.app.tasks[COMPENSATE_STEP].apply_async(
        _step_args(step),
        {},
        task_id=step_task_id(step.run_id, step.suffix, step.unwind_id),
        **_step_limits(step),
    )


def _step_args(step: executor.Step) -> tuple[str, str, str, bool]:
    return (step.run_id, step.unwind_id, step.suffix, step.dry_run)


def _step_limits(step: executor.Step) -> dict[str, Any]:
    """``soft_time_limit`` and ``time_limit`` when the step's tool has a compensation timeout (a
    tool's timeout bounds its step task too), else nothing."""
    ctx = executor.current()
    limits = executor.time_limits(ctx.journal, ctx.tools_if_configured, step, ctx.settings.claim_ttl)
    if limits is None:
        return {}
    return {"soft_time_limit": limits[0], "time_limit": limits[1]}


def _how_it_ended(report: dict[str, Any]) -> str:
    """``complete``, ``halted at STEP (STATUS)``, ``incomplete`` (an uncertain or skipped step left for
    the sweeper) or ``planned`` (a dry run): the unwind's outcome as its last step's row shows it."""
    if report["dry_run"]:
        return "planned"
    entries = report["entries"]
    halt = next((e for e in entries if halts(e["status"])), None)
    if halt is not None:
        return f"halted at {halt['suffix']} ({halt['status']})"
    settled = all(CompensationStatus(e["status"]) in SETTLED and not e["tool_missing"] for e in entries)
    return "complete" if settled else "incomplete"


def _shown(run_id: str, done: CompensationEntry | None) -> dict[str, Any] | None:
    """What a step task ends with (Flower shows it as the task's result): its entry in the report,
    but for its group's number, which only the whole report knows (it numbers the groups of every
    step; a step reads its own); for a failed hook, the ``CompensationStepFailed`` error naming the
    run, the step and the error."""
    if done is None:
        return None
    if done.status is CompensationStatus.FAILED:
        raise CompensationStepFailed(
            f"run {run_id!r} step {done.suffix!r} ({done.tool_name}): compensate failed, the unwind "
            f"halted here: {done.error}"
        )
    return {"run_id": run_id, **done.model_dump(mode="json", exclude={"group"})}


def _continue_here(nxt: executor.Next) -> Any:
    """Eager (``task_always_eager``, ``.apply()``): the rest of the unwind in this call, step after step,
    and the report as this task's result. ``replace()`` would apply the next step eagerly and call
    ``.get()`` on it inside this task, which Celery refuses ("Never call result.get() within a task"),
    so the caller got FAILURE for an unwind that had completed."""
    ctx = executor.current()
    end = executor.run_rest(ctx.journal, ctx.tools, nxt, claim_ttl=ctx.settings.claim_ttl, lock=ctx.lock)
    if isinstance(end, executor.Finalize):
        return _report(end.run_id, end.unwind_id, end.info, end.report)
    return _report(end.run_id, end.unwind_id)


def _plain_request(task: Task[Any, Any], request: Any = None) -> bool:
    """Is this a request whose steps may run under ids of their own, the report stored under the
    coordinator's? Not eager, not in a chain, group or chord of someone else's, no callbacks; and the
    worker does not drop a task id it has seen succeed (``worker_deduplicate_successful_tasks``: not
    tried with per-step ids). Any other request goes on with replace(), under its own id."""
    req = task.request if request is None else request
    return not (
        req.is_eager
        or req.callbacks
        or req.errbacks
        or req.chain
        or req.chord
        or req.group
        or task.app.conf.worker_deduplicate_successful_tasks
    )


def _report(
    run_id: str, unwind_id: str, info: UnwindInfo | None = None, ended: CompensationReport | None = None
) -> dict[str, Any]:
    """The report, from the journal; ``info``: the unwind as the last step task read it; ``ended``:
    the report whose end that task wrote with its outcome."""
    report = executor.finalize_unwind(executor.current().journal, run_id, unwind_id, info=info, ended=ended)
    return report.model_dump(mode="json")


def compensate_run(
    self: Task[Any, Any],
    run_id: str,
    dry_run: bool = False,
    actor: str | None = None,
    reason: str | None = None,
    via: str = "worker",
    parallel: bool = False,
) -> Any:
    """Condemn the run and unwind it, one task per step; the result is the report as a JSON dict.

    ``actor``, ``reason`` and ``via`` (``worker``, or ``cli``/``sweeper`` when they send it) go to the
    run's audit trail; without an actor the worker's ``SAGA_ACTOR`` or OS user is named. With
    ``parallel=True`` the steps of each recorded group are undone side by side, each its own step
    task (at most ``SAGA_PARALLEL_MAX`` at once), groups still one after the other; eager or inside
    someone else's chain, by this task in its process (docs/reference/compensation.md, "Groups")."""
    if result_store.withdrawn(self):
        raise Ignore()  # `saga-worker revoke` withdrew it before any worker started it: nothing condemned
    ctx = executor.current()
    with counted(self.request, ctx.journal, ctx.settings.max_deliveries) as delivery:
        _refuse_if_exhausted(delivery.refusal, run_id)
        side_by_side = check_parallel(parallel)  # anything but a real boolean: refused, nothing written
        if side_by_side and not _plain_request(self):
            # Eager, or in someone else's chain: no task ids of its own for the steps; this task
            # undoes the groups side by side in its process.
            report = actions.unwind_here(
                run_id,
                context=ctx,
                actor=actor,
                reason=reason,
                via=via,
                dry_run=dry_run,
                parallel=parallel,
                what="saga.compensate_run(parallel=True)",
            )
            return report.model_dump(mode="json")
        nxt = executor.start_unwind(
            ctx.journal,
            run_id,
            cast(str, self.request.id),  # checked there (check_unwind_id)
            dry_run=dry_run,
            claim_ttl=ctx.settings.claim_ttl,
            actor=actor,
            reason=reason,
            via=via,
            parallel_max=ctx.settings.parallel_max if side_by_side else None,
        )
        return _continue(self, nxt)


def _refuse_if_exhausted(refusal: str | None, run_id: str) -> None:
    if refusal is not None:
        raise DeliveriesExhausted(f"run {run_id!r}: {refusal}")


def compensate_step(
    self: Task[Any, Any],
    run_id: str,
    unwind_id: str,
    suffix: str,
    dry_run: bool = False,
    position: int | None = None,
) -> Any:
    """One step of an unwind (``dry_run`` is informative: the unwind's own record decides).

    ``position`` is ignored: workers before this release sent it, and a message of theirs still in a
    queue must be accepted; where the step stands is the journal's worklist's word."""
    ctx = executor.current()
    request = self.request
    if getattr(request, EVENTS_FLAG, False) or self.app.conf.worker_send_task_events:
        # Flower shows the custom event type as the task's state: COMPENSATING, with run and step.
        self.send_event("task-compensating", run_id=run_id, unwind_id=unwind_id, suffix=suffix)
    with counted(request, ctx.journal, ctx.settings.max_deliveries) as delivery:
        # Past SAGA_MAX_DELIVERIES the step is failed without its tool's code being called.
        nxt = executor.run_step(
            ctx.journal,
            ctx.require_tools("saga.compensate_step"),
            run_id,
            unwind_id,
            suffix,
            claim_ttl=ctx.settings.claim_ttl,
            lock=ctx.lock,
            refusal=delivery.refusal,
        )
        if nxt is None:
            raise Ignore()  # a live duplicate of this delivery carries the chain on; store no result
        faults.point("before_ack", f"{run_id}:comp:{suffix}")
        # A hook that timed out is waited for in after_return (task_base.py), once the
        # report and this task's own outcome are stored: the hard limit can then cut only that wait.
        return _continue(self, nxt)


def finalize_unwind(self: Task[Any, Any], run_id: str, unwind_id: str) -> dict[str, Any]:
    """The report alone. Unwinds end in their last step task now; this one serves messages sent by
    earlier versions (a rolling upgrade) and anyone re-assembling a report by hand."""
    ctx = executor.current()
    with counted(self.request, ctx.journal, ctx.settings.max_deliveries) as delivery:
        _refuse_if_exhausted(delivery.refusal, run_id)
        return _report(run_id, unwind_id)


def retry_uncertain(self: Task[Any, Any]) -> dict[str, list[str]]:
    """Beat: re-drive interrupted unwinds with backoff; flag a run for a person after the budget.
    Each re-drive is sent as every unwind request is (``actions.sweeper_redrive``), through this app."""
    ctx = executor.current()
    start = self.app.tasks[COMPENSATE_RUN]
    enqueue = celery_enqueue(start)

    def redrive(run_id: str) -> list[str]:
        answered = partial(result_store.answered, start)
        return actions.sweeper_redrive(run_id, journal=ctx.journal, enqueue=enqueue, answered=answered)

    outcome = executor.sweep(ctx.journal, enqueue=redrive, settings=ctx.settings).as_dict()
    # When beat last swept (the console's header, `saga-worker status`), under this deployment's queue.
    health.note_sweep(self.app, ctx.settings.queue, outcome)
    return outcome


def prune(self: Task[Any, Any], older_than: str) -> dict[str, Any]:
    """Beat, when ``SAGA_PRUNE_OLDER_THAN`` is set: retention, as ``saga-worker db prune --yes``."""
    summary = retention.prune(executor.current().journal, check_age(older_than, "SAGA_PRUNE_OLDER_THAN"))
    return summary.as_dict()


def register(app: Celery, **options: Any) -> dict[str, Task[Any, Any]]:
    """Register the ``saga.*`` tasks on ``app`` with ``options`` (per-task settings such as
    ``queue``, ``serializer``, ``acks_late``) and return them by name."""
    bodies: dict[str, tuple[Callable[..., Any], bool]] = {
        COMPENSATE_RUN: (compensate_run, True),
        COMPENSATE_STEP: (compensate_step, True),
        FINALIZE_UNWIND: (finalize_unwind, True),
        RETRY_UNCERTAIN: (retry_uncertain, False),
        PRUNE: (prune, False),
    }
    registered: dict[str, Task[Any, Any]] = {}
    # A saga message whose body cannot be decoded is answered with a stored error (undecodable.py).
    app.steps["consumer"].add(UndecodableSagaMessages)
    base = saga_task_base(app)
    for name, (body, retries) in bodies.items():
        # Every saga task refuses, on receipt, a message it could never process (celery/request.py).
        opts = {"Request": REQUEST, **(RETRY if retries else {}), **options}
        # A failed hook, a task whose workers kept dying: expected ends, logged without a traceback.
        opts.setdefault("throws", (CompensationStepFailed, DeliveriesExhausted))
        # shared=False: Celery would otherwise add the task, with these options, to every app created
        # after this one in the process (a host app's saga tasks would then carry ours, or theirs).
        decorate: Callable[[Callable[..., Any]], Task[Any, Any]] = app.task(
            name=name, bind=True, shared=False, base=base, **opts
        )
        registered[name] = decorate(body)
    return registered


__all__ = [
    "COMPENSATE_RUN",
    "CompensationStepFailed",
    "COMPENSATE_STEP",
    "FINALIZE_UNWIND",
    "NAMES",
    "RETRY_UNCERTAIN",
    "register",
]
