"""The runs listing (the console): an index per filter, each ending in the keyset columns.

A page of runs is ``ORDER BY updated_at DESC, run_id DESC`` after the previous page's last row, so
every filter needs an index that leads with it and continues with ``(updated_at, run_id)``: then a
page reads its own rows only, on 10^6 runs as on ten. ``ix_saga_runs_page`` supersedes
``ix_saga_runs_updated`` (its prefix). The run-id prefix search reads a range of ids; PostgreSQL
compares them bytewise there (``COLLATE "C"``), which needs an index of its own.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_saga_runs_updated", table_name="saga_runs")
    op.create_index("ix_saga_runs_page", "saga_runs", ["updated_at", "run_id"])
    op.create_index("ix_saga_runs_status_page", "saga_runs", ["status", "updated_at", "run_id"])
    op.create_index("ix_saga_runs_unwind_page", "saga_runs", ["unwind_state", "updated_at", "run_id"])
    op.create_index(
        "ix_saga_runs_condemned_page",
        "saga_runs",
        ["updated_at", "run_id"],
        sqlite_where=sa.text("condemned_at IS NOT NULL"),
        postgresql_where=sa.text("condemned_at IS NOT NULL"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute('CREATE INDEX ix_saga_runs_id_bytes ON saga_runs (run_id COLLATE "C")')


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX ix_saga_runs_id_bytes")
    op.drop_index("ix_saga_runs_condemned_page", table_name="saga_runs")
    op.drop_index("ix_saga_runs_unwind_page", table_name="saga_runs")
    op.drop_index("ix_saga_runs_status_page", table_name="saga_runs")
    op.drop_index("ix_saga_runs_page", table_name="saga_runs")
    op.create_index("ix_saga_runs_updated", "saga_runs", ["updated_at"])
