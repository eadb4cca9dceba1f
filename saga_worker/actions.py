"""A documented import path (``saga_worker.actions``, where every unwind request goes through): the
code lives in ``operating/actions.py``; this module only re-exports it."""

from .operating.actions import (
    ActionRefusedError,
    Enqueue,
    UnwindQueuedError,
    Workers,
    decide,
    enqueue_unwind,
    plan,
    queued_unwind,
    redrive,
    request_unwind,
    sweeper_redrive,
    unwind_here,
)

__all__ = [
    "ActionRefusedError",
    "Enqueue",
    "UnwindQueuedError",
    "Workers",
    "decide",
    "enqueue_unwind",
    "plan",
    "queued_unwind",
    "redrive",
    "request_unwind",
    "sweeper_redrive",
    "unwind_here",
]
