"""What the memory journal's parts share: its lock and runs (the tombstone gate), values copied as JSON."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...core.keys import canonical_json
from ...errors import CompensatedRunError, RunEndedError, UnknownRunError
from ..records import NewAudit, RecordStatus, RunInfo, RunStatus, ToolRecord, UnwindState, parse_status


def copy_json(value: Any) -> Any:
    """Values go in and out as JSON, as they do in SQL, so callers can never alias journal state."""
    return None if value is None else json.loads(canonical_json(value))


def record_out(record: ToolRecord) -> ToolRecord:
    """A record as handed out: its input and output are copies, as a SQL row's would be, and its
    status is parsed as a SQL row's is (an unknown one fails closed: see ``parse_status``)."""
    status = parse_status(RecordStatus, record.status, record.run_id, f"{record.suffix!r}")
    return replace(record, status=status, input=copy_json(record.input), output=copy_json(record.output))


def run_out(run: RunInfo) -> RunInfo:
    parse_status(RunStatus, run.status, run.run_id, "run status")
    parse_status(UnwindState, run.unwind_state, run.run_id, "unwind state")
    return run


class MemoryState:
    """The lock every part of ``MemoryJournal`` takes (reentrant: one part's write may call another's)."""

    _lock: threading.RLock
    _runs: dict[str, RunInfo]
    _records: dict[tuple[str, str], ToolRecord]

    def now(self) -> float:
        return time.time()

    if TYPE_CHECKING:

        def _append(self, entry: NewAudit) -> bool:
            """An audit row, under the lock (``MemoryAudit``'s): the tombstone and the unwind state
            write theirs with it."""

    def _tombstone_gate(self, run_id: str, gated: bool) -> None:
        """Under the lock, as SQL's statement on the run's row: refuse a condemned run (``gated``) and
        one that has ended."""
        run = self._runs.get(run_id)
        if run is None:
            raise UnknownRunError(run_id)
        if gated and run.condemned:
            raise CompensatedRunError(run_id)
        if run.ended:
            raise RunEndedError(run_id, str(getattr(run.status, "value", run.status)))

    def _cas(self, run_id: str, suffix: str, expected: RecordStatus, **changes: Any) -> ToolRecord | None:
        record = self._records.get((run_id, suffix))
        if record is None or record.status is not expected:
            return None
        record = replace(record, updated_at=self.now(), **changes)
        self._records[(run_id, suffix)] = record
        return record_out(record)
