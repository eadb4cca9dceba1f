"""saga-worker's commands in a Django project (issue 50): `saga-worker --django-settings proj.settings`
run from the project's folder, as `manage.py` is, and every command as `python manage.py saga …`, with
the same options and output, the settings taken from the project. The project (`project/`) is laid out
as `django-admin startproject proj` lays it out; its database, and so the journal, is SQLite or
PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from saga_worker import open_journal, run_durable
from saga_worker.contrib.demo import TOOLS, order_planner

PROJECT = Path(__file__).resolve().parent / "project"
SAGA_WORKER = Path(sys.executable).parent / "saga-worker"


def project_env(database_url: str) -> dict[str, str]:
    """The project's environment, its database holding one finished run, `dj-order-1`; nothing of
    saga-worker's or Django's set, and nothing on PYTHONPATH: only what `cd project && …` has."""
    with open_journal(database_url, migrate=True) as journal:
        run_durable("dj-order-1", journal=journal, tools=TOOLS, planner=order_planner())
    url = database_url.replace("postgresql+psycopg://", "postgresql://")
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("SAGA_", "DJANGO_", "PYTHONPATH"))}
    return {**kept, "PROJ_DATABASE_URL": url, "COLUMNS": "200"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.slow])])
def env(request: pytest.FixtureRequest) -> dict[str, str]:
    """The project on each database a journal shares between processes: SQLite, PostgreSQL (the
    latter in the main pass only: the other interpreters' quick pass keeps to SQLite)."""
    return project_env(
        str(request.getfixturevalue({"sqlite": "sqlite_url", "postgres": "pg_url"}[request.param]))
    )


@pytest.fixture
def sqlite_env(sqlite_url: str) -> dict[str, str]:
    """The project on SQLite, for what does not depend on the journal's database."""
    return project_env(sqlite_url)


def run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120)


def test_saga_worker_with_django_settings_runs_from_the_project_folder_as_manage_py_does(
    env: dict[str, str],
) -> None:
    listed = run(env, str(SAGA_WORKER), "--django-settings", "proj.settings", "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["run_id"] for r in json.loads(listed.stdout)] == ["dj-order-1"]


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run(env, sys.executable, "manage.py", *args)


def test_manage_py_saga_runs_every_command_with_the_cli_s_options_and_output(env: dict[str, str]) -> None:
    listed = manage(env, "saga", "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["run_id"] for r in json.loads(listed.stdout)] == ["dj-order-1"]
    # The same table the CLI prints.
    table = manage(env, "saga", "report", "dj-order-1")
    cli = run(env, str(SAGA_WORKER), "--django-settings", "proj.settings", "report", "dj-order-1")
    assert table.returncode == 0, table.stderr
    assert table.stdout == cli.stdout and "reserve_stock" in table.stdout
    # An action, the tools loaded from the project's SAGA_TOOLS, and its audit row.
    unwound = manage(env, "saga", "compensate", "dj-order-1", "--local", "--json", "--reason", "refund")
    assert unwound.returncode == 0, unwound.stderr
    assert json.loads(unwound.stdout)["condemned"] is True
    audit = manage(env, "saga", "audit", "dj-order-1", "--json")
    assert audit.returncode == 0, audit.stderr
    assert "refund" in [row["reason"] for row in json.loads(audit.stdout)]


def test_manage_py_saga_errors_are_the_cli_s_one_line_and_exit_code(sqlite_env: dict[str, str]) -> None:
    env = sqlite_env
    missing = manage(env, "saga", "report", "no-such-run")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("error: ") and len(missing.stderr.strip().splitlines()) == 1
    usage = manage(env, "saga", "runs", "--no-such-option")
    assert usage.returncode == 2 and "No such option '--no-such-option'" in usage.stderr
    assert "Usage: manage.py saga runs" in usage.stderr


def test_manage_py_help_lists_the_saga_commands_and_django_s_settings_option_is_honoured(
    sqlite_env: dict[str, str],
) -> None:
    env = sqlite_env
    helped = manage(env, "help", "saga")
    assert helped.returncode == 0, helped.stderr
    assert "Usage: manage.py saga" in helped.stdout
    assert all(name in helped.stdout for name in ("compensate", "report", "runs", "worker", "beat", "audit"))
    assert "saga" in manage(env, "help").stdout
    # Django's own --settings (taken before the command runs) is not handed to the CLI's options.
    settings = manage(env, "saga", "runs", "--json", "--settings", "proj.settings")
    assert settings.returncode == 0, settings.stderr
    assert [r["run_id"] for r in json.loads(settings.stdout)] == ["dj-order-1"]


CALL = """
import io, json, sys, django
from contextlib import redirect_stdout
django.setup()
from django.core.management import call_command
from django.core.management.base import CommandError
out = io.StringIO()
with redirect_stdout(out):
    call_command("saga", "runs", "--json")
try:
    call_command("saga", "report", "no-such-run")
except CommandError as exc:
    refused = [type(exc).__name__, exc.returncode]
print(json.dumps({"runs": json.loads(out.getvalue()), "refused": refused}))
"""


def test_call_command_saga_runs_a_command_and_raises_command_error_on_failure(
    sqlite_env: dict[str, str],
) -> None:
    called = run({**sqlite_env, "DJANGO_SETTINGS_MODULE": "proj.settings"}, sys.executable, "-c", CALL)
    assert called.returncode == 0, called.stderr
    out = json.loads(called.stdout.strip().splitlines()[-1])
    assert [r["run_id"] for r in out["runs"]] == ["dj-order-1"]
    assert out["refused"] == ["CommandError", 1]
