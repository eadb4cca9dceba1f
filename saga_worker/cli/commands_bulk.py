"""Bulk ``compensate``, ``redrive`` and ``approve-compensation``: the runs a set of filters selects,
a dry run unless ``--yes``, a progress bar, a summary; run again to resume (``operating/bulk.py``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..compensation.actors import default_actor
from ..operating import actions
from ..operating.bulk import BulkPlan, BulkSummary, Filters, Target, plan_bulk, run_bulk
from ..settings import SagaSettings, get_settings
from .render import dump, out, safe

F = TypeVar("F", bound=Callable[..., Any])


def filter_options(command: F) -> F:
    """The filters every bulk command takes (combined: a run must match each one given)."""
    for option in reversed(
        [
            click.option("--status", default=None, help="Bulk: runs with this status or unwind state (failed, attention, awaiting, ...)."),
            click.option("--tool", default=None, help="Bulk: runs with a call of this tool."),
            click.option("--older-than", "older_than", default=None, help="Bulk: runs last updated longer ago than this (90d, 12h, 30m)."),
            click.option("--run-prefix", "run_prefix", default=None, help="Bulk: runs whose id starts with this."),
            click.option("--yes", is_flag=True, help="Bulk: act (without it: a dry run that says what would be done)."),
        ]
    ):  # fmt: skip
        command = option(command)
    return command


def bulk_filters(
    status: str | None, tool: str | None, older_than: str | None, run_prefix: str | None
) -> Filters | None:
    """The filters given, or None when none is (the command acts on the one run it names)."""
    if not any((status, tool, older_than, run_prefix)):
        return None
    return Filters.checked(status=status, tool=tool, older_than=older_than, run_prefix=run_prefix)


def run_bulk_command(
    action: str,
    filters: Filters,
    *,
    yes: bool,
    as_json: bool,
    make_act: Callable[[Any, SagaSettings], Callable[[Target], Any]],
    needs_tools: bool = False,
    local: bool = False,
) -> None:
    """Plan, then (with ``yes``) act with a progress bar and print the summary. Exit 0 when every run
    went through or was skipped as done, 2 when one failed (the summary says which and why)."""
    from .. import executor

    settings = get_settings()
    ctx = executor.WorkerContext(settings, create_journal=False)
    try:
        tools = ctx.require_tools(f"saga-worker {action} in bulk") if needs_tools else ctx.tools_if_configured
        journal = ctx.journal
        pending_for = settings.visibility_timeout
        plan = plan_bulk(action, filters, journal, tools=tools, pending_for=pending_for, local=local)
        if not yes:
            _show_plan(plan, as_json)
            return
        act = make_act(ctx, settings)
        with Progress(
            TextColumn(f"{action}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.description}"), console=out, disable=as_json,
        ) as bar:  # fmt: skip
            task = bar.add_task("", total=len(plan.todo))

            def advanced(run_id: str) -> None:
                bar.update(task, advance=1, description=safe(run_id))

            summary = run_bulk(
                plan, journal, act, tools=tools, pending_for=pending_for, progress=advanced, local=local
            )
    finally:
        ctx.close()
    _show_summary(plan, summary, as_json)
    if summary.failed:
        sys.exit(2)


def _show_plan(plan: BulkPlan, as_json: bool) -> None:
    if as_json:
        dump({"dry_run": True, **plan.as_dict()})
        return
    out.print(
        f"dry run: {plan.action} would act on {len(plan.todo)} run(s) ({safe(plan.filters.describe())})"
        + (" — more match; narrow the filters or run again after" if plan.truncated else "")
    )
    if plan.todo:
        table = Table(title=f"{plan.action}: {len(plan.todo)} run(s)")
        table.add_column("run", overflow="fold")
        table.add_column("steps", overflow="fold")
        for target in plan.todo[:50]:
            table.add_row(safe(target.run_id), safe(", ".join(target.steps)))
        out.print(table)
        if len(plan.todo) > 50:
            out.print(f"… and {len(plan.todo) - 50} more")
    for why, ids in plan.skipped.items():
        out.print(f"skipped {len(ids)}: {safe(why)}")
    out.print("nothing was done; add --yes to act")


def _show_summary(plan: BulkPlan, summary: BulkSummary, as_json: bool) -> None:
    if as_json:
        dump({"dry_run": False, **summary.as_dict()})
        return
    out.print(
        f"{plan.action}: {len(summary.done)} done, {len(summary.skipped)} skipped (done before or no longer "
        f"needed), {len(summary.failed)} failed"
    )
    for row in summary.failed:
        out.print(f"  failed {safe(row['run_id'])}: {safe(row['error'])}")


def compensate_act(
    local: bool, reason: str | None, filters: Filters
) -> Callable[[Any, SagaSettings], Callable[[Target], Any]]:
    """Each run's compensate: queued for the workers as the console's Compensate is (an
    ``unwind-queued`` row first, so a resumed bulk action never queues a run twice), or here."""
    why = reason or f"bulk compensate ({filters.describe()})"

    def make(ctx: Any, settings: SagaSettings) -> Callable[[Target], Any]:
        if local:

            def here(target: Target) -> Any:
                report = actions.unwind_here(
                    target.run_id,
                    context=ctx,
                    actor=None,
                    reason=why,
                    via="cli",
                    what="saga-worker compensate --local",
                )
                return {"complete": report.complete}

            return here
        from ..celery import compensate_run
        from ..celery.sending import celery_enqueue

        enqueue = celery_enqueue(compensate_run)
        actor = default_actor()

        def queued(target: Target) -> Any:
            task_id = actions.request_unwind(
                target.run_id, journal=ctx.journal, enqueue=enqueue, actor=actor, reason=why, via="cli",
                pending_for=settings.visibility_timeout,
            )  # fmt: skip
            return {"task_id": task_id}

        return queued

    return make


def compensate_many(
    filters: Filters, *, dry_run: bool, local: bool, reason: str | None, yes: bool, as_json: bool
) -> None:
    """``compensate`` with filters instead of a run id."""
    if dry_run:
        raise click.UsageError("compensate in bulk: a dry run is the default; --dry-run is for one run")
    act = compensate_act(local, reason, filters)
    run_bulk_command(
        "compensate", filters, yes=yes, as_json=as_json, make_act=act, needs_tools=local, local=local
    )


def redrive_act(ctx: Any, settings: SagaSettings) -> Callable[[Target], Any]:
    from ..celery import compensate_run
    from ..celery.sending import celery_enqueue

    enqueue = celery_enqueue(compensate_run)
    actor = default_actor()

    def redriven(target: Target) -> Any:
        task_id = actions.redrive(
            target.run_id,
            journal=ctx.journal,
            enqueue=enqueue,
            actor=actor,
            claim_ttl=settings.claim_ttl,
            via="cli",
        )
        return {"task_id": task_id}

    return redriven


def approve_compensation_act(reason: str) -> Callable[[Any, SagaSettings], Callable[[Target], Any]]:
    def make(ctx: Any, settings: SagaSettings) -> Callable[[Target], Any]:
        actor = default_actor()

        def approved(target: Target) -> Any:
            for suffix in target.steps:
                actions.decide(
                    "approve-compensation",
                    target.run_id,
                    suffix,
                    journal=ctx.journal,
                    actor=actor,
                    reason=reason,
                    via="cli",
                )
            return {"approved": list(target.steps)}

        return approved

    return make


def one_run_or_filters(name: str, run_id: str | None, filters: Filters | None) -> None:
    if run_id is not None and filters is not None:
        raise click.UsageError(f"{name}: name one run, or give filters for many, not both")
    if run_id is None and filters is None:
        raise click.UsageError(
            f"{name}: name a run, or give filters (--status, --tool, --older-than, --run-prefix)"
        )


__all__ = [
    "approve_compensation_act",
    "bulk_filters",
    "compensate_act",
    "compensate_many",
    "filter_options",
    "one_run_or_filters",
    "redrive_act",
    "run_bulk_command",
]
