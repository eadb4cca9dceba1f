"""The Django admin's saga-worker pages (issue 50), as a project tests them: `manage.py test` (Django's
runner, SagaDiscoverRunner) and `pytest` (pytest-django: the project's pytest.ini and conftest.py)
in the test project run its admin tests (`project/orders/tests.py`:
Django's test client on the runs list, its filters and search, a run's page, each action, and users
without the permissions refused) and its in_transaction tool's (`project/orders/test_in_transaction.py`:
an ORM effect and its record committed or rolled back together, every path; and
`project/orders/test_unwind_in_transaction.py`: an unwind inside the transaction the journal joins
refused before anything is written), with the journal in the test database, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.services import PG_ADMIN_URL, require

PROJECT = Path(__file__).resolve().parent / "project"


RUNNERS = {
    "manage.py test": (["manage.py", "test", "orders", "--noinput"], ["Ran 25 tests", "\nOK"]),
    "pytest-django": (["-m", "pytest", "-q", "-p", "no:cacheprovider"], ["25 passed"]),
}


@pytest.mark.parametrize("runner", list(RUNNERS))
@pytest.mark.parametrize(
    "database", ["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.slow])]
)
def test_the_project_s_admin_tests_pass_under_django_s_runner_and_pytest_django(
    runner: str, database: str, tmp_path: Path
) -> None:
    if database == "sqlite":
        url = f"sqlite:///{tmp_path}/proj.db"
    else:
        require("postgres")
        # A name of its own: the runner creates test_<name> (and drops it), so sessions never share it.
        base = sa.engine.make_url(PG_ADMIN_URL).set(
            drivername="postgresql", database=f"p{uuid.uuid4().hex[:10]}"
        )
        url = base.render_as_string(hide_password=False)
    dropped = ("SAGA_", "DJANGO_", "PYTHONPATH", "PYTEST_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    argv, says = RUNNERS[runner]
    ran = subprocess.run(
        [sys.executable, *argv],
        cwd=PROJECT,
        env={**env, "PROJ_DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout[-5000:] + ran.stderr[-5000:]
    assert all(said in ran.stdout + ran.stderr for said in says), ran.stdout + ran.stderr
