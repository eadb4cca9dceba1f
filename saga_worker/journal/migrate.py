"""Schema migrations (Alembic), run programmatically: `saga-worker db upgrade`, or on open for SQLite."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from .dialects import policy_for

MIGRATIONS = Path(__file__).with_name("migrations")
VERSION_TABLE = "saga_alembic_version"


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """What autogenerate compares: everything but the indexes only a migration knows (see schema)."""
    from .schema import MIGRATION_ONLY_INDEXES

    return not (type_ == "index" and name in MIGRATION_ONLY_INDEXES)


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


def _serialise(conn: sa.Connection) -> None:
    """Make concurrent migrations (several workers opening with migrate=True) take turns."""
    policy_for(conn.dialect.name).serialise_migrations(conn)


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    with engine.begin() as conn:
        _serialise(conn)
        command.upgrade(_config(conn), revision)


def downgrade(engine: sa.Engine, revision: str) -> None:
    with engine.begin() as conn:
        _serialise(conn)
        command.downgrade(_config(conn), revision)
