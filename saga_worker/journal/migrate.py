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


# Any fixed number: the PostgreSQL advisory lock that lets one process at a time migrate a database.
_MIGRATION_LOCK = 0x5A6A_0001


def _serialise(conn: sa.Connection) -> None:
    """Make concurrent migrations (several workers opening with migrate=True) take turns: the next one
    then reads the revision the first wrote and has nothing to do. SQLite's BEGIN IMMEDIATE does this
    already; PostgreSQL needs a transaction-scoped advisory lock."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_MIGRATION_LOCK)))


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    with engine.begin() as conn:
        _serialise(conn)
        command.upgrade(_config(conn), revision)


def downgrade(engine: sa.Engine, revision: str) -> None:
    with engine.begin() as conn:
        _serialise(conn)
        command.downgrade(_config(conn), revision)
