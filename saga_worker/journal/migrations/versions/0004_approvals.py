"""Approvals, the cross-run idempotency window and the audit trail (issue 13).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("saga_tool_records") as batch:
        batch.add_column(sa.Column("shared_id", sa.String(200)))
    with op.batch_alter_table("saga_unwinds") as batch:
        batch.add_column(sa.Column("actor", sa.String(200)))
        batch.add_column(sa.Column("reason", sa.Text))
        batch.add_column(sa.Column("via", sa.String(16)))
    op.create_table(
        "saga_compensation_gates",
        sa.Column("origin_run_id", sa.String(200), primary_key=True),
        sa.Column("suffix", sa.String(300), primary_key=True),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("via_run_id", sa.String(200), nullable=False),
        sa.Column("decided_at", sa.Double, nullable=False),
    )
    op.create_table(
        "saga_shared_actions",
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("generation", sa.Integer, primary_key=True),
        sa.Column("tool_name", sa.String(100), nullable=False),
        sa.Column("input", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("output", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="1"),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("expires_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_table(
        "saga_audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("at", sa.Double, nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("via", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("target", sa.String(300)),
        sa.Column("detail", sa.Text, nullable=False, server_default="{}"),
        sa.Column("event_key", sa.String(300), unique=True),
    )
    op.create_index("ix_saga_audit_run", "saga_audit", ["run_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_saga_audit_run", table_name="saga_audit")
    op.drop_table("saga_audit")
    op.drop_table("saga_shared_actions")
    op.drop_table("saga_compensation_gates")
    with op.batch_alter_table("saga_unwinds") as batch:
        batch.drop_column("via")
        batch.drop_column("reason")
        batch.drop_column("actor")
    with op.batch_alter_table("saga_tool_records") as batch:
        batch.drop_column("shared_id")
