"""Redeliveries: how many times each saga task's message came back after the worker process running
it was lost, so that a message that kills every worker running it is answered after
``SAGA_MAX_DELIVERIES`` deliveries instead of being redelivered forever. Rows exist only for tasks
redelivered at least once, and are deleted when the task ends.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "saga_redeliveries",
        sa.Column("task_id", sa.String(255), primary_key=True),
        sa.Column("redeliveries", sa.Integer, nullable=False),
        sa.Column("first_at", sa.Double, nullable=False),
        sa.Column("last_at", sa.Double, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("saga_redeliveries")
