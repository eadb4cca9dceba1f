"""Trace context (issue 27): the span that started a run, and the span of the execute that settled
each tool record, as W3C ``traceparent`` strings. Both nullable: a journal written without tracing
(or before this revision) has none, and nothing reads them but the tracing of later spans, which
link to them (a compensate span to the execute it undoes, a run's later spans to its start).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("saga_runs", sa.Column("traceparent", sa.String(64)))
    op.add_column("saga_tool_records", sa.Column("exec_traceparent", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("saga_tool_records") as batch:
        batch.drop_column("exec_traceparent")
    with op.batch_alter_table("saga_runs") as batch:
        batch.drop_column("traceparent")
