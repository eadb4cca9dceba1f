"""The Celery executor's bookkeeping: distributed unwinds and their per-step entries.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "saga_unwinds",
        sa.Column("unwind_id", sa.String(200), primary_key=True),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("dry_run", sa.Boolean, nullable=False),
        sa.Column("suffixes", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
    )
    op.create_index("ix_saga_unwinds_run", "saga_unwinds", ["run_id"])
    op.create_table(
        "saga_unwind_entries",
        sa.Column("unwind_id", sa.String(200), primary_key=True),
        sa.Column("position", sa.Integer, primary_key=True),
        sa.Column("entry", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("saga_unwind_entries")
    op.drop_index("ix_saga_unwinds_run", table_name="saga_unwinds")
    op.drop_table("saga_unwinds")
