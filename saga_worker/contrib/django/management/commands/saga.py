"""``python manage.py saga COMMAND …``: every ``saga-worker`` command, run by the same click CLI (the
same options, tables and ``--json``), with the project's settings as any ``manage.py`` command has
them. ``call_command("saga", "runs", "--json")`` runs one from code, its failure a ``CommandError``."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from typing import Any

import click
from django.core.management.base import BaseCommand, CommandError, CommandParser

from .....cli import main

# Taken by manage.py itself before the command runs (ManagementUtility), so not the CLI's to parse.
_DJANGO_OPTIONS = ("--settings", "--pythonpath")


def cli_args(argv: list[str]) -> list[str]:
    """``argv`` after ``manage.py saga``, without Django's own ``--settings`` / ``--pythonpath``."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _DJANGO_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{o}=" for o in _DJANGO_OPTIONS)):
            kept.append(arg)
    return kept


class Command(BaseCommand):  # type: ignore[misc]
    help = "saga-worker's commands (runs, report, compensate, worker, beat, …): manage.py saga --help"
    requires_system_checks: list[str] = []  # a read of the journal needs no checks; `worker` runs its own

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER, help="a saga-worker command and its options")

    def run_from_argv(self, argv: list[str]) -> None:
        # click parses every option (Django's parser would refuse the commands' own); it prints the
        # CLI's one-line errors and usage, and exits with the CLI's codes.
        main.main(args=cli_args(argv[2:]), prog_name=f"{os.path.basename(argv[0])} {argv[1]}")

    def print_help(self, prog_name: str, subcommand: str) -> None:
        main.main(args=["--help"], prog_name=f"{prog_name} {subcommand}", standalone_mode=False)

    def handle(self, *args: str, **options: Any) -> None:
        """``call_command``: the output to the command's ``stdout``; a failure is a ``CommandError``
        carrying the CLI's one-line error and exit code."""
        errors = io.StringIO()
        out = getattr(self.stdout, "_out", sys.stdout)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(errors):
                code = main.main(args=list(args), prog_name="manage.py saga", standalone_mode=False)
        except SystemExit as exc:  # the CLI's one-line error (cli.common.fail)
            code = exc.code if isinstance(exc.code, int) else 1
        except click.ClickException as exc:  # a usage error, which the CLI prints with its usage
            raise CommandError(exc.format_message(), returncode=exc.exit_code) from exc
        finally:
            self.stderr.write(errors.getvalue(), ending="")
        if isinstance(code, int) and code != 0:
            lines = errors.getvalue().strip().splitlines() or [f"saga {' '.join(args)} exited with {code}"]
            raise CommandError(lines[-1].removeprefix("error: "), returncode=code)
