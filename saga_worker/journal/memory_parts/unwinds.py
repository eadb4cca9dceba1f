"""Unwind bookkeeping in memory: the sweeper's state per run, and the distributed unwinds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ...core.storable import storable_or_none
from ...errors import MalformedRecordError
from ..records import GroupPlan, NewAudit, RunInfo, UnwindInfo, UnwindState
from ..tombstone import check_not_condemned_row
from .common import MemoryState, run_out
from .common import copy_json as _copy

# The unwind states the sweeper leaves alone (every other one, unknown ones included, is read).
_SETTLED = frozenset(s for s in UnwindState if s not in (UnwindState.PENDING, UnwindState.INCOMPLETE))


class MemoryUnwinds(MemoryState):
    """``UnwindsPart`` (``journal/parts.py``) in memory."""

    _unwinds: dict[str, UnwindInfo]
    _unwind_entries: dict[str, dict[int, dict[str, Any]]]
    _redeliveries: dict[str, int]

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
        with self._lock:
            if audit is not None:
                self._append(audit)
            run = self._runs.get(run_id)
            if run is None or (epoch is not None and run.unwind_epoch != epoch):
                return
            self._runs[run_id] = replace(
                run,
                unwind_state=state,
                unwind_note=storable_or_none(note),
                unwind_next_at=next_at,
                unwind_attempts=run.unwind_attempts + (1 if count_attempt else 0),
                updated_at=self.now(),
            )

    def runs_to_sweep(
        self, now: float, *, limit: int = 100, unreadable: list[MalformedRecordError] | None = None
    ) -> list[RunInfo]:
        with self._lock:
            # Every state but the settled ones, as SQL selects: an unknown one is read (and fails closed).
            rows = [
                r
                for r in self._runs.values()
                if r.condemned and r.unwind_state not in _SETTLED and (r.unwind_next_at or 0.0) <= now
            ]
        due: list[RunInfo] = []
        for row in sorted(rows, key=lambda r: r.unwind_next_at or 0.0)[:limit]:
            try:
                due.append(run_out(row))
            except MalformedRecordError as exc:
                if unreadable is None:
                    raise
                unreadable.append(exc)
        return due

    def insert_unwind(
        self,
        unwind_id: str,
        run_id: str,
        *,
        dry_run: bool,
        suffixes: Sequence[str],
        actor: str = "",
        reason: str = "",
        via: str = "worker",
        run_epoch: int | None = None,
        groups: GroupPlan | None = None,
    ) -> UnwindInfo:
        with self._lock:
            stored = self._unwinds.get(unwind_id)
            if stored is None:
                stored = UnwindInfo(
                    unwind_id=unwind_id,
                    run_id=run_id,
                    dry_run=bool(dry_run),
                    suffixes=tuple(suffixes),
                    created_at=self.now(),
                    actor=actor,
                    reason=reason,
                    via=via,
                    run_epoch=run_epoch,
                    groups=groups,
                )
                self._unwinds[unwind_id] = stored
            return stored

    def get_unwind(self, unwind_id: str) -> UnwindInfo | None:
        with self._lock:
            return self._unwinds.get(unwind_id)

    def list_unwinds(self, run_id: str, *, limit: int = 20) -> list[UnwindInfo]:
        with self._lock:
            found = [u for u in self._unwinds.values() if u.run_id == run_id]
        return sorted(found, key=lambda u: (u.created_at, u.unwind_id), reverse=True)[:limit]

    def record_unwind_entry(self, unwind_id: str, position: int, entry: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            entries = self._unwind_entries.setdefault(unwind_id, {})
            if position not in entries:
                entries[position] = _copy(entry)
            return _copy(entries[position])  # type: ignore[no-any-return]

    def list_unwind_entries(self, unwind_id: str) -> dict[int, dict[str, Any]]:
        with self._lock:
            return {p: _copy(e) for p, e in sorted(self._unwind_entries.get(unwind_id, {}).items())}

    def count_redelivery(self, task_id: str) -> int:
        with self._lock:
            self._redeliveries[task_id] = self._redeliveries.get(task_id, 0) + 1
            return self._redeliveries[task_id]

    def forget_redeliveries(self, task_id: str) -> None:
        with self._lock:
            self._redeliveries.pop(task_id, None)
