"""What waits for a person: a run's suspended calls and gated compensations (its page), and the
inbox across runs (suspended calls, gated compensations, unwinds the sweeper gave up on, calls whose
outcome was never recorded, and the stuck lane of ``stuck.py``), each with the decisions a person
can take on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.redact import SECRET_KEYS, redact_text
from ..errors import InvalidInputError
from ..journal.records import RecordStatus, RunInfo, RunQuery, ToolRecord, UnwindState
from ..journal.roles import OperatorJournal
from ..recording.tools import Tool
from .display import preview
from .stuck import stuck_unwinds
from .unwinds import journal_steps

# -- on a run's page ------------------------------------------------------------------------------


def _decisions(run_id: str, approve: str, deny: str) -> list[dict[str, str]]:
    url = f"/runs/{run_id}/decide"
    return [
        {"name": approve, "label": "Approve", "url": url},
        {"name": deny, "label": "Deny", "url": url},
    ]


def pending_approvals(steps: Sequence[Mapping[str, Any]], run_id: str = "") -> list[dict[str, Any]]:
    """Suspended tool calls: each waits for a person's approve or deny (``target``: the call id)."""
    return [
        {
            "kind": "call",
            "suffix": s["suffix"],
            "tool_call_id": s["tool_call_id"],
            "tool_name": s["tool_name"],
            "target": s["tool_call_id"],
            "actions": _decisions(run_id, "approve", "deny") if run_id else [],
        }
        for s in steps
        if s["status"] == RecordStatus.SUSPENDED.value
    ]


_UNDONE = frozenset({"compensated"})
_UNDOABLE = [RecordStatus.SUCCEEDED, RecordStatus.FAILED, RecordStatus.RUNNING]


def awaiting_gates(
    journal: OperatorJournal, run: RunInfo, steps: Sequence[Mapping[str, Any]], tools: Mapping[str, Tool]
) -> list[dict[str, Any]]:
    """Approval-gated compensations of a condemned run with no decision yet and not undone: the
    unwind reads (or, on reaching them, will read) ``awaiting-approval`` there (``target``: the step's
    suffix). Asked of the tools, as the engine asks: ``compensate_needs_approval(input, output)``."""
    if not run.condemned or not tools:
        return []
    done = {s["suffix"] for s in steps if (s["compensation"] or {}).get("status") in _UNDONE}
    gated: list[ToolRecord] = []
    for record in journal.list_records(run.run_id, _UNDOABLE):
        tool = tools.get(record.tool_name)
        if record.suffix in done or tool is None or tool.compensate is None:
            continue
        if tool.compensation_needs_approval(record.input, record.output):
            gated.append(record)
    decided = journal.get_gates([(r.origin_run_id, r.suffix) for r in gated])
    return [
        {
            "kind": "compensation",
            "suffix": r.suffix,
            "tool_call_id": r.tool_call_id,
            "tool_name": r.tool_name,
            "target": r.suffix,
            "actions": _decisions(run.run_id, "approve-compensation", "deny-compensation"),
        }
        for r in reversed(gated)  # unwind order: the one the unwind meets first, first
        if (r.origin_run_id, r.suffix) not in decided
    ]


# -- the inbox: what waits for a person, across runs ---------------------------------------------

# kind -> what it waits for (the inbox's headings, the CLI's and the metric's label).
INBOX_KINDS: dict[str, str] = {
    "suspended": "a suspended call: approve or deny it",
    "gated": "a gated compensation: approve or deny undoing it",
    "attention": "an unwind the sweeper gave up on: re-drive it",
    "uncertain": "a call whose outcome was never recorded: resume the run (recover probes it) or compensate it",
}
INBOX_LIMIT = 500
INBOX_MAX = 5000


def inbox_limit(value: int | str | None) -> int:
    """The inbox's ``limit`` as a request gives it (unset: ``INBOX_LIMIT``), or InvalidInputError."""
    try:
        size = INBOX_LIMIT if value in (None, "") else int(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"limit {value!r} is not a number", limit=value) from None
    if not 1 <= size <= INBOX_MAX:
        raise InvalidInputError(f"limit {size} must be between 1 and {INBOX_MAX}", limit=size)
    return size


def _inbox_item(
    kind: str, run: RunInfo, since: float, record: ToolRecord | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "kind": kind,
        "run_id": run.run_id,
        "run_status": run.status.value,
        "unwind_state": run.unwind_state.value,
        "since": since,
        "suffix": record.suffix if record else None,
        "tool_call_id": record.tool_call_id if record else None,
        "tool_name": record.tool_name if record else None,
        "target": None,
        "actions": [],
        "note": None,
        **extra,
    }


