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
from saga_worker.demo import TOOLS, order_planner

PROJECT = Path(__file__).resolve().parent / "project"
SAGA_WORKER = Path(sys.executable).parent / "saga-worker"


@pytest.fixture
def env(shared_journal_url: str) -> dict[str, str]:
    """The project's environment, its database holding one finished run, `dj-order-1`; nothing of
    saga-worker's or Django's set, and nothing on PYTHONPATH: only what `cd project && …` has."""
    with open_journal(shared_journal_url, migrate=True) as journal:
        run_durable("dj-order-1", journal=journal, tools=TOOLS, planner=order_planner())
    url = shared_journal_url.replace("postgresql+psycopg://", "postgresql://")
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("SAGA_", "DJANGO_", "PYTHONPATH"))}
    return {**kept, "PROJ_DATABASE_URL": url, "COLUMNS": "200"}


def run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120)


def test_saga_worker_with_django_settings_runs_from_the_project_folder_as_manage_py_does(
    env: dict[str, str],
) -> None:
    listed = run(env, str(SAGA_WORKER), "--django-settings", "proj.settings", "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["run_id"] for r in json.loads(listed.stdout)] == ["dj-order-1"]
