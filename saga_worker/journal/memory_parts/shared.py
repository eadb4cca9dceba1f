"""Cross-run shared executions in memory (one execution for identical calls of several runs in a window)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...core.storable import storable_or_none
from ..records import SharedAction, SharedStatus
from .common import MemoryState
from .common import copy_json as _copy


def shared_out(action: SharedAction) -> SharedAction:
    return replace(action, input=_copy(action.input), output=_copy(action.output))


class MemoryShared(MemoryState):
    """``SharedPart`` (``journal/parts.py``) in memory."""

    _shared: dict[tuple[str, int], SharedAction]

    def latest_shared(self, key: str) -> SharedAction | None:
        with self._lock:
            found = [a for (k, _), a in self._shared.items() if k == key]
            return shared_out(max(found, key=lambda a: a.generation)) if found else None

    def get_shared(self, shared_id: str) -> SharedAction | None:
        key, _, generation = shared_id.rpartition(":")
        with self._lock:
            found = self._shared.get((key, int(generation))) if generation.isdigit() else None
            return None if found is None else shared_out(found)

    def insert_shared(
        self,
        key: str,
        generation: int,
        tool_name: str,
        input: Any,
        run_id: str,
        window_s: float,
        *,
        gated_run: str | None = None,
    ) -> SharedAction | None:
        with self._lock:
            if gated_run is not None:
                self._tombstone_gate(gated_run, True)
            if (key, generation) in self._shared:
                return None
            now = self.now()
            action = SharedAction(
                shared_id=f"{key}:{generation}",
                key=key,
                generation=generation,
                tool_name=tool_name,
                input=_copy(input),
                status=SharedStatus.RUNNING,
                output=None,
                error=None,
                attempts=1,
                run_id=run_id,
                created_at=now,
                expires_at=now + window_s,
            )
            self._shared[(key, generation)] = action
            return shared_out(action)

    def settle_shared(
        self,
        shared_id: str,
        expected: SharedStatus,
        status: SharedStatus,
        *,
        output: Any = None,
        error: str | None = None,
        reclaim: bool = False,
        gated_run: str | None = None,
    ) -> SharedAction | None:
        key, _, generation = shared_id.rpartition(":")
        with self._lock:
            if gated_run is not None:
                self._tombstone_gate(gated_run, True)
            current = self._shared.get((key, int(generation)))
            if current is None or current.status is not expected:
                return None
            if reclaim:
                current = replace(
                    current, status=SharedStatus.RUNNING, attempts=current.attempts + 1, error=None
                )
            else:
                current = replace(current, status=status, output=_copy(output), error=storable_or_none(error))
            self._shared[(key, int(generation))] = current
            return shared_out(current)
