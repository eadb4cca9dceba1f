"""``saga-worker``: run the demo, workers and beat; unwind a run; read the journal (docs/cli/index.md).

Every listing and report prints as a table for people and as JSON with ``--json`` for programs.
Errors print one line and exit non-zero. One module per area of commands (``commands_*.py``); how they
print is ``render.py``, how they start and stop Celery processes is ``processes.py``.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import click

from .commands_approvals import approve, approve_compensation, audit, deny, deny_compensation
from .commands_console import serve, token
from .commands_demo import demo
from .commands_inbox import inbox_command
from .commands_journal import report, runs
from .commands_processes import beat, db, worker
from .commands_retention import prune_command
from .commands_status import status
from .commands_unwind import compensate, redrive, revoke
from .common import OneLineErrorGroup, fail, log_formats
from .processes import embedded_worker, stop_process_group
from .render import report_table, steps_table

__all__ = ["embedded_worker", "fail", "main", "report_table", "steps_table", "stop_process_group"]


@click.group(cls=OneLineErrorGroup)
@click.version_option(package_name="saga-worker")
@click.option(
    "--django-settings",
    default=None,
    metavar="MODULE",
    help="Set Django up with this settings module first (default: DJANGO_SETTINGS_MODULE, when set); "
    "SAGA_* then come from Django's settings (saga_worker.contrib.django).",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default=None,
    help="How log records are written: text, or one JSON object a line with the current span's "
    "trace_id and span_id (default: SAGA_LOG_FORMAT, else text). A worker or beat started here inherits it.",
)
def main(django_settings: str | None, log_format: str | None) -> None:
    """saga-worker: condemn a run first, then compensate its steps in reverse, and report every step."""
    # The project's own modules (proj.settings, shop.tools) import from the folder the command is run
    # in, as under manage.py and `celery -A proj`; last on the path, so it shadows nothing installed.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    # Before any command reads settings or loads tools: tools that import models need the apps. With
    # only DJANGO_SETTINGS_MODULE (no flag), Django is set up where it is installed and ignored where
    # it is not; --django-settings without Django is an error.
    if django_settings or (os.environ.get("DJANGO_SETTINGS_MODULE") and importlib.util.find_spec("django")):
        from ..contrib import django as contrib_django

        contrib_django.setup(django_settings)
    log_formats(log_format)


for _command in (
    runs,
    inbox_command,
    status,
    report,
    audit,
    compensate,
    redrive,
    revoke,
    approve,
    deny,
    approve_compensation,
    deny_compensation,
    serve,
    token,
    worker,
    beat,
    db,
    demo,
):
    main.add_command(_command)
db.add_command(prune_command)
