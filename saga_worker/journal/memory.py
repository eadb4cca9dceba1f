"""An in-process journal for tests and experiments: same semantics as the SQL one, no durability."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from ..errors import CompensatedRunError, RunExistsError, UnknownRunError
from .base import Journal
from .memory_parts.audit import MemoryAudit
from .memory_parts.claims import MemoryClaims
from .memory_parts.common import copy_json as _copy
from .memory_parts.records import MemoryRecords
from .memory_parts.retention import MemoryRetention
from .memory_parts.runs import MemoryRuns, new_run
from .memory_parts.shared import MemoryShared
from .memory_parts.unwinds import MemoryUnwinds
from .records import (
    AuditRecord,
    ClaimAttempt,
    CompensationClaim,
    CompensationGate,
    RunInfo,
    RunStatus,
    SharedAction,
    StepFinish,
    ToolRecord,
    UnwindInfo,
    WorklistView,
)
from .retention import refuse_pruned


class MemoryJournal(
    MemoryRuns,
    MemoryRecords,
    MemoryUnwinds,
    MemoryAudit,
    MemoryShared,
    MemoryClaims,
    MemoryRetention,
    Journal,
):
    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self._lock = threading.RLock()
        self._runs: dict[str, RunInfo] = {}
        self._decisions: dict[str, dict[int, Any]] = {}  # run id -> step -> payload, as SQL keys them
        self._records: dict[tuple[str, str], ToolRecord] = {}
        self._suffixes: dict[str, list[str]] = {}  # run id -> its records' suffixes (an index, as SQL has)
        self._claims: dict[tuple[str, str], CompensationClaim] = {}
        self._lease_deadlines: dict[tuple[str, str], float] = {}
        self._seq = 0
        self._unwinds: dict[str, UnwindInfo] = {}
        self._unwind_entries: dict[str, dict[int, dict[str, Any]]] = {}
        self._redeliveries: dict[str, int] = {}
        self._gates: dict[tuple[str, str], CompensationGate] = {}
        self._audit: dict[str, list[AuditRecord]] = {}
        self._audit_keys: set[str] = set()
        self._audit_seq = 0
        self._shared: dict[tuple[str, int], SharedAction] = {}

    # -- what spans parts ---------------------------------------------------------------------------
    def fork(self, source_run_id: str, step: int, new_run_id: str) -> None:
        with self._lock:
            source = self._runs.get(source_run_id)
            if source is None:
                raise UnknownRunError(source_run_id)
            if source.condemned:
                raise CompensatedRunError(source_run_id)
            refuse_pruned(source)
            target = self._runs.get(new_run_id)
            if target is not None:
                if target.condemned:
                    raise CompensatedRunError(new_run_id)
                raise RunExistsError(new_run_id)
            now = self.now()
            self._runs[new_run_id] = new_run(
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

    def condemn_read_and_claim(self, *args: Any, **kw: Any) -> tuple[WorklistView, ClaimAttempt | None]:
        with self._lock:  # reentrant: the tombstone and the first claim are one step for every other thread
            return super().condemn_read_and_claim(*args, **kw)

    def finish_and_claim(self, *args: Any, **kw: Any) -> ClaimAttempt | None:
        with self._lock:  # reentrant: the outcome and the claim are one step for every other thread
            return super().finish_and_claim(*args, **kw)

    def finish_last_step(self, *args: Any, **kw: Any) -> bool:
        with self._lock:  # reentrant: the outcome and the state are one step for every other thread
            return super().finish_last_step(*args, **kw)

    def finish_step(self, *args: Any, won: dict[str, Any], lost: dict[str, Any], **kw: Any) -> StepFinish:
        won, lost = _copy(won), _copy(lost)  # an entry that cannot be stored fails before any write
        with self._lock:  # reentrant: the two writes are one step for every other thread
            return super().finish_step(*args, won=won, lost=lost, **kw)
