"""Every fixed statement of the SQL journal, written once in SQLAlchemy Core and prepared per dialect.

``Statements`` builds them by area, one ``_build_<area>`` method each (runs, the tombstone and the
gate, sweeps, listings, forks, decisions, tool records, claims, compensation gates, the audit trail,
shared executions, unwinds): a new statement goes into its area's builder, a new area gets a builder
of its own. What differs between SQLite and PostgreSQL is the dialect policy's (``dialects.py``),
never a branch here.

The bound parameters the areas share, and their names, are in ``sql_parts/common.py``; an area
moved into a part of its own (``sql_parts/``) keeps its statements there, beside its methods.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from .dialects import policy_for
from .driver import Prepared
from .records import RecordStatus, RunStatus, UnwindState
from .schema import (
    decisions,
    records,
    runs,
)
from .sql_parts.audit import AuditStatements
from .sql_parts.claims import ClaimStatements
from .sql_parts.common import (
    ENDED,
    MAX_ROWS,
    NEW_RUN,
    NOT_ENDED,
    NOW,
    RUN,
    WAITING,
    StatementsBase,
    b,
)
from .sql_parts.shared import SharedStatements
from .sql_parts.sweeps import SweepStatements
from .sql_parts.unwinds import UnwindStatements


class Statements(
    AuditStatements, ClaimStatements, SharedStatements, SweepStatements, UnwindStatements, StatementsBase
):
    """The prepared statements of one dialect, as attributes named for what they do."""

    def __init__(self, dialect: sa.Dialect) -> None:
        super().__init__(dialect)
        self._build_runs()
        self._build_tombstone_and_its_gate()
        self._build_sweeps()
        self._build_listings()
        self._build_forks()
        self._build_decisions()
        self._build_records()
        self._build_record_transitions()
        self._build_claims()
        self._build_compensation_gates()
        self._build_audit()
        self._build_audited_writes()
        self._build_shared()
        self._build_unwinds()
        self._build_step_view()
        self._build_step_finish()

    def _build_runs(self) -> None:
        """A run: start, read, end."""
        insert = self.policy.insert
        clock = self.policy.clock()
        p = self._prepare
        self.clock = p(sa.select(clock))
        self.run_get = p(sa.select(runs).where(RUN))
        self.run_insert = p(
            insert(runs)
            .values(**NEW_RUN, traceparent=b("run_trace", type_=sa.String))
            .on_conflict_do_nothing(index_elements=["run_id"])
            .returning(*runs.c)
        )
        self.run_end = p(
            sa.update(runs)
            .where(RUN, runs.c.status == RunStatus.RUNNING.value)
            .values(status=b("new_status"), text=b("new_text"), error=b("new_error"), updated_at=NOW)
            .returning(*runs.c)
        )

    def _build_tombstone_and_its_gate(self) -> None:
        """The tombstone, and the tombstone gate every tool call passes (see SqlJournal._tombstone_gate)."""
        clock = self.policy.clock()
        p = self._prepare
        self.condemn_stamp = p(self._condemn_stamp().returning(runs.c.condemned_at))
        self.condemn_insert = p(self._condemn_insert().returning(runs.c.condemned_at))
        self.condemned_at = p(sa.select(runs.c.condemned_at).where(RUN))
        # The tombstone gate: lock the run's row and take the next sequence number (SqlJournal._tombstone_gate).
        # A run that has ended takes no new call, gated or not: checked on the same row, in the same statement.
        bump_seq = {"next_seq": runs.c.next_seq + 1}
        self.tombstone_gate = p(
            sa.update(runs)
            .where(RUN, runs.c.condemned_at.is_(None), NOT_ENDED)
            .values(**bump_seq)
            .returning(runs.c.next_seq)
        )
        self.next_seq_ungated = p(
            sa.update(runs).where(RUN, NOT_ENDED).values(**bump_seq).returning(runs.c.next_seq)
        )
        # The same gate without a sequence number, for a claim that is no record (a shared execution).
        self.call_gate_lock = p(
            sa.update(runs)
            .where(RUN, runs.c.condemned_at.is_(None), NOT_ENDED)
            .values(next_seq=runs.c.next_seq)
            .returning(runs.c.next_seq)
        )
        # The tombstone gate without a sequence number: a person's decision on a suspended call takes the same
        # row lock as a claim, so it is ordered against the tombstone the same way.
        self.tombstone_gate_lock = p(
            sa.update(runs)
            .where(RUN, runs.c.condemned_at.is_(None))
            .values(next_seq=runs.c.next_seq)
            .returning(runs.c.next_seq)
        )
        # A decision on a compensation gate makes a run halted at it due for the sweeper at once.
        self.wake_awaiting = p(
            sa.update(runs)
            .where(RUN, runs.c.unwind_state == UnwindState.AWAITING.value)
            .values(unwind_state=UnwindState.PENDING.value, unwind_next_at=clock, updated_at=NOW)
        )

    def _condemn_stamp(self) -> sa.Update:
        """The tombstone on a known run, if it has none yet (RETURNING is the caller's)."""
        return sa.update(runs).where(RUN, runs.c.condemned_at.is_(None)).values(**self._tombstone())

    def _condemn_insert(self) -> Any:
        """The tombstone as a new row, for a run never seen (insert-if-absent; RETURNING is the caller's)."""
        new_run = {"run_id": b("run"), "status": RunStatus.UNKNOWN.value, "prompt": "", "text": ""}
        return (
            self.policy.insert(runs)
            .values(**new_run, created_at=self.policy.clock(), **self._tombstone())
            .on_conflict_do_nothing(index_elements=["run_id"])
        )

    def _tombstone(self) -> dict[str, Any]:
        clock = self.policy.clock()
        return {
            "condemned_at": clock,
            "updated_at": clock,
            "unwind_state": UnwindState.PENDING.value,
            "unwind_next_at": clock,
        }

    def _build_listings(self) -> None:
        """Counts of runs for the console (its pages are ``run_page``)."""
        p = self._prepare
        self.runs_in_unwind_state = p(
            sa.select(sa.func.count()).select_from(runs).where(runs.c.unwind_state == b("state"))
        )

    def _build_forks(self) -> None:
        """A fork: lock the source's row (as a claim does), make the new run, copy what it inherits."""
        insert = self.policy.insert
        p = self._prepare
        self.fork_lock_source = p(
            sa.update(runs)
            .where(runs.c.run_id == b("src"))
            .values(next_seq=runs.c.next_seq)
            .returning(*runs.c)
        )
        self.fork_insert = p(
            insert(runs)
            .values(**NEW_RUN, next_seq=b("at_seq"), source_run_id=b("src"))
            .on_conflict_do_nothing(index_elements=["run_id"])
            .returning(runs.c.run_id)
        )
        self.fork_decisions = p(
            decisions.insert().from_select(
                ["run_id", "step", "payload", "created_at"],
                sa.select(b("run", type_=sa.String), decisions.c.step, decisions.c.payload, NOW).where(
                    decisions.c.run_id == b("src"), decisions.c.step <= b("upto")
                ),
            )
        )
        copied = [c for c in records.c if c.name != "run_id"]
        self.fork_records = p(
            records.insert().from_select(
                ["run_id", *[c.name for c in copied]],
                sa.select(b("run", type_=sa.String), *copied).where(
                    records.c.run_id == b("src"), records.c.step <= b("upto")
                ),
            )
        )

    def _build_decisions(self) -> None:
        """Planner decisions, one row per step."""
        insert = self.policy.insert
        p = self._prepare
        decision = (decisions.c.run_id == b("run"), decisions.c.step == b("at_step"))
        # Nothing is decided after a run's end: the insert selects its row only while the run has not ended.
        ended = sa.exists(sa.select(runs.c.run_id).where(RUN, ENDED))
        self.decision_insert = p(
            insert(decisions)
            .from_select(
                ["run_id", "step", "payload", "created_at"],
                sa.select(
                    b("run", type_=sa.String),
                    b("at_step", type_=sa.Integer),
                    b("new_payload", type_=sa.Text),
                    NOW,
                ).where(~ended),
            )
            .on_conflict_do_nothing(index_elements=["run_id", "step"])
            .returning(decisions.c.payload)
        )
        self.decision_get = p(sa.select(decisions.c.payload).where(*decision))
        self.decisions_of_run = p(
            sa.select(decisions.c.step, decisions.c.payload)
            .where(decisions.c.run_id == b("run"))
            .order_by(decisions.c.step)
        )

    def _build_records(self) -> None:
        """Tool records: claimed before execute (with the execute lease), then settled by compare-and-set."""
        insert = self.policy.insert
        clock = self.policy.clock()
        p = self._prepare
        lease = clock + b("ttl", type_=sa.Double)
        record = (records.c.run_id == b("run"), records.c.suffix == b("step_suffix"))
        self.record_get = p(sa.select(records).where(*record))
        self.records_of_run = p(
            sa.select(records).where(records.c.run_id == b("run")).order_by(records.c.seq)
        )
        self.records_waiting = p(  # the inbox, on the partial index ix_saga_tool_records_waiting
            sa.select(records)
            .where(WAITING)
            .order_by(records.c.updated_at, records.c.run_id, records.c.suffix)
            .limit(MAX_ROWS)
        )
        self.record_insert = p(
            insert(records)
            .values(
                run_id=b("run"),
                suffix=b("step_suffix"),
                seq=b("at_seq"),
                step=b("at_step"),
                tool_call_id=b("call_id"),
                tool_name=b("name"),
                mode=b("call_mode"),
                input=b("call_input"),
                status=b("rec_status"),
                attempts=b("first_attempts", type_=sa.Integer),
                origin_run_id=b("origin"),
                created_at=NOW,
                updated_at=NOW,
                shared_id=b("shared_ref"),
                exec_owner=b("holder"),
                exec_lease_expires_at=lease,
            )
            .on_conflict_do_nothing(index_elements=["run_id", "suffix"])
            .returning(*records.c)
        )

    def _build_record_transitions(self) -> None:
        """A tool record's compare-and-set transitions and its execute lease's renewal."""
        p = self._prepare
        lease = self.policy.clock() + b("ttl", type_=sa.Double)
        record = (records.c.run_id == b("run"), records.c.suffix == b("step_suffix"))
        expected = (*record, records.c.status == b("expected"))
        reclaimed = {
            "status": RecordStatus.RUNNING.value,
            "attempts": records.c.attempts + 1,
            "error": None,
            "updated_at": NOW,
            "exec_owner": b("holder"),
            "exec_lease_expires_at": lease,
        }
        self.record_reclaim = p(sa.update(records).where(*expected).values(**reclaimed).returning(*records.c))
        # Compare-and-set on the attempt the caller saw too: of two processes that both judged the
        # call abandoned, one takes it over.
        self.record_reclaim_seen = p(
            sa.update(records)
            .where(*expected, records.c.attempts == b("seen_attempts", type_=sa.Integer))
            .values(**reclaimed)
            .returning(*records.c)
        )
        settled = {
            "status": b("new_status"),
            "output": b("new_output"),
            "error": b("new_error"),
            "updated_at": NOW,
            # The execute's span when traced; a recovered outcome (none) keeps the one it had.
            "exec_traceparent": sa.func.coalesce(
                b("exec_trace", None, type_=sa.String), records.c.exec_traceparent
            ),
        }
        self.record_settle = p(sa.update(records).where(*expected).values(**settled).returning(*records.c))
        # Fenced by the execute lease's owner: a holder whose call was taken over writes nothing.
        self.record_settle_owned = p(
            sa.update(records)
            .where(*expected, records.c.exec_owner == b("holder"))
            .values(**settled)
            .returning(*records.c)
        )
        self.exec_renew = p(
            sa.update(records)
            .where(
                *record, records.c.status == RecordStatus.RUNNING.value, records.c.exec_owner == b("holder")
            )
            .values(exec_lease_expires_at=lease)
            .returning(records.c.exec_owner)
        )

    def _build_audited_writes(self) -> None:
        """A write and its audit row as one statement (``writes_in_with_clause``: the row rides
        in the write's WITH clause); None where the dialect has no such statement, and the two
        are written in one transaction instead."""
        self.condemn_stamp_audited: Prepared | None = None
        self.condemn_insert_audited: Prepared | None = None
        self.unwind_state_audited: Prepared | None = None
        self.unwind_state_at_epoch_audited: Prepared | None = None
        if not self.policy.writes_in_with_clause:
            return
        p = self._prepare
        # The tombstone's row only from the statement that wrote the tombstone: inserted from its RETURNING.
        for name, tombstone in (("stamp", self._condemn_stamp()), ("insert", self._condemn_insert())):
            written = tombstone.returning(runs.c.run_id, runs.c.condemned_at).cte(f"tombstone_{name}")
            logged = self._audit_from(sa.select(written.c.run_id)).cte("logged")
            setattr(self, f"condemn_{name}_audited", p(sa.select(written.c.condemned_at).add_cte(logged)))
        # The unwind's row is written whether or not the state is (an unknown run, a moved epoch).
        for name, at_epoch in (("unwind_state_audited", False), ("unwind_state_at_epoch_audited", True)):
            logged = self._audit_from(sa.select(b("run", type_=sa.String))).cte("logged")
            setattr(self, name, p(self._unwind_state(at_epoch=at_epoch).add_cte(logged)))


def run_page(
    dialect: sa.Dialect,
    *,
    status: bool,
    condemned: bool | None,
    unwind: bool,
    search: bool,
    after: bool,
    search_by_scan: bool = False,
    contains: bool = False,
) -> Prepared:
    """The runs listing for one shape of filters (each shape is prepared once, then cached).

    Keyset paging on ``(updated_at, run_id)``, newest first: a page starts strictly after the last
    row of the previous one, so page 10,000 costs what page 1 does. Each filter has an index that
    leads with it and continues with the keyset columns (migration 0003). The id search is a prefix
    as a range (``lo <= run_id < hi``), which an index serves; on PostgreSQL it compares bytes
    (``COLLATE "C"``), as SQLite does, so the range is exact whatever the database's collation."""
    where: list[sa.ColumnElement[bool]] = []
    if status:
        where.append(runs.c.status == b("want_status"))
    if condemned is True:
        where.append(runs.c.condemned_at.is_not(None))
    elif condemned is False:
        where.append(runs.c.condemned_at.is_(None))
    if unwind:
        where.append(runs.c.unwind_state == b("want_unwind"))
    if search and search_by_scan:
        # The same test through a function, so that no index on run_id serves it: the page index is
        # walked instead, for a prefix so common that reading its whole range would cost more.
        where.append(sa.func.substr(runs.c.run_id, 1, sa.func.length(b("id_lo"))) == b("id_lo"))
    elif search:
        run_id: sa.ColumnElement[str] = policy_for(dialect.name).byte_ordered(runs.c.run_id)
        where += [run_id >= b("id_lo"), run_id < b("id_hi")]
    if contains:  # any part of the id, any case: the page index is walked, each id tested
        where.append(sa.func.lower(runs.c.run_id).like(b("id_like"), escape="\\"))
    if after:
        where.append(
            sa.tuple_(runs.c.updated_at, runs.c.run_id)
            < sa.tuple_(b("before_at", type_=sa.Double), b("before_id", type_=sa.String))
        )
    stmt = (
        sa.select(runs)
        .where(*where)
        .order_by(runs.c.updated_at.desc(), runs.c.run_id.desc())
        .limit(b("max_rows", type_=sa.Integer))
    )
    return Prepared(stmt, dialect)


def prefix_count(dialect: sa.Dialect) -> Prepared:
    """How many run ids start with the prefix, counting no further than ``enough``."""
    inner = (
        sa.select(runs.c.run_id)
        .where(runs.c.run_id >= b("id_lo"), runs.c.run_id < b("id_hi"))
        .limit(b("enough", type_=sa.Integer))
        .subquery()
    )
    return Prepared(sa.select(sa.func.count()).select_from(inner), dialect)
