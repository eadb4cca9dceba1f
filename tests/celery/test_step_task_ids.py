"""A step task's id (issue 23): its own, readable, the same for every message of that step, and
never longer than a broker takes."""

from __future__ import annotations

import uuid

from saga_worker.celery.task_ids import TASK_ID_MAX, step_task_id


def test_a_step_task_id_names_the_run_the_step_and_the_unwind_and_is_the_same_each_time() -> None:
    unwind = "8cce7010-b742-4e63-8e21-b41d22509d35"
    assert step_task_id("order-1042", "call-2", unwind) == f"order-1042:call-2:{unwind}"
    assert step_task_id("order-1042", "call-2", unwind) == step_task_id("order-1042", "call-2", unwind)
    assert step_task_id("order-1042", "call-1", unwind) != step_task_id("order-1042", "call-2", unwind)


def test_a_step_task_id_too_long_for_a_broker_is_a_uuid_derived_from_it() -> None:
    run, step, unwind = "r" * 200, "c" * 200, "u" * 200  # the longest ids the journal takes
    long = step_task_id(run, step, unwind)
    assert len(long.encode()) <= TASK_ID_MAX and str(uuid.UUID(long)) == long
    assert long == step_task_id(run, step, unwind) != step_task_id(run, step, "v" * 200)
    wide = step_task_id("order-1", "call-1", "é" * 121)  # 136 characters, 257 bytes
    assert len(wide.encode()) <= TASK_ID_MAX and str(uuid.UUID(wide)) == wide
