"""Approvals (a person's word on a suspended call or a gated compensation) and the audit trail in SQL."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import sqlalchemy as sa

from .. import driver
from ..dialects import DialectPolicy
from ..driver import Prepared
from ..records import (
    AuditAction,
    AuditRecord,
    AuditVia,
    CompensationGate,
    GateDecision,
    NewAudit,
    RecordStatus,
    ToolRecord,
    parse_status,
)
from ..schema import audit, gates, runs, unwinds
from ..tombstone import check_not_condemned_row
from .common import AUDIT_VALUES, RUN, Conflict, SqlPlumbing, StatementsBase, b
from .common import dump_json as _dump
from .common import load_json as _load
from .gate import GateReads, call_gate
from .records import record_row


class AuditStatements(StatementsBase):
    def _build_compensation_gates(self) -> None:
        """Compensation gates: a person approved or denied undoing a step."""
        insert = self.policy.insert
        clock = self.policy.clock()
        p = self._prepare
        self.gate_insert = p(
            insert(gates)
            .values(
                origin_run_id=b("origin"),
                suffix=b("step_suffix"),
                decision=b("new_decision"),
                actor=b("who"),
                reason=b("why"),
                via_run_id=b("via"),
                decided_at=clock,
            )
            .on_conflict_do_nothing(index_elements=["origin_run_id", "suffix"])
            .returning(*gates.c)
        )
        self.gate_get = p(
            sa.select(gates).where(gates.c.origin_run_id == b("origin"), gates.c.suffix == b("step_suffix"))
        )
        self.gates_of_origin = p(sa.select(gates).where(gates.c.origin_run_id == b("origin")))

    def _build_audit(self) -> None:
        """The audit trail: append-only, one row per event."""
        insert = self.policy.insert
        clock = self.policy.clock()
        p = self._prepare
        row = (
            insert(audit)
            .values(run_id=b("run"), at=clock, **AUDIT_VALUES)
            .on_conflict_do_nothing(index_elements=["event_key"])
        )
        self.audit_insert = p(row.returning(audit.c.id))
        # For a caller that does not ask whether the row was new: no RETURNING, which on SQLite costs
        # a temporary table per statement.
        self.audit_insert_unread = p(row)
        self.audit_of_run = p(sa.select(audit).where(audit.c.run_id == b("run")).order_by(audit.c.id))
        # Requests no worker took: a scan of the trail's recent rows (``at`` bounds it to a visibility
        # timeout or so), each checked against the unwinds' primary key.
        self.audit_queued = p(
            sa.select(audit)
            .where(
                audit.c.action == AuditAction.UNWIND_QUEUED.value,
                audit.c.at >= b("since"),
                ~sa.exists().where(unwinds.c.unwind_id == audit.c.target),
            )
            .order_by(audit.c.at, audit.c.id)
            .limit(b("limit"))
        )

        # The run with who condemned it (the first ``condemned`` row's actor and reason), in the one
        # statement an unwind reads its run with: an index seek on ix_saga_audit_run each, no round trip.
        def of_first_condemned(column: sa.Column[str]) -> sa.ScalarSelect[str]:
            return (
                sa.select(column)
                .where(audit.c.run_id == runs.c.run_id, audit.c.action == AuditAction.CONDEMNED.value)
                .order_by(audit.c.id)
                .limit(1)
                .correlate(runs)
                .scalar_subquery()
            )

        self.run_with_condemner = p(
            sa.select(
                runs,
                of_first_condemned(audit.c.actor).label("condemner_actor"),
                of_first_condemned(audit.c.reason).label("condemner_reason"),
            ).where(RUN)
        )


def gate_row(m: Mapping[Any, Any]) -> CompensationGate:
    return CompensationGate(
        origin_run_id=m["origin_run_id"],
        suffix=m["suffix"],
        decision=parse_status(GateDecision, m["decision"], m["origin_run_id"], f"gate {m['suffix']!r}"),
        actor=m["actor"],
        reason=m["reason"],
        decided_at=m["decided_at"],
        via_run_id=m["via_run_id"],
    )


def audit_row(m: Mapping[Any, Any]) -> AuditRecord:
    rid = m["run_id"]
    detail = _load(m["detail"], rid, f"audit row {m['id']} detail")
    return AuditRecord(
        id=int(m["id"]),
        run_id=rid,
        at=m["at"],
        action=parse_status(AuditAction, m["action"], rid, f"audit row {m['id']}"),
        actor=m["actor"],
        via=parse_status(AuditVia, m["via"], rid, f"audit row {m['id']} via"),
        reason=m["reason"],
        target=m["target"],
        detail=detail if isinstance(detail, dict) else {},
    )


def audit_params(entry: NewAudit) -> dict[str, Any]:
    return {
        "run": entry.run_id,
        "what": entry.action.value,
        "who": entry.actor,
        "through": entry.via.value,
        "why": entry.reason or "",
        "which": entry.target,
        "details": _dump(entry.detail or {}),
        "event": entry.event_key,
        "now": time.time(),
    }


def audit_insert_from(policy: DialectPolicy, run_ids: sa.Select[Any]) -> Any:
    """An audit row per run id ``run_ids`` yields (insert-if-absent on its event key)."""
    values = [policy.clock(), *(v.self_group() for v in AUDIT_VALUES.values())]
    source = run_ids.add_columns(*values)
    columns = ["run_id", "at", *AUDIT_VALUES]
    return (
        policy.insert(audit).from_select(columns, source).on_conflict_do_nothing(index_elements=["event_key"])
    )


class AuditReads(GateReads, Protocol):
    """The statements ``SqlAudit`` reads (its own and other areas')."""

    audit_insert: Prepared
    audit_insert_unread: Prepared
    audit_of_run: Prepared
    audit_queued: Prepared
    gate_get: Prepared
    gate_insert: Prepared
    gates_of_origin: Prepared
    record_settle: Prepared
    wake_awaiting: Prepared


class SqlAudit(SqlPlumbing):
    """``AuditPart`` (``journal/parts.py``) on the statements above."""

    _q: AuditReads

    def decide_call(
        self, run_id: str, suffix: str, decision: RecordStatus, *, error: str | None, audit: NewAudit
    ) -> ToolRecord | None:
        check_not_condemned_row(audit)
        q = self._q
        params = {
            "run": run_id,
            "step_suffix": suffix,
            "expected": RecordStatus.SUSPENDED.value,
            "new_status": decision.value,
            "new_output": None,
            "new_error": error,
            "now": time.time(),
        }

        def work(tx: driver.Tx) -> driver.Row:
            # The call gate first (a condemned or ended run refuses): condemn and end_run update the same
            # row, so whichever commits second sees the other.
            call_gate(tx, q, run_id)
            row = tx.one(q.record_settle, params)
            if row is None:
                raise Conflict
            tx.execute(q.audit_insert_unread, audit_params(audit))
            return row

        try:
            return record_row(self._write(work, atomic=True))
        except Conflict:
            return None

    def decide_compensation(self, gate: CompensationGate, audit: NewAudit) -> tuple[CompensationGate, bool]:
        check_not_condemned_row(audit)
        q = self._q
        params = {
            "origin": gate.origin_run_id,
            "step_suffix": gate.suffix,
            "new_decision": gate.decision.value,
            "who": gate.actor,
            "why": gate.reason,
            "via": gate.via_run_id,
            "run": gate.via_run_id,
            "now": time.time(),
        }

        def work(tx: driver.Tx) -> tuple[driver.Row | None, bool]:
            row = tx.one(q.gate_insert, params)
            if row is None:
                return tx.one(q.gate_get, params), False
            tx.execute(q.audit_insert_unread, audit_params(audit))
            tx.execute(q.wake_awaiting, params)
            return row, True

        row, won = self._write(work, atomic=True)
        assert row is not None  # gates are never deleted
        return gate_row(row), won

    def get_gates(
        self, origin_and_suffixes: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], CompensationGate]:
        wanted = set(origin_and_suffixes)
        origins = sorted({o for o, _ in wanted})
        rows = (
            self._fetch(
                lambda tx: [r for o in origins for r in tx.all(self._q.gates_of_origin, {"origin": o})]
            )
            if wanted
            else []
        )
        found = (gate_row(r) for r in rows if (r["origin_run_id"], r["suffix"]) in wanted)
        return {(g.origin_run_id, g.suffix): g for g in found}

    def append_audit(self, entry: NewAudit) -> bool:
        check_not_condemned_row(entry)
        params = audit_params(entry)
        return self._write(lambda tx: tx.one(self._q.audit_insert, params)) is not None

    def read_audit(self, run_id: str) -> list[AuditRecord]:
        rows = self._fetch(lambda tx: tx.all(self._q.audit_of_run, {"run": run_id}))
        return [audit_row(r) for r in rows]

    def queued_unwinds(self, since: float, *, limit: int = 500) -> list[AuditRecord]:
        rows = self._fetch(lambda tx: tx.all(self._q.audit_queued, {"since": since, "limit": limit}))
        return [audit_row(r) for r in rows]
