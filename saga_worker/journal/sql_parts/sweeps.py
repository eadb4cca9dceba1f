"""The sweeper's state per condemned run in SQL: its unwind state, holds, and the runs it re-drives."""

from __future__ import annotations

import time
from typing import Protocol

import sqlalchemy as sa

from ...core.storable import storable_or_none
from ...errors import MalformedRecordError
from .. import driver
from ..driver import Prepared
from ..records import ClaimStatus, FinishedClaim, NewAudit, RunInfo, UnwindState
from ..schema import claims, runs, sweepable_clause, unwinds
from ..tombstone import check_not_condemned_row
from .audit import audit_insert_from, audit_params
from .common import MAX_ROWS, NOW, RUN, PlumbingStatements, SqlPlumbing, StatementsBase, b
from .gate import run_row


class SweepStatements(StatementsBase):
    def _unwind_state(self, *, at_epoch: bool) -> sa.Update:
        """The unwind state; ``at_epoch``: only if no outcome landed since the unwind read its worklist
        (see reopen_unwind)."""
        where = [RUN, runs.c.unwind_epoch == b("epoch", type_=sa.Integer)] if at_epoch else [RUN]
        return (
            sa.update(runs)
            .where(*where)
            .values(
                unwind_state=b("state"),
                unwind_note=b("note"),
                unwind_next_at=b("next_at", type_=sa.Double),
                updated_at=NOW,
                unwind_attempts=runs.c.unwind_attempts + b("bump", type_=sa.Integer),
            )
        )

    def _hold_sweep(self) -> sa.Update:
        """The sweep of a run held off for ``grace`` seconds (its WHERE is the caller's)."""
        held_until = self.policy.clock() + b("grace", type_=sa.Double)
        return sa.update(runs).values(
            unwind_state=UnwindState.PENDING.value,
            unwind_note=b("note"),
            updated_at=NOW,
            unwind_next_at=sa.case(
                (runs.c.unwind_next_at > held_until, runs.c.unwind_next_at), else_=held_until
            ),
        )

    def _build_sweeps(self) -> None:
        """The unwind state the sweeper reads, and the runs it re-drives."""
        clock = self.policy.clock()
        p = self._prepare
        self.unwind_state = p(self._unwind_state(at_epoch=False))
        self.unwind_state_at_epoch = p(self._unwind_state(at_epoch=True))
        # An outcome written after the tombstone: the unwind that read this record before it may have
        # judged it from a guess (uncertain, or a probe that came too early). Look again, with a fresh
        # retry budget; and no unwind that began before this may now mark the run complete.
        self.reopen_unwind = p(
            sa.update(runs)
            .where(RUN, runs.c.condemned_at.is_not(None))
            .values(
                unwind_state=UnwindState.PENDING.value,
                unwind_note=b("note"),
                unwind_next_at=clock,
                unwind_attempts=0,
                unwind_epoch=runs.c.unwind_epoch + 1,
                updated_at=NOW,
            )
        )

        hold = self._hold_sweep()
        self.hold_sweep = p(hold.where(RUN))
        # The hold of a fresh unwind, only if the stored unwind is the run's and not a dry run: sent
        # after the unwind's insert-if-absent in one pipeline (``SqlUnwinds.record_unwind``).
        stored = sa.select(unwinds.c.unwind_id).where(
            unwinds.c.unwind_id == b("unwind"),
            unwinds.c.run_id == runs.c.run_id,
            unwinds.c.dry_run.is_(False),
        )
        self.hold_sweep_of_unwind = p(hold.where(RUN, sa.exists(stored)))

        self.runs_due = p(
            sa.select(runs)
            .where(
                # Not "pending or incomplete": every state but the settled ones, so that a run whose
                # state this code does not know is read (and fails closed) rather than never swept.
                # Literal SQL, the partial index's own condition (migrations 0014, 0015), which serves it.
                sweepable_clause(),
                sa.func.coalesce(runs.c.unwind_next_at, 0.0) <= b("due_by", type_=sa.Double),
            )
            .order_by(runs.c.unwind_next_at)
            .limit(MAX_ROWS)
        )

    def _build_unwind_state_audited(self) -> None:
        """The unwind state and its audit row as one statement where the dialect allows
        (``writes_in_with_clause``: the row rides in the WITH clause, and is written whether or not
        the state is: an unknown run, a moved epoch). None elsewhere: one transaction instead."""
        self.unwind_state_audited: Prepared | None = None
        self.unwind_state_at_epoch_audited: Prepared | None = None
        if not self.policy.writes_in_with_clause:
            return
        for name, at_epoch in (("unwind_state_audited", False), ("unwind_state_at_epoch_audited", True)):
            logged = audit_insert_from(self.policy, sa.select(b("run", type_=sa.String))).cte("logged")
            setattr(self, name, self._prepare(self._unwind_state(at_epoch=at_epoch).add_cte(logged)))

    def _build_last_step(self) -> None:
        """The last step's outcome and the unwind's complete state with its audit row, as one
        statement where the dialect allows (``writes_in_with_clause``): the state and the row are
        written only if the outcome's compare-and-set matched, and the row says whether it did.
        None elsewhere: one transaction instead (``SqlSweeps.finish_last_step``)."""
        self.last_step: Prepared | None = None
        self.last_step_at_epoch: Prepared | None = None
        if not self.policy.writes_in_with_clause:
            return
        for name, at_epoch in (("last_step", False), ("last_step_at_epoch", True)):
            finished = (
                sa.update(claims)
                .where(
                    claims.c.origin_run_id == b("done_origin"),
                    claims.c.suffix == b("done_suffix"),
                    claims.c.owner == b("done_holder"),
                    claims.c.status == ClaimStatus.CLAIMED.value,
                )
                .values(status=b("new_status"), error=b("new_error"), finished_at=self.policy.clock())
                .returning(claims.c.owner)
                .cte("finished")
            )
            written = sa.exists(sa.select(finished.c.owner))
            logged = audit_insert_from(self.policy, sa.select(b("run", type_=sa.String)).where(written))
            state = self._unwind_state(at_epoch=at_epoch).where(written).returning(runs.c.run_id)
            statement = sa.select(written.label("written")).add_cte(
                finished, state.cte("state"), logged.cte("logged")
            )
            setattr(self, name, self._prepare(statement))


