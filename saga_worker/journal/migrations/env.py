"""Alembic environment: migrations run on the connection saga-worker hands over (see migrate.py)."""

from __future__ import annotations

from alembic import context

from saga_worker.journal.migrate import include_object
from saga_worker.journal.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only through saga_worker.journal.migrate
    raise RuntimeError("run saga-worker migrations through `saga-worker db upgrade`")

context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table="saga_alembic_version",
    include_object=include_object,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
