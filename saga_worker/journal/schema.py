"""The journal's tables (SQLAlchemy Core). The database's schema is made by the Alembic migrations in
``migrations/``; this module must describe the same tables as the newest migration."""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()

runs = sa.Table(
    "saga_runs",
    metadata,
    sa.Column("run_id", sa.String(200), primary_key=True),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("prompt", sa.Text, nullable=False, server_default=""),
    sa.Column("text", sa.Text, nullable=False, server_default=""),
    sa.Column("error", sa.Text),
    # The tombstone: set once, never cleared. Its row is also the lock that orders it against claims.
    sa.Column("condemned_at", sa.Double),
    # Per-run counter behind the explicit execution order of tool records.
    sa.Column("next_seq", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("source_run_id", sa.String(200)),
    sa.Column("unwind_state", sa.String(16), nullable=False, server_default="none"),
    sa.Column("unwind_attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("unwind_next_at", sa.Double),
    sa.Column("unwind_note", sa.Text),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
    # Migration 0005: bumped by an outcome that lands after the tombstone (the unwind must look again).
    sa.Column("unwind_epoch", sa.Integer, nullable=False, server_default="0"),
    # Migration 0007: the span that started the run (W3C traceparent), when it was traced.
    sa.Column("traceparent", sa.String(64)),
    # Migration 0012: when retention pruned the run; its row stays as a stub, so its id never runs again.
    sa.Column("pruned_at", sa.Double),
)
# Migration 0003: the runs listing's keyset indexes (see that migration).
sa.Index("ix_saga_runs_page", runs.c.updated_at, runs.c.run_id)
sa.Index("ix_saga_runs_status_page", runs.c.status, runs.c.updated_at, runs.c.run_id)
sa.Index("ix_saga_runs_unwind_page", runs.c.unwind_state, runs.c.updated_at, runs.c.run_id)
sa.Index(
    "ix_saga_runs_condemned_page",
    runs.c.updated_at,
    runs.c.run_id,
    sqlite_where=runs.c.condemned_at.is_not(None),
    postgresql_where=runs.c.condemned_at.is_not(None),
)
# PostgreSQL also has ix_saga_runs_id_bytes on (run_id COLLATE "C"), for the id prefix search: an
# expression index on one dialect, which autogenerate cannot compare; only the migration knows it.
MIGRATION_ONLY_INDEXES = frozenset({"ix_saga_runs_id_bytes"})


def sweepable_clause() -> sa.ColumnElement[bool]:
    """The runs the sweeper looks for (condemned, their unwind not settled: ``common.UNSWEPT``'s
    complement, and any state this code does not know), as literal SQL so that the partial index and
    the sweeper's query match it word for word (migration 0015 has it frozen). ``!=`` terms, not an
    ``IN`` list: SQLite checks the condition on every update of a run's row, and checks an ``IN`` list
    by building a temporary table of its values."""
    return sa.text(  # type: ignore[return-value]
        "condemned_at IS NOT NULL AND unwind_state != 'none' AND unwind_state != 'complete' "
        "AND unwind_state != 'attention' AND unwind_state != 'awaiting'"
    )


# Migrations 0014 and 0015: the sweeper's index, only over the runs it looks for (a clean unwind's run enters
# it at the tombstone and leaves it at the end; a run never condemned never enters it).
sa.Index(
    "ix_saga_runs_sweep_due",
    runs.c.unwind_next_at,
    sqlite_where=sweepable_clause(),
    postgresql_where=sweepable_clause(),
)
# Migration 0012: the stubs a prune batch just made (their calls, decisions and audit are deleted by it).
sa.Index(
    "ix_saga_runs_pruned",
    runs.c.pruned_at,
    sqlite_where=runs.c.pruned_at.is_not(None),
    postgresql_where=runs.c.pruned_at.is_not(None),
)

decisions = sa.Table(
    "saga_decisions",
    metadata,
    sa.Column("run_id", sa.String(200), primary_key=True),
    sa.Column("step", sa.Integer, primary_key=True),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
)

records = sa.Table(
    "saga_tool_records",
    metadata,
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
    sa.Column("shared_id", sa.String(200)),  # migration 0004: a mirror's shared execution
    # Migration 0005: who executes the call (owner token) and until when, unless it renews (lease).
    sa.Column("exec_owner", sa.String(100)),
    sa.Column("exec_lease_expires_at", sa.Double),
    # Migration 0007: the span of the execute that settled it (W3C traceparent), when it was traced.
    sa.Column("exec_traceparent", sa.String(64)),
    # Migration 0010: the group of calls the run recorded as concurrent with this one (an opaque
    # token, written with the call's claim); None: a group of one. Unwound together with parallel=True.
    sa.Column("group", sa.String(64)),
)
sa.Index("ix_saga_tool_records_order", records.c.run_id, records.c.seq)


def forked_records_clause() -> sa.ColumnElement[bool]:
    """Records copied into a fork (their effect is another run's): the partial index's condition."""
    return sa.text("origin_run_id <> run_id")  # type: ignore[return-value]


# Migration 0012: which runs' effects live on in a fork (retention keeps such a run); few rows.
sa.Index(
    "ix_saga_tool_records_forked",
    records.c.origin_run_id,
    postgresql_where=forked_records_clause(),
    sqlite_where=forked_records_clause(),
)


def records_waiting_clause() -> sa.ColumnElement[bool]:
    """The records that may wait for a person (the inbox): the partial index's condition, as literal
    SQL so that the index and the query match it word for word."""
    return sa.text("status IN ('suspended', 'running')")  # type: ignore[return-value]


# Migration 0006: the inbox's read, across runs, oldest first; only the few waiting rows are indexed.
sa.Index(
    "ix_saga_tool_records_waiting",
    records.c.updated_at,
    postgresql_where=records_waiting_clause(),
    sqlite_where=records_waiting_clause(),
)

claims = sa.Table(
    "saga_compensations",
    metadata,
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
    # Migration 0009: the lease on a clock that cannot step, where the journal is SQLite
    # (journal/boot_clock.py): the boot whose monotonic clock ``lease_boot_expires_at`` is on, and
    # the attempt that wrote them. A claim taken since by a release that does not write them has a
    # higher ``attempts``: its wall-clock ``lease_expires_at`` decides (dialects.LeaseColumns).
    sa.Column("lease_boot_id", sa.String(64)),
    sa.Column("lease_boot_expires_at", sa.Double),
    sa.Column("lease_boot_attempt", sa.Integer),
    # Migration 0014: on SQLite clustered on the primary key (a claim is one b-tree's entry, not a row
    # and an index entry: an unwind's merged outcome and next claim change one page).
    sqlite_with_rowid=False,
)

# Migration 0002: the Celery executor's bookkeeping. One row per distributed unwind (its worklist,
# fixed when it began) and one per step outcome, keyed by position: a redelivered step task finds
# its outcome already written and goes straight on to the next step.
unwinds = sa.Table(
    "saga_unwinds",
    metadata,
    sa.Column("unwind_id", sa.String(200), primary_key=True),
    sa.Column("run_id", sa.String(200), nullable=False),
    sa.Column("dry_run", sa.Boolean, nullable=False),
    sa.Column("suffixes", sa.Text, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    # Migration 0004: who asked for the unwind, why, and through what (for its audit row).
    sa.Column("actor", sa.String(200)),
    sa.Column("reason", sa.Text),
    sa.Column("via", sa.String(16)),
    sa.Column("run_epoch", sa.Integer),  # migration 0005: the run's unwind epoch when it began
    # Migration 0013: a parallel unwind's groups and waves (``GroupPlan`` as JSON); NULL: sequential.
    sa.Column("group_plan", sa.Text),
)
sa.Index("ix_saga_unwinds_run", unwinds.c.run_id)

unwind_entries = sa.Table(
    "saga_unwind_entries",
    metadata,
    sa.Column("unwind_id", sa.String(200), primary_key=True),
    sa.Column("position", sa.Integer, primary_key=True),
    sa.Column("entry", sa.Text, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
)

# Migration 0008: saga tasks whose message came back after the worker process running it was lost
# (a pool child killed mid-hook, a worker killed), counted by task id so that a message that kills
# every worker running it ends after SAGA_MAX_DELIVERIES deliveries instead of coming back forever.
# A row exists only for a task redelivered at least once, and goes when the task ends.
redeliveries = sa.Table(
    "saga_redeliveries",
    metadata,
    sa.Column("task_id", sa.String(255), primary_key=True),
    sa.Column("redeliveries", sa.Integer, nullable=False),
    sa.Column("first_at", sa.Double, nullable=False),
    sa.Column("last_at", sa.Double, nullable=False),
)

# Migration 0004: approvals, the cross-run window, the audit trail.
# A person's decision on one approval-gated compensation; the primary key makes the first decision
# the only one (two approvers racing: one row, one audit entry).
gates = sa.Table(
    "saga_compensation_gates",
    metadata,
    sa.Column("origin_run_id", sa.String(200), primary_key=True),
    sa.Column("suffix", sa.String(300), primary_key=True),
    sa.Column("decision", sa.String(16), nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("reason", sa.Text, nullable=False, server_default=""),
    sa.Column("via_run_id", sa.String(200), nullable=False),
    sa.Column("decided_at", sa.Double, nullable=False),
)

# One execution of a cross-run tool per (key, generation): a new generation once the window is over.
shared = sa.Table(
    "saga_shared_actions",
    metadata,
    sa.Column("key", sa.String(200), primary_key=True),
    sa.Column("generation", sa.Integer, primary_key=True),
    sa.Column("tool_name", sa.String(100), nullable=False),
    sa.Column("input", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("output", sa.Text),
    sa.Column("error", sa.Text),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="1"),
    sa.Column("run_id", sa.String(200), nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
)

# The append-only audit trail, per run. ``event_key`` (unique when set) lets a redelivered task
# append the same event once.
audit = sa.Table(
    "saga_audit",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(200), nullable=False),
    sa.Column("at", sa.Double, nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    sa.Column("via", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text, nullable=False, server_default=""),
    sa.Column("target", sa.String(300)),
    sa.Column("detail", sa.Text, nullable=False, server_default="{}"),
    sa.Column("event_key", sa.String(300), unique=True),
)
sa.Index("ix_saga_audit_run", audit.c.run_id, audit.c.id)
