"""Call groups: the calls a run recorded as concurrent (docs/reference/compensation.md, "Groups").
A nullable column only: a row without it (every row written before, and rows the previous release
writes during a rolling upgrade) is a group of one; the previous release does not select it.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("saga_tool_records", sa.Column("group", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("saga_tool_records") as batch:
        batch.drop_column("group")
