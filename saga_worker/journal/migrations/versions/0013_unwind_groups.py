"""A parallel unwind's groups on workers: how its worklist is cut into groups and waves
(docs/reference/compensation.md, "Groups"). A nullable column only: a row without it (every unwind
written before, and unwinds the previous release writes during a rolling upgrade) is sequential; the
previous release does not select it.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("saga_unwinds", sa.Column("group_plan", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("saga_unwinds") as batch:
        batch.drop_column("group_plan")
