"""The inbox's stuck lane: every unwind that is neither complete nor waiting for a person's decision,
with why it stands still, and queued requests no worker has taken.

An unwind is stuck when its run is condemned and its unwind ``pending`` (begun and never finished: a
worker died, or it runs right now) or ``incomplete`` (halted at a ``failed`` or ``busy`` step, or
left an ``uncertain`` one). Each says at which step (the first one, in unwind order, that is not
undone), how many attempts that step has had, its last error, and when the sweeper looks again; the
one action is re-drive now. Unwinds the sweeper gave up on (``attention``) and those halted at a gate
(``awaiting``) wait for a person and are the inbox's other kinds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.redact import SECRET_KEYS, redact_text
from ..journal.records import AuditRecord, RecordStatus, RunInfo, RunQuery, UnwindState
from ..journal.roles import OperatorJournal
from .display import iso
from .unwinds import journal_steps

STUCK_STATES = (UnwindState.PENDING, UnwindState.INCOMPLETE)
# The unwind states a re-drive applies to: flagged for a person, or stuck.
REDRIVABLE = frozenset({UnwindState.ATTENTION, *STUCK_STATES})
_UNDOABLE = frozenset({RecordStatus.SUCCEEDED.value, RecordStatus.FAILED.value, RecordStatus.RUNNING.value})
# How far back a queued request is looked for: one a worker never took in a day is still shown.
QUEUED_WINDOW_S = 86400.0

# why -> what it means (the lane's legend; the CLI and the console show the same words).
STUCK_REASONS: dict[str, str] = {
    "failed": "a compensate hook raised: the unwind halted at it",
    "busy": "a hook runs under a live lease right now (or another unwinder holds the step)",
    "interrupted": "its holder died mid-hook: the sweeper re-drives it, and the step is taken over",
    "unfinished": "the unwind began (or was made due again) and has not finished: the sweeper re-drives it",
    "uncertain": "a call whose outcome was never recorded: nothing can tell whether its effect happened",
    "queued": "an unwind request no worker has taken yet",
}


def _halted_step(
    note: str | None, steps: Sequence[Mapping[str, Any]]
) -> tuple[str, Mapping[str, Any], Mapping[str, Any]] | None:
    """The step an incomplete unwind stopped at, as its note says (the engine writes the steps not
    undone as ``"call-2: failed, call-1: not-attempted"``): an uncertain step has no claim to tell."""
    by_suffix = {s["suffix"]: s for s in steps}
    for part in (note or "").split(", "):
        suffix, _, status = part.partition(": ")
        step = by_suffix.get(suffix)
        if step is not None and status in ("failed", "busy", "uncertain"):
            return status, step, step["compensation"] or {}
    return None


def _stuck_step(
    run: RunInfo, steps: Sequence[Mapping[str, Any]]
) -> tuple[str, Mapping[str, Any] | None, Mapping[str, Any]]:
    """Why the unwind stands still, at which step (in unwind order, the first one not undone), and
    that step's compensation claim (empty when it has none)."""
    if run.unwind_state is UnwindState.INCOMPLETE:
        halted = _halted_step(run.unwind_note, steps)
        if halted is not None:
            return halted
    for step in reversed(steps):
        if step["status"] not in _UNDOABLE:
            continue
        claim = step["compensation"] or {}
        status = claim.get("status")
        if status == "compensated":
            continue
        if status == "failed":
            return "failed", step, claim
        if status == "claimed":
            return ("busy" if claim.get("lease_live") else "interrupted"), step, claim
        if step["status"] == RecordStatus.RUNNING.value:
            return "uncertain", step, claim
    return "unfinished", None, {}


def _item(
    run: RunInfo, why: str, since: float, step: Mapping[str, Any] | None, claim: Mapping[str, Any], now: float
) -> dict[str, Any]:
    error = claim.get("error") or (None if step is None else step.get("error"))
    if why == "uncertain" and not error:
        error = "execute started and its outcome was never recorded"
    return {
        "kind": "stuck",
        "why": why,
        "run_id": run.run_id,
        "run_status": run.status.value,
        "unwind_state": run.unwind_state.value,
        "since": since,
        "since_iso": iso(since),
        "suffix": None if step is None else step["suffix"],
        "tool_call_id": None if step is None else step["tool_call_id"],
        "tool_name": None if step is None else step["tool_name"],
        "attempts": int(claim.get("attempts") or 0),
        "error": error,
        "redrives": run.unwind_attempts,
        "next_sweep_at": run.unwind_next_at,
        "next_sweep_iso": iso(run.unwind_next_at),
        "next_sweep_in_s": None
        if run.unwind_next_at is None
        else round(max(0.0, run.unwind_next_at - now), 1),
        "queued_at": None,
        "queued_at_iso": None,
        "queued_task_id": None,
        "target": None,
        "note": None if run.unwind_note is None else redact_text(run.unwind_note),
        "actions": [{"name": "redrive", "label": "Re-drive now", "url": f"/runs/{run.run_id}/redrive"}],
    }


def _queued(item: dict[str, Any], row: AuditRecord) -> dict[str, Any]:
    return {**item, "queued_at": row.at, "queued_at_iso": iso(row.at), "queued_task_id": row.target}


def stuck_unwinds(
    journal: OperatorJournal, *, secret_keys: tuple[str, ...] = SECRET_KEYS, limit: int = 500
) -> tuple[list[dict[str, Any]], bool]:
    """The stuck lane, oldest first, and whether more are stuck than ``limit`` (of each state)."""
    now = journal.now()
    items: dict[str, dict[str, Any]] = {}
    more = False
    for state in STUCK_STATES:
        found = journal.page_runs(RunQuery(unwind_state=state, condemned=True, limit=limit + 1))
        more = more or len(found) > limit
        for run in found[:limit]:
            why, step, claim = _stuck_step(run, journal_steps(journal, run.run_id, secret_keys))
            items[run.run_id] = _item(run, why, run.updated_at, step, claim, now)
    for row in journal.queued_unwinds(now - QUEUED_WINDOW_S, limit=limit + 1):
        if row.run_id in items:
            items[row.run_id] = _queued(items[row.run_id], row)
            continue
        queued_run = journal.get_run(row.run_id)
        if queued_run is None:
            continue
        item = _item(queued_run, "queued", row.at, None, {}, now)
        item["actions"] = []  # nothing to re-drive yet: the request waits for a worker
        items[queued_run.run_id] = _queued(item, row)
    ordered = sorted(items.values(), key=lambda i: (i["since"], i["run_id"]))
    return ordered, more


__all__ = ["QUEUED_WINDOW_S", "REDRIVABLE", "STUCK_REASONS", "STUCK_STATES", "stuck_unwinds"]
