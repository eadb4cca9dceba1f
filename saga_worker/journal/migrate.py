"""Schema migrations (Alembic), run programmatically: `saga-worker db upgrade`, or on open for SQLite."""

from __future__ import annotations

import functools
import logging

# Alembic's plugin set-up lines ("setup plugin alembic.autogenerate...", 7 of them) are logged at INFO
# when alembic is first imported, in each Celery pool child's first task: noise, always. Before the
# import below, which is when they are logged.
logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)

from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402

import sqlalchemy as sa  # noqa: E402
from alembic import command  # noqa: E402
from alembic.config import Config  # noqa: E402
from alembic.runtime.migration import MigrationContext  # noqa: E402
from alembic.script import ScriptDirectory  # noqa: E402

from .dialects import policy_for  # noqa: E402

MIGRATIONS = Path(__file__).with_name("migrations")

_CONTEXT_LOG = logging.getLogger("alembic.runtime.migration")


@contextmanager
def _quiet_context() -> Iterator[None]:
    """Reading the revision on open logs "Context impl ..." and "Will assume ... DDL" at INFO: said
    once per process and journal, they tell nothing. An upgrade keeps them (with "Running upgrade")."""
    before = _CONTEXT_LOG.level
    _CONTEXT_LOG.setLevel(max(before, logging.WARNING))
    try:
        yield
    finally:
        _CONTEXT_LOG.setLevel(before)


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


@functools.cache
def head_revision() -> str:
    """The newest revision among the migrations this package ships (read once per process)."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


@functools.cache
def known_revisions() -> frozenset[str]:
    """Every revision this package ships."""
    return frozenset(s.revision for s in ScriptDirectory.from_config(_config()).walk_revisions())


def from_a_later_release(revision: str | None) -> bool:
    """Is ``revision`` one this package does not ship: a later release's migration, run during a
    rolling upgrade while this release's workers still serve (docs/guides/upgrading.md)? A later
    release's expand migration only adds, so this release still reads and writes the journal; its
    contract migration runs only once no worker of this release is left."""
    return revision is not None and revision not in known_revisions()


def current_revision(engine: sa.Engine) -> str | None:
    with _quiet_context(), engine.connect() as conn:
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
