"""The tombstone in SQL: its statements, ``condemn``, and ``condemn_and_read`` per dialect (the rule
they obey: ``journal/tombstone.py``).

The stamp is one compare-and-set on the run's row (the row a call's tombstone gate locks, so
whichever commits second sees the other); a run never seen gets a row holding only its tombstone.
SQLite reads the worklist in the tombstone's own synced transaction; PostgreSQL sends BEGIN, the
stamp, the worklist's reads and a COMMIT that waits for the WAL flush in one pipeline. The in-process
unwind's first claim rides in the same commit (``condemn_read_and_claim``): on SQLite in a savepoint
after the reads, on PostgreSQL in the stamp's own statement, at the head of the same pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from ...core import faults
from ...core.keys import compensate_key
from ...errors import MalformedRecordError
from .. import driver
from ..driver import Prepared
from ..records import (
    ClaimAttempt,
    FirstClaim,
    NewAudit,
    RecordStatus,
    RunStatus,
    ToolRecord,
    UnwindState,
    WorklistView,
)
from ..schema import runs
from ..tombstone import condemn_then_read, stamped_or_raise
from .audit import audit_insert_from, audit_params
from .claims import claim_after, claim_row
from .common import RUN, StatementsBase, b
from .worklist import SqlWorklist, WorklistReads, WorklistRows


class TombstoneStatements(StatementsBase):
    def _build_tombstone(self) -> None:
        """The tombstone: stamped on a known run, inserted for one never seen, read back."""
        p = self._prepare
        self.condemn_stamp = p(self._condemn_stamp().returning(runs.c.condemned_at))
        self.condemn_insert = p(self._condemn_insert().returning(runs.c.condemned_at))
        self.condemned_at = p(sa.select(runs.c.condemned_at).where(RUN))

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

    def _build_condemn_audited(self) -> None:
        """The tombstone and its audit row as one statement where the dialect allows
        (``writes_in_with_clause``): the row rides in the tombstone's WITH clause, inserted from its
        RETURNING, so only by the statement that wrote the tombstone. None elsewhere: the two are
        written in one transaction instead."""
        self.condemn_stamp_audited: Prepared | None = None
        self.condemn_insert_audited: Prepared | None = None
        if not self.policy.writes_in_with_clause:
            return
        for name, tombstone in (("stamp", self._condemn_stamp()), ("insert", self._condemn_insert())):
            written = tombstone.returning(runs.c.run_id, runs.c.condemned_at).cte(f"tombstone_{name}")
            logged = audit_insert_from(self.policy, sa.select(written.c.run_id)).cte("logged")
            stmt = self._prepare(sa.select(written.c.condemned_at).add_cte(logged))
            setattr(self, f"condemn_{name}_audited", stmt)


class TombstoneReads(WorklistReads, Protocol):
    """The statements the tombstone runs (``TombstoneStatements``'s, and the audit row's insert)."""

    condemn_stamp: Prepared
    condemn_insert: Prepared
    condemned_at: Prepared
    condemn_stamp_audited: Prepared | None
    condemn_insert_audited: Prepared | None
    condemn_stamp_claimed: Prepared | None
    audit_insert_unread: Prepared
    claim_insert: Prepared
    claim_take: Prepared
    claim_insert_counted: Prepared
    claim_take_counted: Prepared
    claim_get: Prepared
    claim_savepoint: Prepared
    claim_savepoint_release: Prepared
    claim_savepoint_undo: Prepared


class SqlTombstone(SqlWorklist):
    """``condemn`` and ``condemn_and_read`` on the statements above."""

    _q: TombstoneReads

    def condemn(self, run_id: str, *, audit: NewAudit | None = None) -> float:
        work, atomic, _first = self._condemn_work(run_id, audit)
        # durable before any hook runs (Journal.condemn); atomic when the audit row commits with it
        tombstone = f"the tombstone of run {run_id!r}"
        return stamped_or_raise(run_id, self._write(work, atomic=atomic, durable=True, alone=tombstone))

    def _condemn_work(
        self, run_id: str, audit: NewAudit | None
    ) -> tuple[Callable[[driver.Tx], float | None], bool, tuple[Prepared, dict[str, Any]]]:
        """The tombstone's statements (the time it was stamped, None if the row kept changing), whether
        they must commit together (an audit row that does not ride in the stamp's statement), and the
        first of them with its parameters: the stamp, which alone writes the tombstone of a live run."""
        q = self._q
        params = {"run": run_id, "now": time.time()}
        if audit is not None:
            params.update(audit_params(audit))
        # The audit row rides in the tombstone's own statement where the dialect allows (written by
        # the statement that wrote the tombstone, from its RETURNING); else it follows in one transaction.
        one_statement = audit is not None and q.condemn_stamp_audited is not None
        stamp, insert = (
            (q.condemn_stamp_audited, q.condemn_insert_audited)
            if one_statement
            else (q.condemn_stamp, q.condemn_insert)
        )

        def work(tx: driver.Tx) -> float | None:
            # Three tries: on PostgreSQL a run started concurrently is invisible to the UPDATE, then makes
            # the INSERT a no-op once it commits; the next UPDATE (a fresh snapshot) sees it and stamps it.
            # Each statement is atomic alone (the UPDATE waits out a claim's row lock, then re-checks),
            # so they need no transaction around them, unless an audit row must commit with the stamp.
            for _ in range(3):
                for stmt in (stamp, insert, q.condemned_at):
                    assert stmt is not None
                    row = tx.one(stmt, params)
                    if row is not None and row["condemned_at"] is not None:
                        if audit is not None and not one_statement and stmt is not q.condemned_at:
                            tx.execute(q.audit_insert_unread, params)  # this call wrote it
                        return float(row["condemned_at"])
            return None

        assert stamp is not None
        return work, audit is not None and not one_statement, (stamp, params)

    def condemn_and_read(
        self, run_id: str, statuses: Sequence[RecordStatus], *, audit: NewAudit | None = None
    ) -> WorklistView:
        condemn, atomic, (stamp, params) = self._condemn_work(run_id, audit)
        reads = self._worklist_reads(run_id)
        if self.policy.transactions_cost_round_trips:
            if atomic:  # an audit row that must commit with the stamp in a transaction of its own
                return condemn_then_read(self, run_id, statuses, audit=audit)
            return self._condemn_and_read_pipelined(run_id, statuses, condemn, reads, (stamp, params))
        # SQLite: a transaction costs no round trip, so the reads ride in the tombstone's (one BEGIN and
        # one COMMIT fewer per unwind). The commit is synced before this returns, as condemn's; the rows
        # are parsed after it, so a malformed one fails the unwind with its tombstone standing.

        def work(tx: driver.Tx) -> tuple[float | None, WorklistRows | None]:
            stamped = condemn(tx)
            return stamped, None if stamped is None else reads(tx)

        stamped, rows = self._write(
            work, atomic=True, durable=True, alone=f"the tombstone of run {run_id!r}", grouped=True
        )
        stamped_or_raise(run_id, stamped)
        assert rows is not None
        return self._worklist_view(rows, statuses)

    def _condemn_and_read_pipelined(
        self,
        run_id: str,
        statuses: Sequence[RecordStatus],
        condemn: Callable[[driver.Tx], float | None],
        reads: Callable[[driver.Tx], WorklistRows],
        first: tuple[driver.Prepared, dict[str, Any]],
    ) -> WorklistView:
        """PostgreSQL: a durable transaction's BEGIN, the stamp, the three reads and the COMMIT in one
        pipeline: one round trip instead of four.

        The COMMIT waits for the WAL flush (the policy's ``durable_frame``) and the pipeline's results
        only come back after it, so the tombstone is durable before this returns, as ``condemn``'s; the
        reads, in its transaction, see it and everything committed before it. A stamp that wrote
        nothing (a run already condemned, or never started) falls back to ``condemn``'s own statements
        in a durable transaction of their own, and reads the worklist afresh after them."""
        frame = self.policy.durable_frame

        def work(tx: driver.Tx) -> tuple[float | None, WorklistRows | None]:
            (stamped,), read = self._read_with_worklist(tx, run_id, [first], framed=frame)
            if not stamped or stamped[0]["condemned_at"] is None:
                return None, None
            return float(stamped[0]["condemned_at"]), read

        def fallback(tx: driver.Tx) -> tuple[float | None, WorklistRows | None]:
            at = condemn(tx)
            return at, None if at is None else reads(tx)

        tombstone = f"the tombstone of run {run_id!r}"
        at, rows = self._write(work, alone=tombstone) if frame is not None else (None, None)
        if at is None:
            at, rows = self._write(fallback, durable=True, alone=tombstone)
        stamped_or_raise(run_id, at)
        assert rows is not None
        return self._worklist_view(rows, statuses)

    def condemn_read_and_claim(
        self,
        run_id: str,
        statuses: Sequence[RecordStatus],
        *,
        audit: NewAudit | None = None,
        first: FirstClaim,
    ) -> tuple[WorklistView, ClaimAttempt | None]:
        condemn, _atomic, (stamp, params) = self._condemn_work(run_id, audit)
        claim = {
            "holder": first.owner,
            "ttl": float(first.ttl),
            "via": first.via_run_id,
            **self.policy.lease_clock(),
        }
        claimed = self._q.condemn_stamp_claimed
        if (
            self.policy.transactions_cost_round_trips
            and claimed is not None
            and stamp is self._q.condemn_stamp_audited
        ):
            both = {**params, **claim, "unwound": [s.value for s in statuses], "tools": sorted(first.tools)}
            return self._condemned_and_claimed_pipelined(run_id, statuses, condemn, (claimed, both))
        # SQLite (and PostgreSQL without an audit row to ride in the stamp): one transaction, the
        # claim in a savepoint after the reads. The commit is synced before this returns, as condemn's.
        reads = self._worklist_reads(run_id)

        def work(
            tx: driver.Tx,
        ) -> tuple[float | None, WorklistRows | None, WorklistView | None, ClaimAttempt | None]:
            stamped = condemn(tx)
            if stamped is None:
                return None, None, None, None
            rows = reads(tx)
            try:
                view = self._worklist_view(rows, statuses)
            except MalformedRecordError:  # raised again once the tombstone is committed
                return stamped, rows, None, None
            target = first.target(view.records)
            return (
                stamped,
                rows,
                view,
                None if target is None else self._claim_in_savepoint(tx, target, claim),
            )

        stamped, rows, view, got = self._write(
            work, atomic=True, durable=True, alone=f"the tombstone of run {run_id!r}", grouped=True
        )
        stamped_or_raise(run_id, stamped)
        assert rows is not None
        if got is not None and got.acquired:
            assert got.claim is not None
            faults.point("after_first_claim", got.claim.idempotency_key)
        return (self._worklist_view(rows, statuses) if view is None else view), got

    def _claim_in_savepoint(
        self, tx: driver.Tx, target: ToolRecord, claim: dict[str, Any]
    ) -> ClaimAttempt | None:
        """The first step's claim after the tombstone (``claims.claim_after``): an error in it undoes
        the claim alone and the tombstone is committed all the same (None: the unwind claims the step
        itself)."""
        params = {
            **claim,
            "origin": target.origin_run_id,
            "step_suffix": target.suffix,
            "key": compensate_key(target.origin_run_id, target.suffix),
            "now": time.time(),
        }
        # The tombstone stays; the unwind claims the step (None). A claim row this code cannot read
        # is only ever the busy case's, which wrote nothing.
        errors = (self.engine.dialect.loaded_dbapi.Error, MalformedRecordError)
        return claim_after(tx, self._q, self.policy, params, errors)

    def _condemned_and_claimed_pipelined(
        self,
        run_id: str,
        statuses: Sequence[RecordStatus],
        condemn: Callable[[driver.Tx], float | None],
        first: tuple[driver.Prepared, dict[str, Any]],
    ) -> tuple[WorklistView, ClaimAttempt | None]:
        """PostgreSQL: ``_condemn_and_read_pipelined`` with the stamp's statement that also takes the
        first claim (``condemn_stamp_claimed``): still one round trip. The claim is returned only
        when it was taken; one not taken (busy, already compensated, no step to claim) wrote nothing,
        and the unwind asks for it as before. A stamp that wrote nothing claimed nothing either: the
        fallback is ``condemn``'s, with no claim. The rows are parsed after the commit: a record of
        a status this code does not know keeps the statement from claiming, but one malformed
        otherwise fails the unwind with the step claimed and its hook never called (the claim lapses
        with its lease; a re-drive takes it with the same key)."""
        frame = self.policy.durable_frame
        reads = self._worklist_reads(run_id)

        def work(tx: driver.Tx) -> tuple[float | None, WorklistRows | None, driver.Row | None]:
            (stamped,), read = self._read_with_worklist(tx, run_id, [first], framed=frame)
            if not stamped or stamped[0]["condemned_at"] is None:
                return None, None, None
            row = dict(stamped[0])
            return float(row.pop("condemned_at")), read, (row if row["origin_run_id"] is not None else None)

        def fallback(tx: driver.Tx) -> tuple[float | None, WorklistRows | None, driver.Row | None]:
            at = condemn(tx)
            return at, None if at is None else reads(tx), None

        tombstone = f"the tombstone of run {run_id!r}"
        at, rows, taken = self._write(work, alone=tombstone) if frame is not None else (None, None, None)
        if at is None:
            at, rows, taken = self._write(fallback, durable=True, alone=tombstone)
        stamped_or_raise(run_id, at)
        assert rows is not None
        got = None if taken is None else ClaimAttempt(True, claim_row(taken))
        if got is not None:
            assert got.claim is not None
            faults.point("after_first_claim", got.claim.idempotency_key)
        return self._worklist_view(rows, statuses), got
