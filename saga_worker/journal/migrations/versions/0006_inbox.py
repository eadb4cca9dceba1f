"""The inbox's read across runs: a partial index on the tool records that may wait for a person.

``suspended`` calls and ``running`` ones (an execute whose outcome was never recorded) are few among
all records; the console's inbox and ``saga-worker inbox`` read them oldest first, on this index.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

WAITING = "status IN ('suspended', 'running')"


def upgrade() -> None:
    op.create_index(
        "ix_saga_tool_records_waiting",
        "saga_tool_records",
        ["updated_at"],
        postgresql_where=sa.text(WAITING),
        sqlite_where=sa.text(WAITING),
    )


def downgrade() -> None:
    op.drop_index("ix_saga_tool_records_waiting", table_name="saga_tool_records")
