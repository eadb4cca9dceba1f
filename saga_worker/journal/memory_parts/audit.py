"""Approvals (a person's word on a suspended call or a gated compensation) and the audit trail in memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..records import (
    AuditAction,
    AuditRecord,
    CompensationGate,
    NewAudit,
    RecordStatus,
    ToolRecord,
    UnwindInfo,
    UnwindState,
)
from ..tombstone import check_not_condemned_row
from .common import MemoryState
from .common import copy_json as _copy


class MemoryAudit(MemoryState):
    """``AuditPart`` (``journal/parts.py``) in memory."""

    _gates: dict[tuple[str, str], CompensationGate]
    _audit: dict[str, list[AuditRecord]]
    _audit_keys: set[str]
    _audit_seq: int
    _unwinds: dict[str, UnwindInfo]

    def decide_call(
        self, run_id: str, suffix: str, decision: RecordStatus, *, error: str | None, audit: NewAudit
    ) -> ToolRecord | None:
        check_not_condemned_row(audit)
        with self._lock:
            self._tombstone_gate(run_id, True)
            decided = self._cas(run_id, suffix, RecordStatus.SUSPENDED, status=decision, error=error)
            if decided is not None:
                self._append(audit)
            return decided

    def decide_compensation(self, gate: CompensationGate, audit: NewAudit) -> tuple[CompensationGate, bool]:
        check_not_condemned_row(audit)
        with self._lock:
            key = (gate.origin_run_id, gate.suffix)
            stored = self._gates.get(key)
            if stored is not None:
                return stored, False
            stored = replace(gate, decided_at=self.now())
            self._gates[key] = stored
            self._append(audit)
            run = self._runs.get(gate.via_run_id)
            if run is not None and run.unwind_state is UnwindState.AWAITING:
                self._runs[run.run_id] = replace(
                    run, unwind_state=UnwindState.PENDING, unwind_next_at=self.now(), updated_at=self.now()
                )
            return stored, True

    def get_gates(
        self, origin_and_suffixes: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], CompensationGate]:
        with self._lock:
            return {k: self._gates[k] for k in origin_and_suffixes if k in self._gates}

    def _append(self, entry: NewAudit) -> bool:
        if entry.event_key is not None:
            if entry.event_key in self._audit_keys:
                return False
            self._audit_keys.add(entry.event_key)
        self._audit_seq += 1
        row = AuditRecord(
            id=self._audit_seq,
            run_id=entry.run_id,
            at=self.now(),
            action=entry.action,
            actor=entry.actor,
            via=entry.via,
            reason=entry.reason,
            target=entry.target,
            detail=_copy(entry.detail or {}),
        )
        self._audit.setdefault(entry.run_id, []).append(row)
        return True

    def append_audit(self, entry: NewAudit) -> bool:
        check_not_condemned_row(entry)
        with self._lock:
            return self._append(entry)

    def read_audit(self, run_id: str) -> list[AuditRecord]:
        with self._lock:
            return [replace(r, detail=_copy(r.detail)) for r in self._audit.get(run_id, [])]

    def queued_unwinds(self, since: float, *, limit: int = 500) -> list[AuditRecord]:
        with self._lock:
            found = [
                r
                for rows in self._audit.values()
                for r in rows
                if r.action is AuditAction.UNWIND_QUEUED and r.at >= since and r.target not in self._unwinds
            ]
        found.sort(key=lambda r: (r.at, r.id))
        return [replace(r, detail=_copy(r.detail)) for r in found[:limit]]
