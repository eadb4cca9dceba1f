"""Bulk actions through the workers: each run is queued once (its ``unwind-queued`` row is written
before the request is sent), so a bulk compensate stopped midway and run again queues none twice."""

from __future__ import annotations

from typing import Any

import pytest

from saga_worker import Journal, Tool, ToolCall, run_durable, scripted
from saga_worker.operating import actions
from saga_worker.operating.bulk import Filters, Target, plan_bulk, run_bulk

pytestmark = pytest.mark.backends("memory", "sqlite", "postgres")

TOOLS = {"charge": Tool(lambda i, o: {"ok": True}, lambda i, o, c: None)}


class Stop(Exception):  # noqa: N818 - what a kill between two runs would do to the process
    """The process running the bulk action dies here."""


def test_a_bulk_compensate_stopped_midway_queues_each_run_once_when_run_again(journal: Journal) -> None:
    for n in range(5):
        run_durable(f"batch-{n}", journal=journal, tools=TOOLS, planner=scripted(ToolCall("charge", {})))
    sent: list[str] = []

    def enqueue(run_id: str, dry_run: bool, **kw: Any) -> str:
        sent.append(run_id)
        return str(kw.get("task_id"))

    stop_at = [3]

    def act(target: Target) -> str:
        if len(sent) in stop_at:
            raise Stop
        return actions.request_unwind(
            target.run_id, journal=journal, enqueue=enqueue, actor="ana", reason="bad deploy"
        )

    filters = Filters.checked(run_prefix="batch-")
    plan = plan_bulk("compensate", filters, journal)
    assert len(plan.todo) == 5
    with pytest.raises(Stop):
        run_bulk(plan, journal, act)
    assert len(sent) == 3

    again = plan_bulk("compensate", filters, journal)
    assert len(again.todo) == 2 and len(again.skipped["an unwind is already queued"]) == 3
    stop_at.clear()
    summary = run_bulk(again, journal, act)
    assert len(summary.done) == 2 and sorted(sent) == [f"batch-{n}" for n in range(5)]
    assert plan_bulk("compensate", filters, journal).todo == []
