"""``saga-worker db prune``: retention, a dry run unless ``--yes``."""

from __future__ import annotations

from contextlib import ExitStack

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..core.checks import check_age
from ..journal.retention import DEFAULT_BATCH
from ..operating.retention import archive_file, plan_prune, prune
from ..operating.views import run_summary
from ..settings import get_settings
from .common import configured_journal
from .render import dump, out, runs_table, safe, when


@click.command("prune")
@click.option(
    "--older-than", "older_than", required=True, help="Age of the last update, such as 90d, 12h or 2w."
)
@click.option(
    "--archive",
    "archive",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Append what is removed to this file first, one JSON line per run with its rows and audit rows.",
)
@click.option("--yes", is_flag=True, help="Prune (without it: a dry run that says what would go).")
@click.option(
    "--batch",
    default=DEFAULT_BATCH,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Runs removed per transaction.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def prune_command(older_than: str, archive: str | None, yes: bool, batch: int, as_json: bool) -> None:
    """Remove finished or failed runs last updated before --older-than that are fully unwound or were
    never condemned; nothing unresolved (running, suspended, gated, uncertain, halted, interrupted) is
    ever removed. Each pruned run keeps a stub, so its id can never run, resume or unwind again."""
    age = check_age(older_than)
    with configured_journal(get_settings()) as journal:
        if not yes:
            plan = plan_prune(journal, age)
            if as_json:
                dump({"dry_run": True, "cutoff": plan.cutoff, "would_prune": plan.count})
                return
            out.print(
                f"dry run: {plan.count} run(s) last updated before {when(plan.cutoff)} would be pruned"
                + (" (the oldest below)" if plan.sample else "")
            )
            if plan.sample:
                out.print(runs_table([run_summary(run) for run in plan.sample]))
            out.print(
                "nothing was removed; add --yes to prune"
                + (f" (archive: {safe(archive)})" if archive else "")
            )
            return
        total = journal.count_prunable(journal.now() - age)
        with ExitStack() as stack:
            writer = stack.enter_context(archive_file(archive)) if archive is not None else None
            bar = Progress(
                TextColumn("pruning"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=out,
                disable=as_json,
            )
            stack.enter_context(bar)
            task = bar.add_task("prune", total=total)
            summary = prune(
                journal,
                age,
                archive=writer,
                batch=batch,
                progress=lambda stubs: bar.advance(task, len(stubs)),
            )
    summary.archive = archive
    if as_json:
        dump({"dry_run": False, **summary.as_dict()})
        return
    out.print(
        f"pruned {summary.pruned} run(s) in {summary.batches} batch(es) ({summary.condemned} condemned and "
        f"fully unwound); their stubs keep their ids from running again"
        + (f"; archived to {safe(archive)}" if archive else "")
    )