class SweepReads(PlumbingStatements, Protocol):
    """The statements ``SqlSweeps`` reads (its own and other areas')."""

    audit_insert_unread: Prepared
    claim_finish: Prepared
    hold_sweep: Prepared
    last_step: Prepared | None
    last_step_at_epoch: Prepared | None
    runs_due: Prepared
    unwind_state: Prepared
    unwind_state_at_epoch: Prepared
    unwind_state_at_epoch_audited: Prepared | None
    unwind_state_audited: Prepared | None


class SqlSweeps(SqlPlumbing):
    """``UnwindsPart`` (``journal/parts.py``): the sweeper's state, on the statements above."""

    _q: SweepReads

    def set_unwind_state(
        self,
        run_id: str,
        state: UnwindState,
        *,
        note: str | None = None,
        next_at: float | None = None,
        count_attempt: bool = False,
        epoch: int | None = None,
        audit: NewAudit | None = None,
    ) -> None:
        check_not_condemned_row(audit)
        params = {
            "run": run_id,
            "state": state.value,
            "note": storable_or_none(note),
            "next_at": next_at,
            "bump": 1 if count_attempt else 0,
            "epoch": epoch,
            "now": time.time(),
        }
        q = self._q
        alone = f"the unwind state of run {run_id!r}"
        stmt = q.unwind_state if epoch is None else q.unwind_state_at_epoch
        if audit is None:
            self._write(lambda tx: tx.execute(stmt, params), alone=alone)
            return
        both = {**audit_params(audit), **params}
        # One statement where the dialect allows (the row in the state's WITH clause), else one transaction.
        one = q.unwind_state_audited if epoch is None else q.unwind_state_at_epoch_audited
        if one is not None:
            self._write(lambda tx: tx.execute(one, both), alone=alone)
            return

        def write(tx: driver.Tx) -> None:
            tx.execute(q.audit_insert_unread, both)
            tx.execute(stmt, both)

        self._write(write, atomic=True, alone=alone)

    def finish_last_step(
        self, finished: FinishedClaim, run_id: str, *, epoch: int | None, audit: NewAudit
    ) -> bool:
        check_not_condemned_row(audit)
        now = time.time()
        state = {
            "run": run_id,
            "state": UnwindState.COMPLETE.value,
            "note": None,
            "next_at": None,
            "bump": 0,
            "epoch": epoch,
            "now": now,
            **audit_params(audit),
        }
        outcome = {
            "new_status": finished.status.value,
            "new_error": storable_or_none(finished.error),
            "now": now,
        }
        q = self._q
        one = q.last_step if epoch is None else q.last_step_at_epoch
        if one is not None:  # one statement, one round trip, one commit
            params = {
                **state,
                **outcome,
                "done_origin": finished.origin_run_id,
                "done_suffix": finished.suffix,
                "done_holder": finished.owner,
            }

            def once(tx: driver.Tx) -> bool:
                row = tx.one(one, params)
                return row is not None and bool(row["written"])

            return self._write(once, alone=f"the end of the unwind of run {run_id!r}", grouped=True)
        mine = {
            **outcome,
            "origin": finished.origin_run_id,
            "step_suffix": finished.suffix,
            "holder": finished.owner,
        }
        stmt = q.unwind_state if epoch is None else q.unwind_state_at_epoch

        def write(tx: driver.Tx) -> bool:
            if not tx.changed(q.claim_finish, mine):
                return False
            tx.execute(q.audit_insert_unread, state)
            tx.execute(stmt, state)
            return True

        return self._write(write, atomic=True, alone=f"the end of the unwind of run {run_id!r}", grouped=True)

    def hold_sweep(self, run_id: str, grace: float, note: str) -> None:
        params = {"run": run_id, "grace": float(grace), "note": storable_or_none(note), "now": time.time()}
        self._write(lambda tx: tx.execute(self._q.hold_sweep, params), alone=f"the sweep of run {run_id!r}")

    def runs_to_sweep(
        self, now: float, *, limit: int = 100, unreadable: list[MalformedRecordError] | None = None
    ) -> list[RunInfo]:
        params = {"due_by": float(now), "max_rows": int(limit)}
        due: list[RunInfo] = []
        for row in self._fetch(lambda tx: tx.all(self._q.runs_due, params)):
            try:
                due.append(run_row(row))
            except MalformedRecordError as exc:
                if unreadable is None:
                    raise
                unreadable.append(exc)
        return due
