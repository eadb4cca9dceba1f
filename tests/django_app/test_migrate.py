"""`manage.py migrate` brings a Django-hosted journal to the newest schema (issue 50): the journal's
migrations are Alembic's, so a release that adds one adds no Django migration, and a journal made by
an older release (Django's migrations applied, its own schema behind) is upgraded by the next
`migrate`, which has no Django migration to apply."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from saga_worker.journal import migrate
from tests.services import PG_ADMIN_URL, require

PROJECT = Path(__file__).resolve().parent / "project"
OLDER = "0008"  # a revision an older release's journal stands at


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, pytest.mark.slow])])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of the project's: a SQLite file, or a PostgreSQL database of its own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/proj.db"
        return
    require("postgres")
    name = f"mig_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def manage(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("SAGA_", "DJANGO_", "PYTHONPATH"))}
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT,
        env={**kept, "PROJ_DATABASE_URL": plain},
        capture_output=True,
        text=True,
        timeout=300,
    )


def revision(url: str) -> str | None:
    engine = sa.create_engine(url)
    try:
        return migrate.current_revision(engine)
    finally:
        engine.dispose()


def test_migrate_upgrades_a_journal_an_older_release_left_behind_with_no_django_migration_to_apply(
    database: str,
) -> None:
    first = manage(database, "migrate", "--noinput")
    assert first.returncode == 0, first.stderr
    assert revision(database) == migrate.head_revision()
    # The journal as an older release left it: Django's migrations applied, its own schema behind.
    engine = sa.create_engine(database)
    migrate.downgrade(engine, OLDER)
    engine.dispose()
    assert revision(database) == OLDER
    again = manage(database, "migrate", "--noinput")
    assert again.returncode == 0, again.stderr
    assert "No migrations to apply." in again.stdout
    assert revision(database) == migrate.head_revision()
    # And a journal at its head is left as it is.
    third = manage(database, "migrate", "--noinput")
    assert third.returncode == 0, third.stderr
    assert revision(database) == migrate.head_revision()
