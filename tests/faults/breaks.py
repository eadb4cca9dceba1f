"""Deliberately broken builds, to prove the suite bites: each one removes one safety of docs/reference/safety.md.

A test applies one in-process (``apply("no-fencing")``) or hands ``--break NAME`` to a child process
(``FAULT_BREAK`` for Celery workers). Nothing here is imported by the product.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

Setter = Callable[[Any, str, Any], None]

BREAKS = ("no-fencing", "no-tombstone-check", "unstable-key", "no-reject-on-worker-lost")


def apply(name: str, setter: Setter = setattr) -> None:
    """Break the product in this process; a test passes ``monkeypatch.setattr`` to have it undone."""
    if name not in BREAKS:
        raise ValueError(f"unknown break {name!r}: one of {', '.join(BREAKS)}")
    globals()["_" + name.replace("-", "_")](setter)


def _no_fencing(setter: Setter) -> None:
    """Redis lock only: the journal's claim always says yes, and any holder writes its outcome."""
    import sqlalchemy as sa

    from saga_worker.journal import Journal, memory, sql
    from saga_worker.journal.records import ClaimAttempt, ClaimStatus, StepFinish
    from saga_worker.journal.schema import claims
    from saga_worker.journal.sql_parts.common import server_clock

    for cls in (sql.SqlJournal, memory.MemoryJournal):

        def claim_anyway(
            self: Any, origin: str, suffix: str, *, _claim: Any = cls.claim_compensation, **kw: Any
        ) -> ClaimAttempt:
            got: ClaimAttempt = _claim(self, origin, suffix, **kw)
            if got.acquired or (got.claim is not None and got.claim.status is ClaimStatus.COMPENSATED):
                return got
            return ClaimAttempt(True, got.claim)

        setter(cls, "claim_compensation", claim_anyway)

    def sql_finish(self: Any, origin: str, suffix: str, owner: str, status: Any, error: Any = None) -> bool:
        finished = server_clock("postgresql") if self.dialect == "postgresql" else sa.literal(time.time())
        with self.engine.begin() as conn:
            conn.execute(
                sa.update(claims)
                .where(claims.c.origin_run_id == origin, claims.c.suffix == suffix)
                .values(status=status.value, owner=owner, error=error, finished_at=finished)
            )
        return True

    def memory_finish(
        self: Any, origin: str, suffix: str, owner: str, status: Any, error: Any = None
    ) -> bool:
        from dataclasses import replace

        with self._lock:
            current = self._claims.get((origin, suffix))
            if current is not None:
                self._claims[(origin, suffix)] = replace(
                    current, status=status, owner=owner, error=error, finished_at=self.now()
                )
        return True

    setter(sql.SqlJournal, "finish_claim", sql_finish)
    setter(memory.MemoryJournal, "finish_claim", memory_finish)

    def finish_step_anyway(
        self: Any, origin: str, suffix: str, owner: str, status: Any, error: Any = None, **at: Any
    ) -> StepFinish:
        """A step task's outcome and entry (Journal.finish_step), through the unfenced finish above."""
        self.finish_claim(origin, suffix, owner, status, error)
        return StepFinish(True, self.record_unwind_entry(at["unwind_id"], at["position"], at["won"]))

    for cls in (sql.SqlJournal, memory.MemoryJournal):
        setter(cls, "finish_step", finish_step_anyway)
        # The in-process unwind's outcomes with the next claim and with the end state, through the
        # broken methods above.
        setter(cls, "finish_and_claim", Journal.finish_and_claim)
        setter(cls, "finish_last_step", Journal.finish_last_step)


def _no_tombstone_check(setter: Setter) -> None:
    """A resumed or live run claims its next tool call without looking at the tombstone."""
    from saga_worker.journal import memory, sql

    for cls in (sql.SqlJournal, memory.MemoryJournal):
        claim, reclaim = cls.claim_record, cls.reclaim_record
        setter(
            cls,
            "claim_record",
            lambda self, run_id, new, *, gated, _c=claim, **kw: _c(self, run_id, new, gated=False, **kw),
        )
        setter(
            cls,
            "reclaim_record",
            lambda self, run_id, suffix, expected, *, gated, _r=reclaim, **kw: _r(
                self, run_id, suffix, expected, gated=False, **kw
            ),
        )


def _unstable_key(setter: Setter) -> None:
    """The compensation key changes on every attempt, so the provider cannot deduplicate a retry."""
    from saga_worker.compensation import attempt, entries
    from saga_worker.core.keys import compensate_key as stable

    def fresh(origin: str, suffix: str) -> str:
        return f"{stable(origin, suffix)}-{uuid.uuid4().hex[:8]}"

    # Everywhere the unwind names a step's key: the hook's call (attempt) and the report's entry.
    for module in (attempt, entries):
        setter(module, "compensate_key", fresh)


def _no_reject_on_worker_lost(setter: Setter) -> None:
    """Celery acks a task whose worker died: the interrupted step is not redelivered."""
    from saga_worker.celery import default_app

    for task in default_app().tasks.values():
        if task.name.startswith("saga."):
            setter(task, "reject_on_worker_lost", False)
            setter(task, "acks_on_failure_or_timeout", True)
