"""What every command shares: the one-line error, the group that turns any exception into it, and the
journal at the configured URL."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from ..core.display import neutral
from ..core.redact import redact_text
from ..errors import SagaError
from ..journal import Journal, open_journal
from ..settings import SagaSettings


def fail(message: str) -> NoReturn:
    # One line, never wrapped, whatever the terminal's width: scripts grep it. Never a password.
    line = neutral(" ".join(redact_text(message).split()))
    click.echo(click.style("error:", fg="red", bold=True) + " " + line, err=True)
    sys.exit(1)


class OneLineErrorGroup(click.Group):
    """Turns any error into one clear line and a non-zero exit (click's own usage errors stay as they are)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except SagaError as exc:
            fail(str(exc))
        except Exception as exc:  # a broker or database that cannot be reached, a bad URL
            fail(f"{type(exc).__name__}: {exc}")


def configured_journal(settings: SagaSettings, *, create: bool = False) -> Journal:
    """The journal at the configured URL. Only the demo (which writes a sample run) creates one: every
    other command reads or acts on a journal that exists, and a mistyped path is an error."""
    return open_journal(settings.resolved_journal_url(), create=create)


def log_formats(log_format: str | None) -> None:
    """``--log-format``: said to the processes this command starts (a worker, beat) through
    ``SAGA_LOG_FORMAT``; in JSON, this process's own records go to stderr as JSON lines too."""
    import logging
    import os

    from ..observing.logjson import JsonFormatter
    from ..settings import get_settings

    if log_format is not None:
        os.environ["SAGA_LOG_FORMAT"] = log_format
        get_settings.cache_clear()
    if get_settings().log_format != "json":
        return
    root = logging.getLogger()
    if not any(isinstance(h.formatter, JsonFormatter) for h in root.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(JsonFormatter())
        root.addHandler(handler)
