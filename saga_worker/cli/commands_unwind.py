"""Unwinding: ``compensate`` (on a worker, or here with --local) and ``redrive``."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..compensation.actors import default_actor
from ..compensation.report import CompensationStatus, halted_at
from ..settings import get_settings
from .commands_bulk import (
    bulk_filters,
    compensate_many,
    filter_options,
    one_run_or_filters,
    redrive_act,
    run_bulk_command,
)
from .common import configured_journal, fail
from .processes import celery
from .progress import wait_with_progress
from .render import dump, out, report_table


@click.command()
@click.argument("run_id", required=False)
@click.option("--dry-run", is_flag=True, help="Plan only: nothing is written, no hook is called.")
@click.option("--reason", default=None, help="Why the run is reversed (kept in its audit trail).")
@click.option(
    "--wait/--no-wait", default=True, show_default=True, help="Wait for the report (else print the task id)."
)
@click.option("--local", is_flag=True, help="Unwind in this process instead of on a worker.")
@click.option(
    "--parallel",
    is_flag=True,
    help="Undo the steps of each group the run recorded as concurrent side by side (groups still in "
    "reverse order); on workers, each step of a group is a task of its own, sent with its group.",
)
@click.option("--timeout", default=300.0, show_default=True, help="Seconds to wait for the report.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@filter_options
def compensate(
    run_id: str | None,
    dry_run: bool,
    reason: str | None,
    wait: bool,
    local: bool,
    parallel: bool,
    timeout: float,
    as_json: bool,
    status: str | None,
    tool: str | None,
    older_than: str | None,
    run_prefix: str | None,
    yes: bool,
) -> None:
    """Condemn RUN_ID and undo its steps in reverse order (on a worker unless --local).

    Exit 0 when the unwind went through, 2 when a step failed or was busy (the report says which),
    3 when it stopped at a compensation awaiting a person's approval (saga-worker
    approve-compensation), 5 when the journal had no record of RUN_ID (it is condemned all the same,
    so a run of that id can never start), 1 for an error. The audit trail names SAGA_ACTOR, else the
    OS user.

    With filters instead of RUN_ID, every run they select that is not condemned yet: a dry run
    unless --yes; each is queued for the workers (or unwound here with --local) and the command
    does not wait for their reports. Run it again to resume: runs done before are skipped."""
    filters = bulk_filters(status, tool, older_than, run_prefix)
    one_run_or_filters("compensate", run_id, filters)
    if filters is not None:
        compensate_many(filters, dry_run=dry_run, local=local, reason=reason, yes=yes, as_json=as_json)
        return
    assert run_id is not None
    unknown = not dry_run and _never_seen(get_settings(), run_id)
    # Both ways go through actions, which checks the run id, the actor (SAGA_ACTOR, else the OS
    # user), the reason and via before anything is enqueued, opened or written.
    data: dict[str, Any] | None
    if local:
        data = _compensate_here(run_id, reason=reason, dry_run=dry_run, parallel=parallel)
    else:
        data = _compensate_on_worker(
            run_id,
            reason=reason,
            dry_run=dry_run,
            parallel=parallel,
            wait=wait,
            timeout=timeout,
            as_json=as_json,
        )
        if data is None:
            return  # not waiting: the task id was printed
    _show_report(data, as_json)
    _exit_for(data, unknown, run_id, as_json)


def _compensate_on_worker(
    run_id: str,
    *,
    reason: str | None,
    dry_run: bool,
    parallel: bool,
    wait: bool,
    timeout: float,
    as_json: bool,
) -> dict[str, Any] | None:
    """``compensate`` on a worker: the report, or None when not waiting for it (the task id printed)."""
    from ..celery import compensate_run
    from ..celery.sending import celery_enqueue
    from ..operating import actions

    task_id = actions.enqueue_unwind(
        run_id,
        enqueue=celery_enqueue(compensate_run),
        actor=None,
        reason=reason,
        via="cli",
        dry_run=dry_run,
        parallel=parallel,
    )
    async_result = celery().compensate_run.AsyncResult(task_id)
    if not wait:
        dump({"task_id": async_result.id, "run_id": run_id}) if as_json else out.print(
            f"unwind of run [bold]{run_id}[/] enqueued as task {async_result.id}"
        )
        return None
    return wait_with_progress(async_result, run_id, get_settings(), timeout, quiet=as_json)


def _compensate_here(run_id: str, *, reason: str | None, dry_run: bool, parallel: bool) -> dict[str, Any]:
    """``compensate --local``: through actions too (the same checks), in this process; the report."""
    from .. import executor
    from ..operating import actions

    ctx = executor.WorkerContext(get_settings(), create_journal=False)
    try:
        result = actions.unwind_here(
            run_id,
            context=ctx,
            actor=None,
            reason=reason,
            via="cli",
            dry_run=dry_run,
            what="saga-worker compensate --local" + (" --dry-run" if dry_run else ""),
            parallel=parallel,
        )
    finally:
        ctx.close()
    return result.model_dump(mode="json")


def _show_report(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        dump(data)
    else:
        out.print(report_table(data))


# Exit code of a compensate of a run the journal has no record of (condemned all the same).
NO_RECORDS_EXIT = 5


def _never_seen(settings: Any, run_id: str) -> bool:
    """Had the journal no record of ``run_id`` before this compensate (a mistyped id, say)? False when
    the journal cannot be read from here (the workers' report still says what happened)."""
    try:
        with configured_journal(settings) as journal:
            return journal.get_run(run_id) is None
    except Exception:  # noqa: BLE001 - a question for the message only; the unwind goes on
        return False


def _exit_for(data: dict[str, Any], unknown: bool, run_id: str, as_json: bool) -> None:
    if unknown and not data["entries"]:
        if not as_json:
            click.echo(
                f"no records: the journal had no run {run_id!r}; it is condemned so it can never start "
                "(check the id if you meant another run)",
                err=True,
            )
        sys.exit(NO_RECORDS_EXIT)
    # A halted unwind is a result, not an error: the report says why. Exit 2 (broken or busy) and 3
    # (waiting for a person) let scripts tell the two apart.
    halt = halted_at(e["status"] for e in data["entries"])
    if halt in (CompensationStatus.FAILED, CompensationStatus.BUSY):
        sys.exit(2)
    if halt is CompensationStatus.AWAITING_APPROVAL:
        sys.exit(3)


@click.command()
@click.argument("run_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@filter_options
def redrive(
    run_id: str | None,
    as_json: bool,
    status: str | None,
    tool: str | None,
    older_than: str | None,
    run_prefix: str | None,
    yes: bool,
) -> None:
    """Hand a run's unwind back to the workers once, now: one flagged for attention (the sweeper
    gave up) or a stuck one (pending or incomplete, as the inbox's stuck lane lists).

    With filters instead of RUN_ID, every run they select that is flagged for attention: a dry run
    unless --yes. Run it again to resume: runs re-driven before are no longer flagged, and skipped."""
    filters = bulk_filters(status, tool, older_than, run_prefix)
    one_run_or_filters("redrive", run_id, filters)
    if filters is not None:
        run_bulk_command("redrive", filters, yes=yes, as_json=as_json, make_act=redrive_act)
        return
    assert run_id is not None
    from ..celery import compensate_run
    from ..celery.sending import celery_enqueue
    from ..operating import actions

    settings = get_settings()
    with configured_journal(settings) as journal:
        task_id = actions.redrive(
            run_id,
            journal=journal,
            enqueue=celery_enqueue(compensate_run),
            actor=default_actor(),
            claim_ttl=settings.claim_ttl,
            via="cli",
        )
    dump({"run_id": run_id, "task_id": task_id}) if as_json else out.print(
        f"run [bold]{run_id}[/] re-driven as task {task_id}"
    )


@click.command()
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def revoke(task_id: str, as_json: bool) -> None:
    """Withdraw an unwind request (its task id) that no worker has started yet: it will not condemn
    the run. Refused once a worker has started it (an unwind that began finishes)."""
    import time

    settings = get_settings()
    with configured_journal(settings) as journal:
        if journal.get_unwind(task_id) is not None:
            fail(f"task {task_id}: a worker has started this unwind; it cannot be withdrawn (it will finish)")
        app = celery().current_app()
        app.control.revoke(task_id)  # the workers running now drop it on receipt
        # ...and the ones that start later read the withdrawal from the result backend.
        app.backend.mark_as_revoked(task_id, reason="withdrawn by saga-worker revoke")
        time.sleep(1.0)  # a coordinator that read the request just before the withdrawal shows now
        if journal.get_unwind(task_id) is not None:
            fail(
                f"task {task_id}: too late, a worker started this unwind as it was withdrawn; it will finish"
            )
    data = {"task_id": task_id, "withdrawn": True}
    dump(data) if as_json else out.print(f"unwind request {task_id} withdrawn: no worker will start it")
