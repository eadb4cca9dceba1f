"""Retention in memory: the rule (``journal/retention.py``) under the journal's lock."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from ..records import (
    AuditRecord,
    CompensationClaim,
    CompensationGate,
    JournalSize,
    RunInfo,
    UnwindInfo,
)
from ..retention import PRUNABLE_STATUSES, UNRESOLVED_CALLS, Archive, unwind_settled
from .common import MemoryState, run_out

FIRST = (float("-inf"), "")


class MemoryRetention(MemoryState):
    """``RetentionPart`` (``journal/parts.py``) in memory."""

    _decisions: dict[str, dict[int, Any]]
    _suffixes: dict[str, list[str]]
    _claims: dict[tuple[str, str], CompensationClaim]
    _lease_deadlines: dict[tuple[str, str], float]
    _gates: dict[tuple[str, str], CompensationGate]
    _unwinds: dict[str, UnwindInfo]
    _unwind_entries: dict[str, dict[int, dict[str, Any]]]
    _audit: dict[str, list[AuditRecord]]

    def _prunable(self, before: float, after: tuple[float, str] | None) -> Iterator[RunInfo]:
        forked = {r.origin_run_id for r in self._records.values() if r.origin_run_id != r.run_id}
        unresolved = {r.run_id for r in self._records.values() if r.status in UNRESOLVED_CALLS}
        start = after or FIRST
        for run in sorted(self._runs.values(), key=lambda r: (r.updated_at, r.run_id)):
            if (
                run.pruned_at is None
                and run.status in PRUNABLE_STATUSES
                and unwind_settled(run)
                and run.updated_at < before
                and (run.updated_at, run.run_id) > start
                and run.run_id not in unresolved
                and run.run_id not in forked
            ):
                yield run

    def prunable_runs(
        self, before: float, *, limit: int = 100, after: tuple[float, str] | None = None
    ) -> list[RunInfo]:
        with self._lock:
            found: list[RunInfo] = []
            for run in self._prunable(before, after):
                if len(found) >= limit:
                    break
                found.append(run_out(run))
            return found

    def count_prunable(self, before: float) -> int:
        with self._lock:
            return sum(1 for _ in self._prunable(before, None))

    def prune_runs(
        self,
        before: float,
        *,
        limit: int = 500,
        after: tuple[float, str] | None = None,
        archive: Archive | None = None,
    ) -> list[RunInfo]:
        with self._lock:
            batch = self.prunable_runs(before, limit=limit, after=after)
            if archive is not None and batch:
                archive([self._archived(run) for run in batch])
            stamp = self.now()
            stubs = []
            for run in batch:
                self._remove_rows(run.run_id)
                stub = replace(run, prompt="", text="", error=None, pruned_at=stamp)
                self._runs[run.run_id] = stub
                stubs.append(stub)
            return stubs

    def _archived(self, run: RunInfo) -> dict[str, Any]:
        run_id = run.run_id
        unwinds = [u for u in self._unwinds.values() if u.run_id == run_id]
        return {
            "run": _row(run),
            "decisions": [
                {"run_id": run_id, "step": n, "payload": p}
                for n, p in sorted(self._decisions.get(run_id, {}).items())
            ],
            "records": [_row(self._records[(run_id, s)]) for s in self._suffixes.get(run_id, [])],
            "claims": [_row(c) for (origin, _), c in self._claims.items() if origin == run_id],
            "gates": [_row(g) for (origin, _), g in self._gates.items() if origin == run_id],
            "unwinds": [_row(u) for u in unwinds],
            "unwind_entries": [
                {"unwind_id": u.unwind_id, "position": n, "entry": e}
                for u in unwinds
                for n, e in sorted(self._unwind_entries.get(u.unwind_id, {}).items())
            ],
            "audit": [_row(a) for a in self._audit.get(run_id, [])],
        }

    def _remove_rows(self, run_id: str) -> None:
        self._decisions.pop(run_id, None)
        for suffix in self._suffixes.pop(run_id, []):
            self._records.pop((run_id, suffix), None)
        for key in [k for k in self._claims if k[0] == run_id]:
            self._claims.pop(key, None)
            self._lease_deadlines.pop(key, None)
        for key in [k for k in self._gates if k[0] == run_id]:
            self._gates.pop(key, None)
        for unwind_id in [u.unwind_id for u in self._unwinds.values() if u.run_id == run_id]:
            self._unwinds.pop(unwind_id, None)
            self._unwind_entries.pop(unwind_id, None)
        self._audit.pop(run_id, None)

    def journal_size(self) -> JournalSize:
        with self._lock:
            live = [r for r in self._runs.values() if r.pruned_at is None]
            oldest = min(live, key=lambda r: (r.updated_at, r.run_id), default=None)
            return JournalSize(
                runs=len(live),
                pruned=len(self._runs) - len(live),
                oldest_run_id=None if oldest is None else oldest.run_id,
                oldest_at=None if oldest is None else oldest.updated_at,
            )


def _row(value: Any) -> dict[str, Any]:
    """A stored value as a plain dict (its enums as their values), as an archive line holds it."""
    out = dataclasses.asdict(value)
    return {k: getattr(v, "value", v) for k, v in out.items()}
