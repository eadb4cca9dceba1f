"""``status``: the fleet's health, as the console's header shows it (workers, queue depth, beat)."""

from __future__ import annotations

import sys

import click

from ..settings import get_settings
from .render import ago, dump, when

# Exit code when beat is overdue, so a cron job or a probe can page on it.
BEAT_OVERDUE_EXIT = 4


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(as_json: bool) -> None:
    """The fleet: which workers consume the saga queue, how many messages wait in it, and when beat
    last swept (overdue after three sweep intervals: exit code 4)."""
    from ..celery import compensate_run
    from ..celery.health import fleet_health
    from ..celery.sending import celery_workers

    settings = get_settings()
    found = fleet_health(compensate_run.app, settings, celery_workers(compensate_run, settings.queue))
    beat = found["beat"]
    if as_json:
        dump(found)
    else:
        workers = found["workers"]
        if workers is None:
            click.echo(f"workers on queue {found['queue']}: unknown (this broker has no broadcast)")
        else:
            click.echo(f"workers on queue {found['queue']}: {len(workers)}")
            for name in workers:
                click.echo(f"    {name}")
        depth = found["queue_depth"]
        click.echo(f"queue depth: {'unknown' if depth is None else depth}")
        if beat["last_sweep_at"] is None:
            swept = "never (no sweep recorded)"
        else:
            swept = f"{when(beat['last_sweep_at'])} ({ago(beat['last_sweep_age_s'])} ago)"
        click.echo(f"beat last swept: {swept}; sweep interval {beat['sweep_interval_s']:g} s")
        if beat["overdue"]:
            click.echo(
                f"beat is OVERDUE (more than {beat['overdue_after_s']:g} s): nothing re-drives interrupted "
                "unwinds until `saga-worker beat` (or a worker with --beat) runs"
            )
    if beat["overdue"]:
        sys.exit(BEAT_OVERDUE_EXIT)
