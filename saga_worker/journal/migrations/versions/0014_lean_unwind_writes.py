"""Fewer pages written per unwind: the claims table clustered on its primary key (SQLite), and the
sweeper's index only over the runs it looks for (docs/guides/upgrading.md; bench/README.md, "WAL frames").

- **saga_compensations WITHOUT ROWID (SQLite only).** A rowid table keeps each claim twice: its row,
  keyed by a hidden rowid, and the primary key's index ``(origin_run_id, suffix)`` pointing at it, so
  a claim's insert writes two pages and a read of one claim descends two b-trees. Clustered on the
  primary key, the row is the key's entry: an unwind's merged outcome and next claim (one run's
  neighbouring rows) change one page. SQLite cannot change this in place, so the table is rebuilt in
  the migration's transaction: made anew under another name with the same columns, types, defaults
  and primary key, the rows copied, the old table dropped and the new one renamed to
  ``saga_compensations``. Every column and name stays, so the previous release reads and writes it
  as before (no statement of it reads a rowid); a process that holds the journal open re-prepares its
  statements on the new schema by itself (SQLite's schema cookie). The copy holds the database's
  write lock for its length, in the migration's one transaction: 0.35 s for 10^5 claims, 4.7 s for
  10^6 on the bench's 2-core machine under load (writers wait, within their 30 s busy timeout; readers
  read the old table until it commits). On PostgreSQL nothing changes (tables there are heaps, the
  key an index).
- **The sweeper's index partial**: ``ix_saga_runs_sweep_due`` replaces ``ix_saga_runs_unwind_due``.
  The sweeper's read (``runs_to_sweep``) asks for condemned runs whose unwind is not settled, by
  ``unwind_next_at``. The old index, on ``(unwind_state, unwind_next_at)`` of every run, served no
  query but a count the unwind-state listing index serves as well (the sweeper's read scanned the
  condemned runs' listing index, every condemned run, then sorted them), and a tombstone and an
  unwind's end each moved its entry across it (``none`` to ``pending`` to ``complete``). The new one
  holds only the runs the sweeper looks for, under the very condition its query states
  (``schema.sweepable_clause``, as literal SQL on both sides): a run enters it at its tombstone and
  leaves it when its unwind settles; a run never condemned never enters it. The previous release's
  sweeper query (the same states, as bound values) reads what it read before on SQLite (the
  condemned runs' index), and the new index on PostgreSQL, which proves the condition from them.
  Built before the old one is dropped: on PostgreSQL the build lets the table be read (writers wait;
  0.11 s at 500,000 runs), and the drop's exclusive lock lasts only to the commit.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# Frozen here (the schema module's ``sweepable_clause`` must say the same, word for word).
SWEEPABLE = "condemned_at IS NOT NULL AND unwind_state NOT IN ('none', 'complete', 'attention', 'awaiting')"
CLAIM_COLUMNS = (
    "origin_run_id, suffix, status, owner, lease_expires_at, attempts, idempotency_key, via_run_id, "
    "error, started_at, finished_at, lease_boot_id, lease_boot_expires_at, lease_boot_attempt"
)


def _claims(name: str, *, clustered: bool) -> None:
    op.create_table(
        name,
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
        sa.Column("lease_boot_id", sa.String(64)),
        sa.Column("lease_boot_expires_at", sa.Double),
        sa.Column("lease_boot_attempt", sa.Integer),
        sqlite_with_rowid=not clustered,
    )


def _rebuild_claims(*, clustered: bool) -> None:
    """SQLite: saga_compensations made anew (clustered on its key or not), its rows kept."""
    if op.get_bind().dialect.name != "sqlite":
        return
    _claims("saga_compensations_0014", clustered=clustered)
    op.execute(
        f"INSERT INTO saga_compensations_0014 ({CLAIM_COLUMNS}) SELECT {CLAIM_COLUMNS} FROM saga_compensations"
    )
    op.execute("DROP TABLE saga_compensations")
    op.execute("ALTER TABLE saga_compensations_0014 RENAME TO saga_compensations")


def upgrade() -> None:
    _rebuild_claims(clustered=True)
    # The new index first, under a name of its own, then the old one dropped (see above).
    sweepable = sa.text(SWEEPABLE)
    op.create_index(
        "ix_saga_runs_sweep_due",
        "saga_runs",
        ["unwind_next_at"],
        sqlite_where=sweepable,
        postgresql_where=sweepable,
    )
    op.drop_index("ix_saga_runs_unwind_due", table_name="saga_runs")


def downgrade() -> None:
    op.create_index("ix_saga_runs_unwind_due", "saga_runs", ["unwind_state", "unwind_next_at"])
    op.drop_index("ix_saga_runs_sweep_due", table_name="saga_runs")
    _rebuild_claims(clustered=False)
