"""Reading the journal: ``runs`` and ``report``."""

from __future__ import annotations

import click

from ..operating.inbox import run_readings
from ..operating.unwinds import journal_steps
from ..operating.views import parse_run_query, run_summary, runs_page
from ..settings import get_settings
from .common import configured_journal, fail
from .render import dump, out, runs_lines, runs_table, safe, steps_table


@click.command()
@click.option("--limit", default=50, show_default=True, help="How many runs, most recently updated first.")
@click.option("--condemned", is_flag=True, help="Only condemned runs.")
@click.option("--status", default=None, help="Only runs with this status (running, finished, failed, ...).")
@click.option("--unwind", default=None, help="Only runs in this unwind state (incomplete, attention, ...).")
@click.option(
    "--search",
    default=None,
    help="Only runs whose id contains this (any case; words separated by spaces match in order).",
)
@click.option("--cursor", default=None, help="The next page: the cursor the previous page printed.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def runs(
    limit: int,
    condemned: bool,
    status: str | None,
    unwind: str | None,
    search: str | None,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List runs with their status, tombstone and unwind state (attention: a person must look)."""
    query = parse_run_query(
        status=status,
        condemned=True if condemned else None,
        unwind=unwind,
        search=search,
        cursor=cursor,
        limit=limit,
    )
    with configured_journal(get_settings()) as journal:
        page = runs_page(journal, query)
        readings = run_readings(journal)  # suspended or interrupted, as in the console
    summaries = [run_summary(r, readings.get(r.run_id)) for r in page.runs]
    if as_json:
        dump(summaries)
        return
    if out.is_terminal:
        out.print(runs_table(summaries))
    else:  # piped: one run a line, tab-separated, never wrapped inside an id
        for line in runs_lines(summaries):
            click.echo(line)
    if page.next_cursor:
        click.echo(f"more: saga-worker runs --cursor {page.next_cursor}")


@click.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def report(run_id: str, as_json: bool) -> None:
    """Show a run from the journal: its steps and their compensation state."""
    settings = get_settings()
    with configured_journal(settings) as journal:
        run = journal.get_run(run_id)
        if run is None:
            fail(f"run {run_id!r} is not in the journal")
        steps = journal_steps(journal, run_id, settings.secret_keys())
        reading = run_readings(journal).get(run_id) if run.status.value == "running" else None
    summary = run_summary(run, reading)
    if as_json:
        dump({"run": summary, "steps": steps})
        return
    out.print(
        f"run [bold]{safe(run_id)}[/]: {safe(summary['status'])}, condemned: {'yes' if run.condemned else 'no'}, "
        f"unwind: {safe(run.unwind_state.value)}" + (f" ({safe(run.unwind_note)})" if run.unwind_note else "")
    )
    out.print(steps_table(run_id, steps))
