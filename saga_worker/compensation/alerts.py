"""Telling the operator: a step that halts an unwind, and an unwind a person must look at, are logged
at the level each deserves, counted, and sent as signals an app can connect to
(docs/guides/operations.md, "Alerts").

A step that ends ``failed`` (its hook raised, or its workers were lost too often) and an unwind the
sweeper gave up on are logged at ERROR on the logger ``saga_worker.compensation.alerts``, so Sentry's logging
integration and any log alert see them; a ``busy`` step at WARNING (another unwinder holds it: it
usually clears itself); an ``awaiting-approval`` step at INFO (a person was asked, on purpose).

The signals are Celery's kind (``celery.utils.dispatch.Signal``): ``unwind_halted.connect(receiver)``.
A receiver that raises is logged by Celery's dispatcher and never reaches the unwind; nothing here
may break the unwind it describes (``observing/guard.py``).
"""

from __future__ import annotations

import logging
from typing import Any

from celery.utils.dispatch import Signal

from ..observing import metrics, quietly
from .report import CompensationEntry, CompensationStatus

log = logging.getLogger(__name__)  # saga_worker.compensation.alerts, as the operations guide says

unwind_halted = Signal(
    name="unwind_halted",
    providing_args=["run_id", "step", "tool", "key", "status", "error", "attempts", "worker_lost"],
)
"""Sent when a step halts an unwind (``failed``, ``busy``, ``awaiting-approval``), by the process
that decided the step, as it decides it."""

unwind_needs_attention = Signal(
    name="unwind_needs_attention", providing_args=["run_id", "note", "step", "tool", "key", "error"]
)
"""Sent when an unwind is flagged ``attention``: the sweeper gave up re-driving it, its step's workers
were lost too often, its tools are missing, or its row cannot be read. A person must act."""

LEVELS = {
    CompensationStatus.FAILED: logging.ERROR,
    CompensationStatus.BUSY: logging.WARNING,
    CompensationStatus.AWAITING_APPROVAL: logging.INFO,
}


def _fields(run_id: str, entry: CompensationEntry | None) -> dict[str, Any]:
    return {
        "saga_run_id": run_id,
        "saga_step": None if entry is None else entry.suffix,
        "saga_tool": None if entry is None else entry.tool_name,
        "saga_key": None if entry is None else entry.idempotency_key,
        "saga_error": None if entry is None else entry.error,
    }


def step_halted(run_id: str, entry: CompensationEntry) -> None:
    """Say that ``entry``'s step halted ``run_id``'s unwind (nothing when its status does not halt)."""
    level = LEVELS.get(entry.status)
    if level is None:
        return
    with quietly("alerting on a halted unwind"):
        why = "its workers were lost too often" if entry.worker_lost else entry.status.value
        log.log(
            level,
            "unwind of run %s halted at step %s (tool %r, key %s, attempts %d): %s%s",
            run_id,
            entry.suffix,
            entry.tool_name,
            entry.idempotency_key,
            entry.attempts,
            why,
            f": {entry.error}" if entry.error else "",
            extra={**_fields(run_id, entry), "saga_status": entry.status.value},
        )
        metrics.inc(metrics.UNWINDS_HALTED, entry.tool_name, entry.status.value)
        if entry.status is CompensationStatus.FAILED and not entry.worker_lost:
            metrics.inc(metrics.HOOKS_FAILED, entry.tool_name)
    with quietly("sending unwind_halted"):
        unwind_halted.send(
            sender=run_id,
            run_id=run_id,
            step=entry.suffix,
            tool=entry.tool_name,
            key=entry.idempotency_key,
            status=entry.status.value,
            error=entry.error,
            attempts=entry.attempts,
            worker_lost=entry.worker_lost,
        )


def needs_attention(run_id: str, note: str, entry: CompensationEntry | None = None) -> None:
    """Say, at ERROR, that ``run_id``'s unwind waits for a person (``note``: why)."""
    with quietly("alerting on an unwind that needs attention"):
        where = (
            ""
            if entry is None
            else f" at step {entry.suffix} (tool {entry.tool_name!r}, key {entry.idempotency_key})"
        )
        log.error(
            "unwind of run %s needs a person%s: %s",
            run_id,
            where,
            note,
            extra={**_fields(run_id, entry), "saga_note": note},
        )
        metrics.inc(metrics.UNWINDS_NEEDING_ATTENTION)
    with quietly("sending unwind_needs_attention"):
        unwind_needs_attention.send(
            sender=run_id,
            run_id=run_id,
            note=note,
            step=None if entry is None else entry.suffix,
            tool=None if entry is None else entry.tool_name,
            key=None if entry is None else entry.idempotency_key,
            error=None if entry is None else entry.error,
        )


__all__ = ["LEVELS", "needs_attention", "step_halted", "unwind_halted", "unwind_needs_attention"]
