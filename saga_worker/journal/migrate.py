"""Schema migrations (Alembic), run programmatically: `saga-worker db upgrade`, or on open for SQLite."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

MIGRATIONS = Path(__file__).with_name("migrations")
VERSION_TABLE = "saga_alembic_version"


def _config(connection: sa.Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: sa.Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    with engine.begin() as conn:
        command.upgrade(_config(conn), revision)


def downgrade(engine: sa.Engine, revision: str) -> None:
    with engine.begin() as conn:
        command.downgrade(_config(conn), revision)
