"""The journal: runs (with the tombstone), planner decisions, tool records, compensation claims.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "saga_runs",
        sa.Column("run_id", sa.String(200), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("prompt", sa.Text, nullable=False, server_default=""),
        sa.Column("text", sa.Text, nullable=False, server_default=""),
        sa.Column("error", sa.Text),
        sa.Column("condemned_at", sa.Double),
        sa.Column("next_seq", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("source_run_id", sa.String(200)),
        sa.Column("unwind_state", sa.String(16), nullable=False, server_default="none"),
        sa.Column("unwind_attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("unwind_next_at", sa.Double),
        sa.Column("unwind_note", sa.Text),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_index("ix_saga_runs_updated", "saga_runs", ["updated_at"])
    op.create_index("ix_saga_runs_unwind_due", "saga_runs", ["unwind_state", "unwind_next_at"])
    op.create_table(
        "saga_decisions",
        sa.Column("run_id", sa.String(200), primary_key=True),
        sa.Column("step", sa.Integer, primary_key=True),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
    )
    op.create_table(
        "saga_tool_records",
        sa.Column("run_id", sa.String(200), primary_key=True),
        sa.Column("suffix", sa.String(300), primary_key=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("tool_call_id", sa.String(200), nullable=False),
        sa.Column("tool_name", sa.String(100), nullable=False),
        sa.Column("mode", sa.String(8), nullable=False),
        sa.Column("input", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("output", sa.Text),
        sa.Column("error", sa.Text),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="1"),
        sa.Column("origin_run_id", sa.String(200), nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_index("ix_saga_tool_records_order", "saga_tool_records", ["run_id", "seq"])
    op.create_table(
        "saga_compensations",
        sa.Column("origin_run_id", sa.String(200), primary_key=True),
        sa.Column("suffix", sa.String(300), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("lease_expires_at", sa.Double, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("idempotency_key", sa.String(600), nullable=False),
        sa.Column("via_run_id", sa.String(200), nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("finished_at", sa.Double),
    )


def downgrade() -> None:
    op.drop_table("saga_compensations")
    op.drop_index("ix_saga_tool_records_order", table_name="saga_tool_records")
    op.drop_table("saga_tool_records")
    op.drop_table("saga_decisions")
    op.drop_index("ix_saga_runs_unwind_due", table_name="saga_runs")
    op.drop_index("ix_saga_runs_updated", table_name="saga_runs")
    op.drop_table("saga_runs")
