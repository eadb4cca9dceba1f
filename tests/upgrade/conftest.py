"""The previous release, installed once per session (tests/upgrade/previous.py caches it by commit),
and journals of the tests' own on PostgreSQL, with no schema, so each side migrates what it is asked."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.services import PG_ADMIN_URL, require

from .previous import Release, previous_release


@pytest.fixture(scope="session")
def previous() -> Release:
    try:
        return previous_release()
    except (subprocess.SubprocessError, OSError) as exc:  # pip could not reach an index
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"could not install the previous release: {exc}")
        pytest.skip(f"could not install the previous release: {exc}")


@pytest.fixture(params=["sqlite", "postgres"])
def bare_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A journal URL with no schema yet: a SQLite file to be, or a PostgreSQL database of its own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/journal.db"
        return
    require("postgres")
    name = f"saga_upgrade_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    yield sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
