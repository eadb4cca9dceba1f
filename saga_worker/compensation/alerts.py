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
from typing import TYPE_CHECKING, Any

from ..observing import metrics, quietly
from .report import CompensationEntry, CompensationStatus

if TYPE_CHECKING:
    from celery.utils.dispatch import Signal

    unwind_halted: Signal
    unwind_needs_attention: Signal

log = logging.getLogger(__name__)  # saga_worker.compensation.alerts, as the operations guide says

# The signals, made on first use (an app's ``connect``): importing Celery's dispatcher costs ~0.1 s,
# which a process that never connects a receiver (the CLI, an in-process run) does not pay.
_ARGS = {
    "unwind_halted": ["run_id", "step", "tool", "key", "status", "error", "attempts", "worker_lost"],
    "unwind_needs_attention": ["run_id", "note", "step", "tool", "key", "error"],
}
_made: dict[str, Signal] = {}


def signal(name: str) -> Signal:
    """``unwind_halted`` (a step halted an unwind: ``failed``, ``busy``, ``awaiting-approval``, sent by
    the process that decided the step) or ``unwind_needs_attention`` (an unwind flagged
    ``attention``: the sweeper gave up, a step's workers were lost too often, its tools are missing,
    its row cannot be read)."""
    made = _made.get(name)
    if made is None:
        from celery.utils.dispatch import Signal as CelerySignal

        made = _made.setdefault(name, CelerySignal(name=name, providing_args=_ARGS[name]))
    return made


def __getattr__(name: str) -> Signal:
    if name in _ARGS:
        return signal(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _send(name: str, run_id: str, **fields: Any) -> None:
    made = _made.get(name)  # never made: nobody connected, nobody to tell
    if made is not None:
        with quietly(f"sending {name}"):
            made.send(sender=run_id, run_id=run_id, **fields)


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
    _send(
        "unwind_halted",
        run_id,
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
    _send(
        "unwind_needs_attention",
        run_id,
        note=note,
        step=None if entry is None else entry.suffix,
        tool=None if entry is None else entry.tool_name,
        key=None if entry is None else entry.idempotency_key,
        error=None if entry is None else entry.error,
    )


__all__ = ["LEVELS", "needs_attention", "signal", "step_halted", "unwind_halted", "unwind_needs_attention"]  # noqa: F822 - the signals are made on first use (__getattr__)
