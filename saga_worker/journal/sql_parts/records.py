"""Tool records in SQL: claimed before ``execute``, settled by compare-and-set, under an execute lease."""

from __future__ import annotations

import dataclasses
import operator
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from ...core.storable import storable_or_none
from .. import driver
from ..driver import Prepared
from ..records import NewRecord, RecordStatus, ToolRecord, UnwindState, parse_status
from ..schema import records, runs
from .common import MAX_ROWS, NOW, WAITING, Conflict, SqlPlumbing, StatementsBase, b
from .common import dump_json as _dump
from .common import load_json as _load
from .gate import GateReads, tombstone_gate


class RecordStatements(StatementsBase):
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
        # The inbox, on the partial index ix_saga_tool_records_waiting: what waits for a person is left
        # out here, before the limit, so that rows nobody waits for cannot fill it (a condemned run's
        # suspended call, a call still executing under its lease, one whose run was unwound since).
        run_of_record = runs.c.run_id == records.c.run_id
        asks_a_decision = sa.and_(
            records.c.status == RecordStatus.SUSPENDED.value,
            sa.exists().where(run_of_record, runs.c.condemned_at.is_(None)),
        )
        outcome_unknown = sa.and_(
            records.c.status == RecordStatus.RUNNING.value,
            sa.or_(records.c.exec_lease_expires_at.is_(None), records.c.exec_lease_expires_at <= clock),
            sa.exists().where(
                run_of_record,
                sa.or_(runs.c.condemned_at.is_(None), runs.c.unwind_state != UnwindState.COMPLETE.value),
            ),
        )
        self.records_waiting = p(
            sa.select(records)
            .where(WAITING, sa.or_(asks_a_decision, outcome_unknown))
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
                group=b("call_group", type_=sa.String),
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


def record_row(m: Mapping[Any, Any]) -> ToolRecord:
    rid, what = m["run_id"], f"{m['suffix']!r}"
    return ToolRecord(
        run_id=rid,
        suffix=m["suffix"],
        seq=m["seq"],
        step=m["step"],
        tool_call_id=m["tool_call_id"],
        tool_name=m["tool_name"],
        mode=m["mode"],
        input=_load(m["input"], rid, what + " input"),
        status=parse_status(RecordStatus, m["status"], rid, what),
        output=_load(m["output"], rid, what + " output"),
        error=m["error"],
        attempts=m["attempts"],
        origin_run_id=m["origin_run_id"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        shared_id=m.get("shared_id"),
        exec_owner=m.get("exec_owner"),
        exec_lease_expires_at=m.get("exec_lease_expires_at"),
        exec_traceparent=m.get("exec_traceparent"),
        group=m.get("group"),
    )


# A record's columns in the order of ``ToolRecord``'s fields (``record_of`` builds it from them by
# position); ``pick_record`` picks them out of a row read as a dict.
RECORD_FIELDS = tuple(field.name for field in dataclasses.fields(ToolRecord))
RECORD_ORIGIN = RECORD_FIELDS.index("origin_run_id")
pick_record = operator.itemgetter(*RECORD_FIELDS)


def record_of(v: Sequence[Any]) -> ToolRecord:
    """``record_row`` of a row read as ``RECORD_FIELDS``' values (``Tx.all_picked``): no dict made."""
    rid, what = v[0], f"{v[1]!r}"
    return ToolRecord(
        rid,
        v[1],
        v[2],
        v[3],
        v[4],
        v[5],
        v[6],
        _load(v[7], rid, what + " input"),
        parse_status(RecordStatus, v[8], rid, what),
        _load(v[9], rid, what + " output"),
        *v[10:],
    )


def records_of_values(rows: list[tuple[Any, ...]], statuses: Sequence[RecordStatus]) -> list[ToolRecord]:
    """``records_of`` for rows read as ``RECORD_FIELDS``' values: every row parsed, then filtered."""
    parsed = [record_of(r) for r in rows]
    return [r for r in parsed if r.status in statuses]


def records_of(rows: list[driver.Row], statuses: Sequence[RecordStatus] | None) -> list[ToolRecord]:
    """The records of ``rows`` whose status is one of ``statuses`` (all with None)."""
    # Every row is parsed before any is left out: a status this code does not know (another case, a
    # newer writer's value) fails closed, naming the run and the step, instead of silently dropping
    # the step from an unwind. So the filter is on parsed values, never on the column in SQL.
    parsed = [record_row(r) for r in rows]
    if statuses is None:
        return parsed
    return [r for r in parsed if r.status in statuses]


class RecordReads(GateReads, Protocol):
    """The statements ``SqlRecords`` reads (its own and other areas')."""

    exec_renew: Prepared
    record_get: Prepared
    record_insert: Prepared
    record_reclaim: Prepared
    record_reclaim_seen: Prepared
    record_settle: Prepared
    record_settle_owned: Prepared
    records_of_run: Prepared
    records_waiting: Prepared
    reopen_unwind: Prepared


class SqlRecords(SqlPlumbing):
    """``RecordsPart`` (``journal/parts.py``) on the statements above."""

    _q: RecordReads

    def get_record(self, run_id: str, suffix: str) -> ToolRecord | None:
        row = self._fetch(lambda tx: tx.one(self._q.record_get, {"run": run_id, "step_suffix": suffix}))
        return None if row is None else record_row(row)

    def list_records(self, run_id: str, statuses: Sequence[RecordStatus] | None = None) -> list[ToolRecord]:
        rows = self._fetch(lambda tx: tx.all(self._q.records_of_run, {"run": run_id}))
        return records_of(rows, statuses)

    def waiting_records(self, *, limit: int = 500) -> list[ToolRecord]:
        # Filtered on the column (unlike records_of): a row of a status this code does not know is
        # not one a person is asked about; it still fails closed wherever a run's records are read.
        params = {"max_rows": int(limit), "now": time.time()}
        rows = self._fetch(lambda tx: tx.all(self._q.records_waiting, params))
        return [record_row(r) for r in rows]

    def claim_record(
        self,
        run_id: str,
        new: NewRecord,
        *,
        gated: bool,
        durable: bool = False,
        owner: str | None = None,
        ttl: float = 30.0,
    ) -> ToolRecord | None:
        params = {
            "holder": owner,
            "ttl": float(ttl),
            "run": run_id,
            "step_suffix": new.suffix,
            "at_step": new.step,
            "call_id": new.tool_call_id,
            "name": new.tool_name,
            "call_mode": new.mode,
            "call_input": _dump(new.input),
            "origin": new.origin_run_id,
            "rec_status": new.status.value,
            "first_attempts": 0 if new.status is RecordStatus.SUSPENDED else 1,
            "shared_ref": new.shared_id,
            "call_group": new.group,
            "now": time.time(),
        }
        return self._behind_tombstone_gate(run_id, gated, durable, self._q.record_insert, params)

    def reclaim_record(
        self,
        run_id: str,
        suffix: str,
        expected: RecordStatus,
        *,
        gated: bool,
        durable: bool = False,
        owner: str | None = None,
        ttl: float = 30.0,
        attempts: int | None = None,
    ) -> ToolRecord | None:
        params = {
            "run": run_id,
            "step_suffix": suffix,
            "expected": expected.value,
            "holder": owner,
            "ttl": float(ttl),
            "seen_attempts": attempts,
            "now": time.time(),
        }
        stmt = self._q.record_reclaim if attempts is None else self._q.record_reclaim_seen
        return self._behind_tombstone_gate(run_id, gated, durable, stmt, params)

    def record_in_transaction(
        self,
        run_id: str,
        new: NewRecord,
        effect: Callable[[Any], Any],
        *,
        expected: RecordStatus | None = None,
        attempts: int | None = None,
    ) -> ToolRecord | None:
        q = self._q
        claim = {
            "holder": None,
            "ttl": 0.0,
            "run": run_id,
            "step_suffix": new.suffix,
            "at_step": new.step,
            "call_id": new.tool_call_id,
            "name": new.tool_name,
            "call_mode": new.mode,
            "call_input": _dump(new.input),
            "origin": new.origin_run_id,
            "rec_status": RecordStatus.RUNNING.value,
            "first_attempts": 1,
            "shared_ref": new.shared_id,
            "call_group": new.group,
            "expected": None if expected is None else expected.value,
            "seen_attempts": attempts,
            "now": time.time(),
        }

        def work(tx: driver.Tx) -> driver.Row:
            seq = tombstone_gate(tx, q, run_id, True)
            if expected is None:
                claimed = tx.one(q.record_insert, {**claim, "at_seq": seq})
            else:
                stmt = q.record_reclaim if attempts is None else q.record_reclaim_seen
                claimed = tx.one(stmt, claim)
            if claimed is None:
                raise Conflict
            # The effect, on this transaction's connection: it commits with the record, or neither does.
            output = effect(tx.connection)
            settle = self._settle_params(
                run_id, new.suffix, RecordStatus.RUNNING, RecordStatus.SUCCEEDED, output, None
            )
            row = tx.one(q.record_settle, {**settle, "exec_trace": None})
            assert row is not None  # claimed in this very transaction
            return row

        try:
            return record_row(self._write(work, atomic=True, durable=True))
        except Conflict:
            return None

    def _behind_tombstone_gate(
        self, run_id: str, gated: bool, durable: bool, stmt: driver.Prepared, params: dict[str, Any]
    ) -> ToolRecord | None:
        """Take the gate, then run one record statement in the same transaction (it may use the
        sequence number as ``at_seq``); None, with nothing written, if the statement changed no row."""

        def work(tx: driver.Tx) -> driver.Row:
            row = tx.one(stmt, {**params, "at_seq": tombstone_gate(tx, self._q, run_id, gated)})
            if row is None:
                raise Conflict  # roll back the sequence number we took
            return row

        try:
            return record_row(self._write(work, atomic=True, durable=durable))
        except Conflict:
            return None

    def _settle_params(
        self,
        run_id: str,
        suffix: str,
        expected: RecordStatus,
        status: RecordStatus,
        output: Any,
        error: str | None,
    ) -> dict[str, Any]:
        return {
            "run": run_id,
            "step_suffix": suffix,
            "expected": expected.value,
            "new_status": status.value,
            "new_output": None if output is None else _dump(output),
            "new_error": storable_or_none(error),
            "now": time.time(),
        }

    def complete_record(
        self,
        run_id: str,
        suffix: str,
        status: RecordStatus,
        *,
        output: Any = None,
        error: str | None = None,
        owner: str | None = None,
        traceparent: str | None = None,
    ) -> ToolRecord | None:
        q = self._q
        params = {
            **self._settle_params(run_id, suffix, RecordStatus.RUNNING, status, output, error),
            "exec_trace": traceparent,
            "holder": owner,
            "note": f"{suffix}: settled {status.value} after the tombstone"[:2000],
        }

        def work(tx: driver.Tx) -> driver.Row | None:
            row = tx.one(q.record_settle if owner is None else q.record_settle_owned, params)
            # After the outcome, never before: an unwind that reads the record after this sees it settled.
            tx.execute(q.reopen_unwind, params)
            return row

        row = self._write(work)
        return None if row is None else record_row(row)

    def renew_execution(self, run_id: str, suffix: str, owner: str, ttl: float) -> bool:
        params = {
            "run": run_id,
            "step_suffix": suffix,
            "holder": owner,
            "ttl": float(ttl),
            "now": time.time(),
        }
        return self._write(lambda tx: tx.one(self._q.exec_renew, params)) is not None

    def resolve_record(
        self, run_id: str, suffix: str, expected: RecordStatus, output: Any
    ) -> ToolRecord | None:
        params = self._settle_params(run_id, suffix, expected, RecordStatus.SUCCEEDED, output, None)
        row = self._write(lambda tx: tx.one(self._q.record_settle, params))
        return None if row is None else record_row(row)
