"""Tool records in memory: claimed before ``execute``, settled by compare-and-set, under an execute lease."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ...core.storable import storable_or_none
from ..records import NewRecord, RecordStatus, ToolRecord, UnwindState
from .common import MemoryState, record_out
from .common import copy_json as _copy


class MemoryRecords(MemoryState):
    """``RecordsPart`` (``journal/parts.py``) in memory."""

    _suffixes: dict[str, list[str]]  # run id -> its records' suffixes (an index, as SQL has)
    _seq: int

    def get_record(self, run_id: str, suffix: str) -> ToolRecord | None:
        with self._lock:
            record = self._records.get((run_id, suffix))
            return None if record is None else record_out(record)

    def list_records(self, run_id: str, statuses: Sequence[RecordStatus] | None = None) -> list[ToolRecord]:
        with self._lock:
            rows = [record_out(self._records[(run_id, suffix)]) for suffix in self._suffixes.get(run_id, [])]
        if statuses is not None:  # on parsed rows: an unknown status has failed closed already
            rows = [r for r in rows if r.status in statuses]
        return sorted(rows, key=lambda r: r.seq)

    def waiting_records(self, *, limit: int = 500) -> list[ToolRecord]:
        now = self.now()
        with self._lock:
            rows = [record_out(r) for r in self._records.values() if self._waits_for_a_person(r, now)]
        return sorted(rows, key=lambda r: (r.updated_at, r.run_id, r.suffix))[:limit]

    def _waits_for_a_person(self, record: ToolRecord, now: float) -> bool:
        """As the SQL journal's ``records_waiting``: a suspended call of a run not condemned, or a
        call whose execute lease ran out in a run whose unwind has not completed."""
        run = self._runs.get(record.run_id)
        if run is None:
            return False
        if record.status is RecordStatus.SUSPENDED:
            return run.condemned_at is None
        if record.status is not RecordStatus.RUNNING:
            return False
        lease = record.exec_lease_expires_at
        if lease is not None and lease > now:
            return False
        return run.condemned_at is None or run.unwind_state is not UnwindState.COMPLETE

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
        with self._lock:
            self._tombstone_gate(run_id, gated)
            if (run_id, new.suffix) in self._records:
                return None
            self._seq += 1
            now = self.now()
            record = ToolRecord(
                run_id=run_id,
                suffix=new.suffix,
                seq=self._seq,
                step=new.step,
                tool_call_id=new.tool_call_id,
                tool_name=new.tool_name,
                mode=new.mode,
                input=_copy(new.input),
                status=new.status,
                output=None,
                error=None,
                attempts=0 if new.status is RecordStatus.SUSPENDED else 1,
                origin_run_id=new.origin_run_id,
                created_at=now,
                updated_at=now,
                shared_id=new.shared_id,
                group=new.group,
                exec_owner=owner,
                exec_lease_expires_at=now + ttl,
            )
            self._records[(run_id, new.suffix)] = record
            self._suffixes.setdefault(run_id, []).append(new.suffix)
            return record_out(record)

    def record_in_transaction(
        self,
        run_id: str,
        new: NewRecord,
        effect: Callable[[Any], Any],
        *,
        expected: RecordStatus | None = None,
        attempts: int | None = None,
    ) -> ToolRecord | None:
        with self._lock:  # reentrant: the claim, the effect and the outcome under one hold
            before = self._records.get((run_id, new.suffix))
            if expected is None:
                claimed = self.claim_record(run_id, new, gated=True)
            else:
                claimed = self.reclaim_record(run_id, new.suffix, expected, gated=True, attempts=attempts)
            if claimed is None:
                return None
            try:
                output = effect(None)
            except BaseException:
                # Nothing happened: the record goes back to what it was (absent, or as expected).
                if before is None:
                    del self._records[(run_id, new.suffix)]
                    self._suffixes[run_id].remove(new.suffix)
                else:
                    self._records[(run_id, new.suffix)] = before
                raise
            return self.complete_record(run_id, new.suffix, RecordStatus.SUCCEEDED, output=output)

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
        with self._lock:
            self._tombstone_gate(run_id, gated)
            current = self._records.get((run_id, suffix))
            if current is not None and attempts is not None and current.attempts != attempts:
                return None
            return self._cas(
                run_id,
                suffix,
                expected,
                status=RecordStatus.RUNNING,
                attempts=current.attempts + 1 if current else 1,
                error=None,
                exec_owner=owner,
                exec_lease_expires_at=self.now() + ttl,
            )

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
        with self._lock:
            current = self._records.get((run_id, suffix))
            written = None
            traced = {} if traceparent is None else {"exec_traceparent": traceparent}
            if owner is None or (current is not None and current.exec_owner == owner):
                written = self._cas(
                    run_id,
                    suffix,
                    RecordStatus.RUNNING,
                    status=status,
                    output=_copy(output),
                    error=storable_or_none(error),
                    **traced,
                )
            run = self._runs.get(run_id)
            if run is not None and run.condemned:  # see Journal.complete_record
                self._runs[run_id] = replace(
                    run,
                    unwind_state=UnwindState.PENDING,
                    unwind_note=f"{suffix}: settled {status.value} after the tombstone",
                    unwind_next_at=self.now(),
                    unwind_attempts=0,
                    unwind_epoch=run.unwind_epoch + 1,
                    updated_at=self.now(),
                )
            return written

    def renew_execution(self, run_id: str, suffix: str, owner: str, ttl: float) -> bool:
        with self._lock:
            current = self._records.get((run_id, suffix))
            if current is None or current.status is not RecordStatus.RUNNING or current.exec_owner != owner:
                return False
            self._records[(run_id, suffix)] = replace(current, exec_lease_expires_at=self.now() + ttl)
            return True

    def resolve_record(
        self, run_id: str, suffix: str, expected: RecordStatus, output: Any
    ) -> ToolRecord | None:
        with self._lock:
            return self._cas(
                run_id, suffix, expected, status=RecordStatus.SUCCEEDED, output=_copy(output), error=None
            )