def inbox(
    journal: OperatorJournal,
    tools: Mapping[str, Tool] | None = None,
    *,
    secret_keys: tuple[str, ...] = SECRET_KEYS,
    limit: int = INBOX_LIMIT,
) -> dict[str, Any]:
    """Everything that waits for a person, across runs, oldest first: suspended calls (approve or
    deny), gated compensations of condemned runs (approve or deny undoing them), unwinds flagged
    ``attention`` (re-drive), and calls left ``running`` whose executor's lease ran out (nobody
    knows whether their effect happened). Beside them, ``stuck``: the stuck lane (``stuck.py``:
    unwinds neither complete nor waiting for a decision, and queued requests no worker took), at
    most ``limit`` of each state, with its own ``count``, ``more`` and ``oldest_s``. ``counts`` has the items of each kind and ``runs`` the
    runs of each kind (the metric ``saga_runs_needing_attention``). At most ``limit`` of each
    (suspended and uncertain calls are read together: at most ``limit`` of the two); ``more`` says
    that more wait than are listed, so a capped inbox never reads as all there is."""
    now = journal.now()
    calls, more_calls = _waiting_calls(journal, secret_keys, limit)
    unwinds, more_unwinds = _halted_unwinds(journal, tools, secret_keys, limit)
    stuck, more_stuck = stuck_unwinds(journal, secret_keys=secret_keys, limit=limit)
    items = calls + unwinds
    items.sort(key=lambda i: (i["since"], i["run_id"], i["suffix"] or ""))
    oldest = min((i["since"] for i in stuck), default=None)
    return {
        "counts": {kind: sum(1 for i in items if i["kind"] == kind) for kind in INBOX_KINDS},
        "runs": {kind: len({i["run_id"] for i in items if i["kind"] == kind}) for kind in INBOX_KINDS},
        "total": len(items),
        "items": items,
        "now": now,
        "limit": limit,
        "more": more_calls or more_unwinds,
        # The stuck lane: unwinds no decision holds up, which stand still all the same.
        "stuck": {
            "items": stuck,
            "count": len(stuck),
            "more": more_stuck,
            # How long since the oldest last moved (the gauge saga_oldest_stuck_unwind_seconds).
            "oldest_s": None if oldest is None else round(max(0.0, now - oldest), 1),
        },
    }


def _waiting_calls(
    journal: OperatorJournal, secret_keys: tuple[str, ...], limit: int
) -> tuple[list[dict[str, Any]], bool]:
    """The inbox's suspended calls (approve or deny) and uncertain ones (a lease that ran out), and
    whether more wait than ``limit``. The journal leaves out what waits for nobody before it counts
    (``waiting_records``), so a full page and ``more`` are both true."""
    runs: dict[str, RunInfo | None] = {}

    def run_of(run_id: str) -> RunInfo | None:
        if run_id not in runs:
            runs[run_id] = journal.get_run(run_id)
        return runs[run_id]

    items: list[dict[str, Any]] = []
    found = journal.waiting_records(limit=limit + 1)
    for record in found[:limit]:
        run = run_of(record.run_id)
        if run is None:
            continue
        if record.status is RecordStatus.SUSPENDED:
            items.append(
                _inbox_item(
                    "suspended",
                    run,
                    record.updated_at,
                    record,
                    target=record.tool_call_id,
                    input_preview=preview(record.input, secret_keys=secret_keys),
                    actions=_decisions(run.run_id, "approve", "deny"),
                )
            )
            continue
        items.append(
            _inbox_item(
                "uncertain",
                run,
                record.updated_at,
                record,
                input_preview=preview(record.input, secret_keys=secret_keys),
                note="execute started and its outcome was never recorded",
            )
        )
    return items, len(found) > limit


def _halted_unwinds(
    journal: OperatorJournal, tools: Mapping[str, Tool] | None, secret_keys: tuple[str, ...], limit: int
) -> tuple[list[dict[str, Any]], bool]:
    """The inbox's unwinds flagged ``attention`` (re-drive) and those halted at a compensation gate,
    and whether more runs wait than ``limit`` in either state."""
    items: list[dict[str, Any]] = []
    more = False
    for state, kind in ((UnwindState.ATTENTION, "attention"), (UnwindState.AWAITING, "gated")):
        found = journal.page_runs(RunQuery(unwind_state=state, limit=limit + 1))
        more = more or len(found) > limit
        for run in found[:limit]:
            if kind == "attention":
                note = None if run.unwind_note is None else redact_text(run.unwind_note)
                redrive = {"name": "redrive", "label": "Re-drive", "url": f"/runs/{run.run_id}/redrive"}
                items.append(_inbox_item(kind, run, run.updated_at, note=note, actions=[redrive]))
                continue
            steps = journal_steps(journal, run.run_id, secret_keys)
            gates = awaiting_gates(journal, run, steps, tools or {})
            if not gates:  # the console does not know the tools (SAGA_TOOLS): the run page tells
                items.append(_inbox_item(kind, run, run.updated_at, note="halted at a compensation gate"))
            by_suffix = {s["suffix"]: s for s in steps}
            for gate in gates:
                call = by_suffix.get(gate["suffix"], {})  # what the person approves undoing: its amount
                items.append(
                    _inbox_item(
                        kind,
                        run,
                        run.updated_at,
                        suffix=gate["suffix"],
                        tool_call_id=gate["tool_call_id"],
                        tool_name=gate["tool_name"],
                        target=gate["target"],
                        actions=gate["actions"],
                        input_preview=call.get("input_preview"),
                        output_preview=call.get("output_preview"),
                    )
                )
    return items, more


def waiting_runs(journal: OperatorJournal) -> set[str]:
    """The runs with a suspended call (a run's status reads ``suspended`` while one waits)."""
    return {
        r.run_id for r in journal.waiting_records(limit=INBOX_LIMIT * 4) if r.status is RecordStatus.SUSPENDED
    }


def run_readings(journal: OperatorJournal) -> dict[str, str]:
    """What a ``running`` run reads, by run id, where the journal's ``running`` would mislead: a run
    with a suspended call reads ``suspended``; one whose call's executor died mid-call (its lease ran
    out, no outcome recorded) reads ``interrupted``, not ``running`` forever."""
    readings: dict[str, str] = {}
    for record in journal.waiting_records(limit=INBOX_LIMIT * 4):
        if record.status is RecordStatus.SUSPENDED:
            readings[record.run_id] = SUSPENDED_READING
        else:
            readings.setdefault(record.run_id, INTERRUPTED_READING)
    return readings


SUSPENDED_READING = "suspended"
INTERRUPTED_READING = "interrupted"
