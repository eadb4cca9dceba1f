"""Runs (their tombstones and planner decisions) in memory."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...core.storable import storable_or_none
from ...errors import CompensatedRunError, RunEndedError, UnknownRunError
from ..records import NewAudit, RunInfo, RunQuery, RunStatus, UnwindState, contains_words
from .common import MemoryState, run_out
from .common import copy_json as _copy


def new_run(
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


class MemoryRuns(MemoryState):
    """``RunsPart`` (``journal/parts.py``) in memory, but ``fork`` (``MemoryJournal``: it copies records too)."""

    _decisions: dict[str, dict[int, Any]]  # run id -> step -> payload, as SQL keys them

    def start_run(self, run_id: str, prompt: str, *, traceparent: str | None = None) -> tuple[RunInfo, bool]:
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None:
                if run.condemned:
                    raise CompensatedRunError(run_id)
                return run, False
            run = replace(new_run(run_id, RunStatus.RUNNING, prompt, self.now()), traceparent=traceparent)
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
                run = new_run(run_id, RunStatus.UNKNOWN, "", now)
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
