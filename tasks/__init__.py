"""The Celery worker entry point: ``celery -A tasks worker`` from the repository root.

Thin on purpose: each task parses ids, calls saga_worker.executor, and passes the continuation on
with ``self.replace`` (which keeps the task id, so ``compensate_run.delay(run_id).get()`` returns the
report). The last step task, or the one that halts, assembles the report from the journal and
returns it: a halt is a normal end, never an exception (a raised error in a chain hands the caller an
exception instead of a report).
"""

from __future__ import annotations

from typing import Any

from celery import Task
from celery.exceptions import Ignore
from celery.signals import worker_process_init
from sqlalchemy.exc import InterfaceError, OperationalError

from config.celery import make_app
from saga_worker import executor, faults

app = make_app()

# A journal that is briefly unreachable (a database restart, a locked SQLite file) is retried with
# backoff under the same task id; every step is idempotent, so a retry only finishes what it began.
RETRY = {
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 1,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": 8,
}


@worker_process_init.connect
def _fresh_connections(**_: Any) -> None:
    # A pool child must not share the parent's database connections: each opens its own.
    executor.reset(after_fork=True)


def _continue(task: Task, nxt: executor.Next) -> Any:
    if isinstance(nxt, executor.Step):
        return task.replace(
            compensate_step.si(nxt.run_id, nxt.unwind_id, nxt.suffix, nxt.dry_run, position=nxt.position)
        )
    # The end (or a halt): assemble the report here, from the journal, rather than in a task of its
    # own: one message fewer per unwind. A redelivery assembles the same report again.
    return _report(nxt.run_id, nxt.unwind_id)


def _report(run_id: str, unwind_id: str) -> dict[str, Any]:
    report = executor.finalize_unwind(executor.current().journal, run_id, unwind_id)
    return report.model_dump(mode="json")


@app.task(name="saga.compensate_run", bind=True, **RETRY)
def compensate_run(self: Task, run_id: str, dry_run: bool = False) -> Any:
    """Condemn the run and unwind it, one task per step; the result is the report as a JSON dict."""
    ctx = executor.current()
    nxt = executor.start_unwind(
        ctx.journal, run_id, self.request.id, dry_run=bool(dry_run), claim_ttl=ctx.settings.claim_ttl
    )
    return _continue(self, nxt)


@app.task(name="saga.compensate_step", bind=True, **RETRY)
def compensate_step(
    self: Task, run_id: str, unwind_id: str, suffix: str, dry_run: bool = False, position: int | None = None
) -> Any:
    """One step of an unwind (``dry_run`` and ``position`` are informative: the unwind's own record
    decides; ``position`` only saves the journal a round trip)."""
    ctx = executor.current()
    if self.app.conf.worker_send_task_events:
        # Flower shows the custom event type as the task's state: COMPENSATING, with run and step.
        self.send_event("task-compensating", run_id=run_id, unwind_id=unwind_id, suffix=suffix)
    nxt = executor.run_step(
        ctx.journal,
        ctx.tools,
        run_id,
        unwind_id,
        suffix,
        claim_ttl=ctx.settings.claim_ttl,
        lock=ctx.lock,
        position=position if isinstance(position, int) and not isinstance(position, bool) else None,
    )
    if nxt is None:
        raise Ignore()  # a live duplicate of this delivery carries the chain on; store no result
    faults.point("before_ack", f"{run_id}:comp:{suffix}")
    return _continue(self, nxt)


@app.task(name="saga.finalize_unwind", bind=True, **RETRY)
def finalize_unwind(self: Task, run_id: str, unwind_id: str) -> dict[str, Any]:
    """The report alone. Unwinds end in their last step task now; this one serves messages sent by
    earlier versions (a rolling upgrade) and anyone re-assembling a report by hand."""
    return _report(run_id, unwind_id)


@app.task(name="saga.retry_uncertain")
def retry_uncertain() -> dict[str, list[str]]:
    """Beat: re-drive interrupted unwinds with backoff; flag a run for a person after the budget."""
    ctx = executor.current()
    outcome = executor.sweep(
        ctx.journal, enqueue=lambda run_id: compensate_run.delay(run_id), settings=ctx.settings
    )
    return outcome.as_dict()


__all__ = ["app", "compensate_run", "compensate_step", "finalize_unwind", "retry_uncertain"]
