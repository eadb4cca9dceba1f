"""Deliberately broken builds, to prove the suite bites: each one removes one safety of DESIGN.md §6.

A test applies one in-process (``apply("no-fencing")``) or hands ``--break NAME`` to a child process
(``FAULT_BREAK`` for Celery workers). Nothing here is imported by the product.
"""

from __future__ import annotations

import itertools
from typing import Any

BREAKS = ("no-fencing", "no-tombstone-check", "unstable-key", "no-reject-on-worker-lost")


def apply(name: str) -> None:
    if name not in BREAKS:
        raise ValueError(f"unknown break {name!r}: one of {', '.join(BREAKS)}")
    globals()["_" + name.replace("-", "_")]()


def _no_fencing() -> None:
    """Redis lock only: the journal's claim always says yes, and any holder writes its outcome."""
    from saga_worker.journal import memory, sql
    from saga_worker.journal.records import ClaimAttempt, ClaimStatus

    for cls in (sql.SqlJournal, memory.MemoryJournal):
        claim, finish = cls.claim_compensation, cls.finish_claim

        def claim_anyway(self: Any, origin: str, suffix: str, *, _claim: Any = claim, **kw: Any) -> ClaimAttempt:
            got = _claim(self, origin, suffix, **kw)
            if got.acquired or (got.claim is not None and got.claim.status is ClaimStatus.COMPENSATED):
                return got
            return ClaimAttempt(True, got.claim)

        def finish_anyway(self: Any, origin: str, suffix: str, owner: str, status: Any, error: Any = None,
                          *, _finish: Any = finish) -> bool:
            current = self.get_claim(origin, suffix)
            if current is not None and current.owner != owner:
                _finish(self, origin, suffix, current.owner, status, error)
            _finish(self, origin, suffix, owner, status, error)
            return True

        cls.claim_compensation = claim_anyway  # type: ignore[method-assign]
        cls.finish_claim = finish_anyway  # type: ignore[method-assign]


def _no_tombstone_check() -> None:
    """A resumed or live run claims its next tool call without looking at the tombstone."""
    from saga_worker.journal import memory, sql

    for cls in (sql.SqlJournal, memory.MemoryJournal):
        claim, reclaim = cls.claim_record, cls.reclaim_record
        cls.claim_record = (lambda self, run_id, new, *, gated, _c=claim:  # type: ignore[method-assign]
                            _c(self, run_id, new, gated=False))
        cls.reclaim_record = (lambda self, run_id, suffix, expected, *, gated, _r=reclaim:  # type: ignore[method-assign]
                              _r(self, run_id, suffix, expected, gated=False))


def _unstable_key() -> None:
    """The compensation key changes on every attempt, so the provider cannot deduplicate a retry."""
    from saga_worker.compensation import engine

    counter = itertools.count()
    stable = engine.compensate_key

    def fresh(origin: str, suffix: str) -> str:
        return f"{stable(origin, suffix)}-try{next(counter)}"

    engine.compensate_key = fresh  # type: ignore[assignment]


def _no_reject_on_worker_lost() -> None:
    """Celery acks a task whose worker died: the interrupted step is not redelivered."""
    from celery import current_app

    import tasks  # noqa: F401  (the Celery layer)

    for task in current_app.tasks.values():
        if task.name.startswith("saga."):
            task.reject_on_worker_lost = False
            task.acks_on_failure_or_timeout = True
