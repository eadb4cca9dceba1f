"""Execute leases on tool records, and the unwind epoch that a late outcome bumps.

A ``running`` record carries the token of the process executing it and a lease that process renews
(``exec_owner``, ``exec_lease_expires_at``): on PostgreSQL the lease, not a lock on a connection
that a cut could drop, tells an unwinder whether the call may still be executing. An outcome that
arrives after its run was condemned reopens the run's unwind and bumps ``unwind_epoch``; an unwind
marks itself complete only if the epoch it read with its worklist is still the run's
(``saga_unwinds.run_epoch`` keeps it for the distributed executor's last step).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("saga_tool_records", sa.Column("exec_owner", sa.String(100)))
    op.add_column("saga_tool_records", sa.Column("exec_lease_expires_at", sa.Double))
    op.add_column("saga_runs", sa.Column("unwind_epoch", sa.Integer, nullable=False, server_default="0"))
    op.add_column("saga_unwinds", sa.Column("run_epoch", sa.Integer))


def downgrade() -> None:
    with op.batch_alter_table("saga_unwinds") as batch:
        batch.drop_column("run_epoch")
    with op.batch_alter_table("saga_runs") as batch:
        batch.drop_column("unwind_epoch")
    with op.batch_alter_table("saga_tool_records") as batch:
        batch.drop_column("exec_lease_expires_at")
        batch.drop_column("exec_owner")
