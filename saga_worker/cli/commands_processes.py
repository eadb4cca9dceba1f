"""Long-running processes and the schema: ``worker``, ``beat`` and ``db upgrade``."""

from __future__ import annotations

import os
import sys

import click

from ..errors import ToolsNotConfiguredError
from ..journal import open_journal
from ..settings import get_settings
from .processes import celery_argv, prepare_metrics_folder, with_default_loglevel
from .render import out


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option(
    "--beat/--no-beat",
    "with_beat",
    default=None,
    help="Run the sweeper's beat inside the worker (default: on for the embedded setup).",
)
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def worker(with_beat: bool | None, celery_args: tuple[str, ...]) -> None:
    """Start a Celery worker (extra arguments go to celery worker); it needs SAGA_TOOLS."""
    settings = get_settings()
    if settings.tools is None:
        raise ToolsNotConfiguredError("saga-worker worker")
    extra = with_default_loglevel(celery_args)
    if (
        (settings.embedded if with_beat is None else with_beat)
        and "-B" not in extra
        and "--beat" not in extra
    ):
        extra.append("-B")
    prepare_metrics_folder(settings)
    os.execv(sys.executable, celery_argv("worker", extra))


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def beat(celery_args: tuple[str, ...]) -> None:
    """Start Celery beat for the sweeper (saga.retry_uncertain); RedBeat keeps it to one when Redis is set."""
    os.execv(sys.executable, celery_argv("beat", with_default_loglevel(celery_args)))


@click.group()
def db() -> None:
    """The journal's schema."""


@db.command()
def upgrade() -> None:
    """Migrate the journal at SAGA_JOURNAL_URL to the newest schema (Alembic)."""
    url = get_settings().resolved_journal_url()
    from ..journal import migrate

    open_journal(url, migrate=True).close()
    out.print(f"journal schema at revision {migrate.head_revision()}")
