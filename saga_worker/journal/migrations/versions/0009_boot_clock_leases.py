"""Compensation leases on a clock that cannot step: on SQLite a claim's lease also stores its
deadline on the boot's monotonic clock, the boot's id and the attempt that wrote them
(journal/boot_clock.py). Columns are only added, all nullable: rows written before, and rows written
by the previous release during a rolling upgrade (which still reads and writes ``lease_expires_at``
alone), are judged by the wall-clock deadline as before.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("saga_compensations", sa.Column("lease_boot_id", sa.String(64)))
    op.add_column("saga_compensations", sa.Column("lease_boot_expires_at", sa.Double))
    op.add_column("saga_compensations", sa.Column("lease_boot_attempt", sa.Integer))


def downgrade() -> None:
    with op.batch_alter_table("saga_compensations") as batch:
        batch.drop_column("lease_boot_attempt")
        batch.drop_column("lease_boot_expires_at")
        batch.drop_column("lease_boot_id")
