"""An in-process journal for tests and experiments: same semantics as the SQL one, no durability."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..errors import CompensatedRunError, RunEndedError, RunExistsError, UnknownRunError
from ..storable import storable_or_none
from .base import Journal
from .memory_parts.audit import MemoryAudit
from .memory_parts.claims import MemoryClaims
from .memory_parts.common import copy_json as _copy
from .memory_parts.common import record_out, run_out
from .memory_parts.shared import MemoryShared
from .memory_parts.unwinds import MemoryUnwinds
from .records import (
    AuditRecord,
    CompensationClaim,
    CompensationGate,
    NewAudit,
    NewRecord,
    RecordStatus,
    RunInfo,
    RunQuery,
    RunStatus,
    SharedAction,
    StepFinish,
    ToolRecord,
    UnwindInfo,
    UnwindState,
    contains_words,
)


def _new_run(
    run_id: str, status: RunStatus, prompt: str, now: float, *, source_run_id: str | None = None
) -> RunInfo:
    return RunInfo(
        run_id=run_id,
        status=status,
        prompt=prompt,
        text="",
        error=None,
        condemned_at=None,
        created_at=now,
        updated_at=now,
        source_run_id=source_run_id,
    )


class MemoryJournal(MemoryUnwinds, MemoryAudit, MemoryShared, MemoryClaims, Journal):
    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self._lock = threading.RLock()
        self._runs: dict[str, RunInfo] = {}
        self._decisions: dict[str, dict[int, Any]] = {}  # run id -> step -> payload, as SQL keys them
        self._records: dict[tuple[str, str], ToolRecord] = {}
        self._suffixes: dict[str, list[str]] = {}  # run id -> its records' suffixes (an index, as SQL has)
        self._claims: dict[tuple[str, str], CompensationClaim] = {}
        self._seq = 0
        self._unwinds: dict[str, UnwindInfo] = {}
        self._unwind_entries: dict[str, dict[int, dict[str, Any]]] = {}
        self._gates: dict[tuple[str, str], CompensationGate] = {}
        self._audit: dict[str, list[AuditRecord]] = {}
        self._audit_keys: set[str] = set()
        self._audit_seq = 0
        self._shared: dict[tuple[str, int], SharedAction] = {}

    # -- runs -------------------------------------------------------------------------------------
    def start_run(self, run_id: str, prompt: str, *, traceparent: str | None = None) -> tuple[RunInfo, bool]:
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None:
                if run.condemned:
                    raise CompensatedRunError(run_id)
                return run, False
            run = replace(_new_run(run_id, RunStatus.RUNNING, prompt, self.now()), traceparent=traceparent)
            self._runs[run_id] = run
            return run, True

    def get_run(self, run_id: str) -> RunInfo | None:
        with self._lock:
            run = self._runs.get(run_id)
            return None if run is None else run_out(run)

    def page_runs(self, query: RunQuery) -> list[RunInfo]:
        def wanted(r: RunInfo) -> bool:
            return (
                (query.status is None or r.status is query.status)
                and (query.condemned is None or r.condemned is query.condemned)
                and (query.unwind_state is None or r.unwind_state is query.unwind_state)
                and (query.search is None or r.run_id.startswith(query.search))
                and (query.contains is None or contains_words(r.run_id, query.contains))
                and (query.before is None or (r.updated_at, r.run_id) < query.before)
            )

        with self._lock:
            found = [run_out(r) for r in self._runs.values() if wanted(r)]  # parsed, as SQL's rows are
        return sorted(found, key=lambda r: (r.updated_at, r.run_id), reverse=True)[: query.limit]

    def count_runs(self, unwind_state: UnwindState) -> int:
        with self._lock:
            return sum(1 for r in self._runs.values() if r.unwind_state is unwind_state)

    def end_run(self, run_id: str, status: RunStatus, text: str, error: str | None) -> RunInfo:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                raise UnknownRunError(run_id)
            if run.status is RunStatus.RUNNING:
                run = replace(
                    run, status=status, text=text, error=storable_or_none(error), updated_at=self.now()
                )
                self._runs[run_id] = run
            return run

    def condemn(self, run_id: str, *, audit: NewAudit | None = None) -> float:
        with self._lock:
            now = self.now()
            run = self._runs.get(run_id)
            if run is None:
                run = _new_run(run_id, RunStatus.UNKNOWN, "", now)
            if run.condemned_at is None:
                if audit is not None:
                    self._append(audit)
                run = replace(
                    run,
                    condemned_at=now,
                    updated_at=now,
                    unwind_state=UnwindState.PENDING,
                    unwind_next_at=now,
                )
                self._runs[run_id] = run
            assert run.condemned_at is not None
            return run.condemned_at

    # -- decisions --------------------------------------------------------------------------------
    def record_decision(self, run_id: str, step: int, payload: Any) -> Any:
        with self._lock:
            # Keyed by step, as SQL's rows are: a step written out of order is stored where it says.
            steps = self._decisions.setdefault(run_id, {})
            if step not in steps:
                run = self._runs.get(run_id)
                if run is not None and run.ended:
                    raise RunEndedError(run_id, str(getattr(run.status, "value", run.status)))
                steps[step] = _copy(payload)
            return _copy(steps[step])

    def list_decisions(self, run_id: str) -> list[Any]:
        with self._lock:
            steps = self._decisions.get(run_id, {})
            return [_copy(steps[n]) for n in sorted(steps)]

    # -- records ----------------------------------------------------------------------------------
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
        wanted = (RecordStatus.SUSPENDED, RecordStatus.RUNNING)
        with self._lock:
            rows = [record_out(r) for r in self._records.values() if r.status in wanted]
        return sorted(rows, key=lambda r: (r.updated_at, r.run_id, r.suffix))[:limit]

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
                exec_owner=owner,
                exec_lease_expires_at=now + ttl,
            )
            self._records[(run_id, new.suffix)] = record
            self._suffixes.setdefault(run_id, []).append(new.suffix)
            return record_out(record)

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

    def fork(self, source_run_id: str, step: int, new_run_id: str) -> None:
        with self._lock:
            source = self._runs.get(source_run_id)
            if source is None:
                raise UnknownRunError(source_run_id)
            if source.condemned:
                raise CompensatedRunError(source_run_id)
            target = self._runs.get(new_run_id)
            if target is not None:
                if target.condemned:
                    raise CompensatedRunError(new_run_id)
                raise RunExistsError(new_run_id)
            now = self.now()
            self._runs[new_run_id] = _new_run(
                new_run_id, RunStatus.RUNNING, source.prompt, now, source_run_id=source_run_id
            )
            self._decisions[new_run_id] = {
                n: _copy(p) for n, p in self._decisions.get(source_run_id, {}).items() if n <= step
            }
            for record in self.list_records(source_run_id):
                if record.step <= step:
                    self._seq += 1
                    self._records[(new_run_id, record.suffix)] = replace(
                        record, run_id=new_run_id, seq=self._seq
                    )
                    self._suffixes.setdefault(new_run_id, []).append(record.suffix)

    # -- what spans parts, made one step under the lock (the defaults are Journal's) ----------------
    def record_unwind(self, unwind_id: str, run_id: str, **kw: Any) -> UnwindInfo:
        with self._lock:  # reentrant: the unwind and its hold are one step for every other thread
            return super().record_unwind(unwind_id, run_id, **kw)

    def finish_step(self, *args: Any, won: dict[str, Any], lost: dict[str, Any], **kw: Any) -> StepFinish:
        won, lost = _copy(won), _copy(lost)  # an entry that cannot be stored fails before any write
        with self._lock:  # reentrant: the two writes are one step for every other thread
            return super().finish_step(*args, won=won, lost=lost, **kw)
