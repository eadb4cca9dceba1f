"""The sweeper's partial index states the settled states as ``!=`` terms, not an ``IN`` list
(bench/history/2026-12-07-issue-45.md, "In-process CPU").

SQLite checks a partial index's condition on every update of a row it could cover, for the old and
the new row; an ``IN`` list is checked by building a temporary table of its values each time. The
tombstone and an unwind's end each update the run's row: four temporary tables per unwind for this
index alone (about 2% of an in-process unwind's instructions, `python -m bench.instructions`). The
same condition as ``!=`` terms is checked in place. The sweeper's query states the new words
(``schema.sweepable_clause``) so that SQLite proves the index usable; PostgreSQL proves either form.

The index is only read by this release's sweeper: the previous release (0.1.0) neither made nor reads
it, so it is dropped and made again under the same name in the migration's transaction (on
PostgreSQL the build lets the table be read and holds writers for its length: the index holds only
condemned runs whose unwind is not settled, a few rows).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# Frozen here (the schema module's ``sweepable_clause`` must say the same, word for word).
SWEEPABLE = (
    "condemned_at IS NOT NULL AND unwind_state != 'none' AND unwind_state != 'complete' "
    "AND unwind_state != 'attention' AND unwind_state != 'awaiting'"
)
SWEEPABLE_0014 = (
    "condemned_at IS NOT NULL AND unwind_state NOT IN ('none', 'complete', 'attention', 'awaiting')"
)


def _sweep_index(condition: str) -> None:
    op.drop_index("ix_saga_runs_sweep_due", table_name="saga_runs")
    where = sa.text(condition)
    op.create_index(
        "ix_saga_runs_sweep_due", "saga_runs", ["unwind_next_at"], sqlite_where=where, postgresql_where=where
    )


def upgrade() -> None:
    _sweep_index(SWEEPABLE)


def downgrade() -> None:
    _sweep_index(SWEEPABLE_0014)
