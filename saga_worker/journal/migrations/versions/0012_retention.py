"""Retention: a pruned run keeps its row as a stub (``pruned_at``), so its id never runs again.

Additive only: one nullable column and two partial indexes. The previous release reads a stub as the
finished or failed run it was (its status and tombstone stay), so it neither re-executes nor unwinds
it: an ended run takes no new call, a condemned one none at all.

Revision ID: 0012
Revises: 0010
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("saga_runs", sa.Column("pruned_at", sa.Double))
    pruned = sa.text("pruned_at IS NOT NULL")
    op.create_index(
        "ix_saga_runs_pruned", "saga_runs", ["pruned_at"], sqlite_where=pruned, postgresql_where=pruned
    )
    forked = sa.text("origin_run_id <> run_id")
    op.create_index(
        "ix_saga_tool_records_forked",
        "saga_tool_records",
        ["origin_run_id"],
        sqlite_where=forked,
        postgresql_where=forked,
    )


def downgrade() -> None:
    op.drop_index("ix_saga_tool_records_forked", table_name="saga_tool_records")
    op.drop_index("ix_saga_runs_pruned", table_name="saga_runs")
    with op.batch_alter_table("saga_runs") as batch:
        batch.drop_column("pruned_at")
