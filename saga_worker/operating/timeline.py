"""A run as one story: its calls, the decisions that made them, every compensation (whoever ran it:
a worker, ``compensate_run`` in process, ``saga-worker compensate --local``: each step's claim
records it), every unwind on the workers, re-drives and the audit trail, in the order they happened.

Built from what the run page already reads (``views.run_view``), so it costs no extra read. A step
run on the workers names its Celery task (``task_of_step``, handed down by the front end, which
knows the task ids), so the page can link each to Flower."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

StepTask = Callable[[str, str, str], str]  # (run id, step suffix, unwind id) -> the step's task id

# Ties in time keep the story's order: the run, then a call, its undo, an unwind, the trail's row.
_ORDER = {"run": 0, "call": 1, "unwind": 2, "compensation": 3, "audit": 4}


def timeline(view: Mapping[str, Any], task_of_step: StepTask | None = None) -> list[dict[str, Any]]:
    """The run's events, oldest first: each with ``at``, ``kind``, ``title``, ``status`` and, where
    there is one, ``error``, ``detail``, ``task_id`` (a Celery task: Flower has it)."""
    run = view["run"]
    events: list[dict[str, Any]] = [
        {"at": run["created_at"], "kind": "run", "title": "run started", "status": "started"}
    ]
    unwinds: Sequence[Mapping[str, Any]] = view.get("unwinds") or []
    for step in view.get("steps") or []:
        events.append(_call(step))
        undo = _compensation(run["run_id"], step, unwinds, task_of_step)
        if undo is not None:
            events.append(undo)
    for unwind in unwinds:
        events.append(
            {
                "at": unwind["started_at"],
                "kind": "unwind",
                "title": ("plan" if unwind["dry_run"] else "unwind") + " on the workers",
                "status": unwind["outcome"],
                "task_id": unwind["unwind_id"],
                "ended_at": unwind.get("ended_at"),
            }
        )
    for row in view.get("audit") or []:
        events.append(_audit(row))
    return sorted(events, key=lambda e: (e["at"] or 0.0, _ORDER[e["kind"]]))


def _call(step: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "at": step["started_at"],
        "kind": "call",
        "title": f"call {step['suffix']} · {step['tool_name']}",
        "detail": f"decision {step['step']}" if step.get("step") else "",
        "status": step["status"],
        "error": step.get("error"),
        "input": step.get("input_preview"),
        "output": step.get("output_preview"),
        "ended_at": step.get("ended_at"),
        "suffix": step["suffix"],
    }


def _compensation(
    run_id: str, step: Mapping[str, Any], unwinds: Sequence[Mapping[str, Any]], task_of_step: StepTask | None
) -> dict[str, Any] | None:
    claim = step.get("compensation")
    if not claim or not claim.get("started_at"):
        return None
    # The worker unwind that ran this step, if one did (newest first): its step task is in Flower.
    ran_it = next(
        (u for u in unwinds if any(s["suffix"] == step["suffix"] and s.get("entry") for s in u["steps"])),
        None,
    )
    where = "on the workers" if ran_it is not None else "in process"
    return {
        "at": claim["started_at"],
        "kind": "compensation",
        "title": f"undo {step['suffix']} · {step['tool_name']}",
        "detail": f"{where}, attempt {claim['attempts']}",
        "status": claim["status"],
        "error": claim.get("error"),
        "ended_at": claim.get("finished_at"),
        "suffix": step["suffix"],
        "task_id": None
        if ran_it is None or task_of_step is None
        else task_of_step(run_id, step["suffix"], ran_it["unwind_id"]),
    }


def _audit(row: Mapping[str, Any]) -> dict[str, Any]:
    action = row["action"]
    detail = row.get("detail") or {}
    title = action
    if action == "unwound":
        where = "on the workers" if detail.get("unwind_id") else "in process"
        title = f"unwound {where}"
    elif action == "unwind-queued":
        title = "unwind queued"
    who = f"{row.get('actor') or '?'} via {row.get('via')}"
    task_id = row.get("target") if action == "unwind-queued" else detail.get("unwind_id")
    target = "" if task_id is not None and row.get("target") == task_id else row.get("target") or ""
    return {
        "at": row["at"],
        "kind": "audit",
        "title": title,
        "status": action,
        "detail": " · ".join(p for p in (who, target, row.get("summary") or "") if p),
        "reason": row.get("reason") or "",
        "task_id": task_id,
    }
