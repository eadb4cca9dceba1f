"""The task id of each step of an unwind over Celery: its own, readable where a broker allows."""

from __future__ import annotations

import uuid

# Bytes a task id may take on every broker (AMQP's correlation id is a short string).
TASK_ID_MAX = 255
_STEP_IDS = uuid.UUID("0d4c2a9e-5b1f-4f6e-9a57-3c1e8f2b7d40")


def step_task_id(run_id: str, suffix: str, unwind_id: str) -> str:
    """The task id of step ``suffix`` of unwind ``unwind_id`` of run ``run_id``: its own, so Flower
    shows one row per step, and the same for every message of that step (a redelivery, or the
    continuation sent again by a redelivered step before it), so Flower keeps one row for them.

    ``<run id>:<step>:<unwind id>`` (run ids and steps hold no ``:``), which Flower's tasks page shows
    as the task's id; a UUID derived from it when that is longer than a broker takes."""
    readable = f"{run_id}:{suffix}:{unwind_id}"
    if len(readable.encode()) <= TASK_ID_MAX:
        return readable
    return str(uuid.uuid5(_STEP_IDS, readable))


__all__ = ["TASK_ID_MAX", "step_task_id"]
