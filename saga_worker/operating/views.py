"""What the CLI and the console show, read from the journal once, here, for both.

``runs_page`` is the runs listing (filters, keyset cursor), ``run_view`` a run's page: its tool
calls in execution order, their compensation claims as they are now (owner, lease), its
distributed unwinds with each step's entry, what waits for a person (suspended calls, gated
compensations with no decision yet), its audit trail, and whether anything is still moving. The
text of inputs, outputs, errors and reasons is cut to a preview and stripped of URL passwords.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..compensation.report import CompensationStatus, halted_at, until_halt
from ..core.checks import check_run_id
from ..core.keys import canonical_json, compensate_key, execute_key
from ..core.redact import SECRET_KEYS, redact_secrets, redact_text, redact_value
from ..errors import InvalidInputError
from ..journal.parts import AuditPart, ClaimsPart, RecordsPart, RunsPart, UnwindsPart
from ..journal.records import (
    AuditRecord,
    ClaimStatus,
    CompensationClaim,
    RecordStatus,
    RunInfo,
    RunQuery,
    RunStatus,
    ToolRecord,
    UnwindInfo,
    UnwindState,
    contains_words,
)
from ..recording.tools import Tool
from .audit import audit_dict

PREVIEW_CHARS = 240
WHOLE_INLINE_CHARS = 20_000  # a value up to this long is also shown whole on the page; beyond, downloaded
MAX_PAGE = 500


# -- the runs listing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ListingQuery(RunQuery):
    """A listing's query: the journal's, and whether only runs with a suspended call are wanted (the
    status filter ``suspended``: such a run's journal status is ``running``)."""

    suspended: bool = False


@dataclass(frozen=True)
class RunsPage:
    runs: list[RunInfo]
    next_cursor: str | None  # None on the last page


class ViewsJournal(RunsPart, RecordsPart, AuditPart, ClaimsPart, UnwindsPart, Protocol):
    """What the views read: every part but the cross-run one, and nothing written (any journal)."""


def encode_cursor(run: RunInfo) -> str:
    """The keyset position after ``run``, opaque to callers (URL-safe)."""
    raw = json.dumps([run.updated_at, run.run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


MAX_CURSOR = 1024  # a cursor this listing gives out is well under 400 characters


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        if len(cursor) > MAX_CURSOR:
            raise ValueError
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, run_id = json.loads(raw)
        if isinstance(at, bool) or not isinstance(at, int | float) or not isinstance(run_id, str):
            raise ValueError
        # json reads NaN, Infinity and 1e999 as floats: no run was updated at such a time.
        if not math.isfinite(at := float(at)):
            raise ValueError
        return at, check_run_id(run_id)
    except (ValueError, TypeError, OverflowError, RecursionError, binascii.Error, InvalidInputError) as exc:
        raise InvalidInputError(
            f"cursor {cursor[:60]!r} is not one this listing gave out", cursor=cursor
        ) from exc


def _choice(kind: Any, value: str | None, what: str) -> Any:
    if value is None or value == "":
        return None
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise InvalidInputError(f"{what} {value!r} is not one of: {allowed}", **{what: value}) from None


def parse_run_query(
    *,
    status: str | None = None,
    condemned: str | bool | None = None,
    unwind: str | None = None,
    search: str | None = None,
    cursor: str | None = None,
    limit: int | str | None = None,
) -> RunQuery:
    """A ``RunQuery`` from the strings of a query string or command line; bad input names itself."""
    if isinstance(condemned, str):
        flags = {"": None, "yes": True, "true": True, "1": True, "no": False, "false": False, "0": False}
        if condemned.lower() not in flags:
            raise InvalidInputError(f"condemned {condemned!r} must be yes or no", condemned=condemned)
        condemned = flags[condemned.lower()]
    # Any part of the id, any case; words separated by spaces match in order ("order 7" finds
    # "Order-7-…"). Text no id can hold matches nothing: an empty page, not a 400.
    search = " ".join((search or "").split())[:200] or None
    try:
        size = 50 if limit in (None, "") else int(limit)
    except ValueError:
        raise InvalidInputError(f"limit {limit!r} is not a number", limit=limit) from None
    if not 1 <= size <= MAX_PAGE:
        raise InvalidInputError(f"limit {size} must be between 1 and {MAX_PAGE}", limit=size)
    suspended = status == SUSPENDED
    return ListingQuery(
        suspended=suspended,
        status=RunStatus.RUNNING if suspended else _choice(RunStatus, status, "status"),
        condemned=condemned,
        unwind_state=_choice(UnwindState, unwind, "unwind"),
        contains=search,
        before=decode_cursor(cursor) if cursor else None,
        limit=size,
    )


def runs_page(journal: ViewsJournal, query: RunQuery) -> RunsPage:
    """One page, and the cursor of the next (read one row more than asked, to know there is one)."""
    if isinstance(query, ListingQuery) and query.suspended:
        found = _suspended_runs(journal, query)
    else:
        fields = {k: v for k, v in query.__dict__.items() if k != "suspended"}
        found = journal.page_runs(RunQuery(**{**fields, "limit": query.limit + 1}))
    more = len(found) > query.limit
    found = found[: query.limit]
    return RunsPage(found, encode_cursor(found[-1]) if more and found else None)


def _suspended_runs(journal: ViewsJournal, query: RunQuery) -> list[RunInfo]:
    """The listing's page of runs with a suspended call: few by nature (each waits for a person), read
    from the inbox's index and filtered and ordered here as the journal orders a page."""
    found = [r for r in map(journal.get_run, sorted(waiting_runs(journal))) if r is not None]
    if query.condemned is not None:
        found = [r for r in found if r.condemned == query.condemned]
    if query.unwind_state is not None:
        found = [r for r in found if r.unwind_state is query.unwind_state]
    if query.search is not None:
        found = [r for r in found if r.run_id.startswith(query.search)]
    if query.contains is not None:
        found = [r for r in found if contains_words(r.run_id, query.contains)]
    if query.before is not None:
        found = [r for r in found if (r.updated_at, r.run_id) < query.before]
    found.sort(key=lambda r: (r.updated_at, r.run_id), reverse=True)
    return found[: query.limit + 1]


SUSPENDED = "suspended"  # a status a run reads while a call of it waits for a person (not stored)


def iso(ts: float | None) -> str | None:
    """An epoch time as ISO 8601 UTC with milliseconds (the API gives both)."""
    if ts is None:
        return None
    whole = int(ts)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((ts - whole) * 1000):03d}Z"


def _span(start: float | None, end: float | None, prefix: str = "") -> dict[str, Any]:
    """Start, end and duration, in epoch seconds and ISO 8601 (``prefix`` names them)."""
    return {
        f"{prefix}started_at_iso": iso(start),
        f"{prefix}ended_at": end,
        f"{prefix}ended_at_iso": iso(end),
        f"{prefix}duration_s": None if start is None or end is None else round(max(0.0, end - start), 3),
    }


def run_summary(run: RunInfo, suspended: bool = False) -> dict[str, Any]:
    """A run's row. ``suspended``: a call of it waits for a person, and the run, still ``running`` in
    the journal, reads ``suspended`` (``journal_status`` keeps what the journal says)."""
    waits = suspended and run.status is RunStatus.RUNNING and not run.condemned
    return {
        "run_id": run.run_id,
        "status": SUSPENDED if waits else run.status.value,
        "journal_status": run.status.value,
        "condemned": run.condemned,
        "condemned_at": run.condemned_at,
        "unwind_state": run.unwind_state.value,
        "unwind_attempts": run.unwind_attempts,
        "unwind_next_at": run.unwind_next_at,
        "unwind_note": None if run.unwind_note is None else redact_text(run.unwind_note),
        "source_run_id": run.source_run_id,
        "created_at": run.created_at,
        "created_at_iso": iso(run.created_at),
        "updated_at": run.updated_at,
        "updated_at_iso": iso(run.updated_at),
        "condemned_at_iso": iso(run.condemned_at),
    }


# -- one run -------------------------------------------------------------------------------------


def preview(value: Any, limit: int = PREVIEW_CHARS, secret_keys: tuple[str, ...] = SECRET_KEYS) -> str:
    """A value's JSON text, cut to ``limit`` characters, URL passwords and the values of keys named
    like secrets (``secret_keys``) hidden."""
    if value is None:
        return ""
    try:
        text = canonical_json(redact_secrets(value, secret_keys))
    except InvalidInputError:
        text = repr(redact_secrets(value, secret_keys))
    except RecursionError:
        text = "(nested too deeply to show)"
    text = redact_text(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


_ENDED = frozenset({RecordStatus.SUCCEEDED, RecordStatus.FAILED, RecordStatus.DENIED, RecordStatus.MIRRORED})


def _cut(text: str, limit: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pretty(value: Any, secret_keys: tuple[str, ...] = SECRET_KEYS) -> str:
    """A value's whole JSON, indented, with the secrets hidden as in a preview."""
    try:
        return redact_text(
            json.dumps(redact_secrets(value, secret_keys), indent=2, sort_keys=True, default=repr)
        )
    except (TypeError, ValueError, RecursionError):
        return "(cannot be shown as JSON)"


def whole(value: Any, secret_keys: tuple[str, ...] = SECRET_KEYS) -> str | None:
    """The whole value, indented, when its preview is cut and it is short enough to show inline;
    None otherwise (its preview is whole, or it is only downloaded)."""
    if value is None or len(preview(value, secret_keys=secret_keys)) < PREVIEW_CHARS:
        return None
    text = pretty(value, secret_keys)
    return text if len(text) <= WHOLE_INLINE_CHARS else None


def call_values(
    journal: ViewsJournal, run_id: str, suffix: str, secret_keys: tuple[str, ...] = SECRET_KEYS
) -> dict[str, Any] | None:
    """One call's input, output and error, whole (secrets hidden): the page's JSON download."""
    record = journal.get_record(check_run_id(run_id), suffix)
    if record is None:
        return None
    return {
        "run_id": run_id,
        "suffix": record.suffix,
        "tool_call_id": record.tool_call_id,
        "tool_name": record.tool_name,
        "status": record.status.value,
        "input": redact_value(redact_secrets(record.input, secret_keys)),
        "output": redact_value(redact_secrets(record.output, secret_keys)),
        "error": None if record.error is None else redact_text(record.error),
    }


def run_values(
    journal: ViewsJournal, run_id: str, secret_keys: tuple[str, ...] = SECRET_KEYS
) -> dict[str, Any] | None:
    """The run's prompt, final text, error and planner decisions, whole (secrets hidden)."""
    run = journal.get_run(check_run_id(run_id))
    if run is None:
        return None
    return {
        "run_id": run_id,
        "prompt": redact_text(run.prompt),
        "text": redact_text(run.text),
        "error": None if run.error is None else redact_text(run.error),
        "decisions": [redact_value(redact_secrets(d, secret_keys)) for d in journal.list_decisions(run_id)],
    }


def _claim_dict(claim: CompensationClaim | None, now: float) -> dict[str, Any] | None:
    if claim is None:
        return None
    live = claim.status is ClaimStatus.CLAIMED and claim.lease_expires_at > now
    return {
        "status": claim.status.value,
        "attempts": claim.attempts,
        "owner": claim.owner,
        "via_run_id": claim.via_run_id,
        "idempotency_key": claim.idempotency_key,
        "error": None if claim.error is None else redact_text(claim.error),
        "started_at": claim.started_at,
        "finished_at": claim.finished_at,
        "started_at_iso": iso(claim.started_at),
        "finished_at_iso": iso(claim.finished_at),
        "duration_s": None
        if claim.finished_at is None or claim.started_at is None
        else round(max(0.0, claim.finished_at - claim.started_at), 3),
        "lease_expires_at": claim.lease_expires_at,
        # A claim whose lease ran out is a dead holder's: the next unwind takes it over.
        "lease_live": live,
        "lease_seconds_left": round(claim.lease_expires_at - now, 1) if live else 0.0,
    }


def step_dict(
    record: ToolRecord,
    claim: CompensationClaim | None,
    now: float,
    secret_keys: tuple[str, ...] = SECRET_KEYS,
) -> dict[str, Any]:
    return {
        "seq": record.seq,
        "suffix": record.suffix,
        "tool_call_id": record.tool_call_id,
        "tool_name": record.tool_name,
        "status": record.status.value,
        "attempts": record.attempts,
        "error": None if record.error is None else redact_text(record.error),
        "origin_run_id": record.origin_run_id,
        "input_preview": preview(record.input, secret_keys=secret_keys),
        "output_preview": preview(record.output, secret_keys=secret_keys),
        "input_whole": whole(record.input, secret_keys),
        "output_whole": whole(record.output, secret_keys),
        "started_at": record.created_at,
        **_span(record.created_at, record.updated_at if record.status in _ENDED else None),
        "execute_key": execute_key(
            record.origin_run_id, record.mode, record.tool_name, record.tool_call_id, record.input
        ),
        "compensation_key": compensate_key(record.origin_run_id, record.suffix),
        "compensation": _claim_dict(claim, now),
    }


def journal_steps(
    journal: ViewsJournal, run_id: str, secret_keys: tuple[str, ...] = SECRET_KEYS
) -> list[dict[str, Any]]:
    """The run's tool records in execution order, each with its compensation claim as it is now."""
    records = journal.list_records(run_id)
    claims = journal.get_claims([(r.origin_run_id, r.suffix) for r in records])
    now = journal.now()
    return [step_dict(r, claims.get((r.origin_run_id, r.suffix)), now, secret_keys) for r in records]


def unwind_dict(
    journal: ViewsJournal,
    info: UnwindInfo,
    steps_by_suffix: Mapping[str, Mapping[str, Any]] | None = None,
    ended: Mapping[str, AuditRecord] | None = None,
) -> dict[str, Any]:
    """One distributed unwind: each worklist step with the entry stored for it (None: not yet).
    ``steps_by_suffix`` (the run's steps) names the tool and key of steps the unwind never reached."""
    stored = journal.list_unwind_entries(info.unwind_id)
    known = steps_by_suffix or {}

    def reached(position: int) -> dict[str, Any]:
        entry = stored.get(position)  # None: not yet
        if entry is not None and entry.get("error"):
            entry = {**entry, "error": redact_text(str(entry["error"]))}
        return {"position": position, "suffix": info.suffixes[position], "entry": entry}

    def not_attempted(position: int) -> dict[str, Any]:
        # As the report says: once an unwind halts, the steps after it were not attempted.
        suffix = info.suffixes[position]
        step = known.get(suffix, {})
        entry = {
            "suffix": suffix,
            "tool_name": step.get("tool_name", ""),
            "status": CompensationStatus.NOT_ATTEMPTED.value,
            "attempts": 0,
            "idempotency_key": step.get("compensation_key", compensate_key(info.run_id, suffix)),
        }
        return {"position": position, "suffix": suffix, "entry": entry}

    steps = until_halt(
        range(len(info.suffixes)), reached, not_attempted, lambda step: (step["entry"] or {}).get("status")
    )
    halt = halted_at(st["entry"]["status"] for st in steps if st["entry"])
    done = halt is not None or len(stored) >= len(info.suffixes)
    end = (ended or {}).get(info.unwind_id)
    if info.dry_run:
        outcome = "plan"
    elif not done:
        outcome = "in progress"
    elif halt is not None:
        outcome = f"halted-{halt.value}"
    elif end is not None and not end.detail.get("complete", True):
        outcome = "incomplete"
    else:
        outcome = "complete"
    return {
        "unwind_id": info.unwind_id,
        "dry_run": info.dry_run,
        "created_at": info.created_at,
        "started_at": info.created_at,
        **_span(info.created_at, end.at if end is not None else None),
        "outcome": outcome,
        "steps": steps,
        "done": done,
    }


def list_unwinds(
    journal: ViewsJournal,
    run_id: str,
    limit: int = 10,
    steps_by_suffix: Mapping[str, Mapping[str, Any]] | None = None,
    audit: Sequence[AuditRecord] | None = None,
) -> list[dict[str, Any]]:
    """The run's latest unwinds; ``audit`` (the run's trail) gives each its end (its ``unwound`` row)."""
    ended = {
        str(r.detail["unwind_id"]): r
        for r in (audit or [])
        if r.action.value == "unwound" and r.detail.get("unwind_id")
    }
    found = journal.list_unwinds(run_id, limit=limit)
    return [unwind_dict(journal, u, steps_by_suffix, ended) for u in found]


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
    journal: ViewsJournal, run: RunInfo, steps: Sequence[Mapping[str, Any]], tools: Mapping[str, Tool]
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


def audit_row(row: AuditRecord) -> dict[str, Any]:
    """One audit row for a page or the API: its values, a one-line ``summary`` of its detail, and
    its reason stripped of URL passwords (a reason is free text a person typed)."""
    data = audit_dict(row)
    data["at_iso"] = iso(row.at)
    data["reason"] = redact_text(row.reason)
    counts = row.detail.get("counts")
    if isinstance(counts, dict):
        state = "complete" if row.detail.get("complete") else "not complete"
        data["summary"] = ", ".join(f"{k}: {v}" for k, v in counts.items()) + f" ({state})"
    else:
        data["summary"] = ", ".join(f"{k}: {v}" for k, v in row.detail.items() if v is not None)
    return data


def run_view(
    journal: ViewsJournal,
    run_id: str,
    tools: Mapping[str, Tool] | None = None,
    *,
    secret_keys: tuple[str, ...] = SECRET_KEYS,
) -> dict[str, Any] | None:
    """Everything the run page shows, or None for a run the journal has never seen. ``tools`` (the
    workers' tools) tell which compensations wait for a person's approval; ``secret_keys`` name the
    keys whose values are hidden."""
    check_run_id(run_id)
    run = journal.get_run(run_id)
    if run is None:
        return None
    steps = journal_steps(journal, run_id, secret_keys)
    trail = journal.read_audit(run_id)
    unwinds = list_unwinds(journal, run_id, steps_by_suffix={s["suffix"]: s for s in steps}, audit=trail)
    # Moving: an unwind holds the run (pending) or a hook runs under a live lease right now. An
    # unwind abandoned by a dead worker is not "moving": the sweeper will start another.
    moving = run.unwind_state is UnwindState.PENDING or any(
        (s["compensation"] or {}).get("lease_live") for s in steps
    )
    suspended = any(s["status"] == RecordStatus.SUSPENDED.value for s in steps)
    return {
        "run": run_summary(run, suspended),
        "steps": steps,
        "unwinds": unwinds,
        "approvals": pending_approvals(steps, run_id) + awaiting_gates(journal, run, steps, tools or {}),
        "audit": [audit_row(r) for r in trail],
        "prompt_preview": _cut(redact_text(run.prompt)),
        "prompt_whole": len(run.prompt) >= PREVIEW_CHARS,
        "in_progress": moving,
        "can_redrive": run.condemned and run.unwind_state is UnwindState.ATTENTION,
    }


# -- the inbox: what waits for a person, across runs ----------------------------------------------------

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
    journal: ViewsJournal,
    tools: Mapping[str, Tool] | None = None,
    *,
    secret_keys: tuple[str, ...] = SECRET_KEYS,
    limit: int = INBOX_LIMIT,
) -> dict[str, Any]:
    """Everything that waits for a person, across runs, oldest first: suspended calls (approve or
    deny), gated compensations of condemned runs (approve or deny undoing them), unwinds flagged
    ``attention`` (re-drive), and calls left ``running`` whose executor's lease ran out (nobody
    knows whether their effect happened). ``counts`` has the items of each kind and ``runs`` the
    runs of each kind (the metric ``saga_runs_needing_attention``). At most ``limit`` of each
    (suspended and uncertain calls are read together: at most ``limit`` of the two); ``more`` says
    that more wait than are listed, so a capped inbox never reads as all there is."""
    now = journal.now()
    calls, more_calls = _waiting_calls(journal, secret_keys, limit)
    unwinds, more_unwinds = _halted_unwinds(journal, tools, secret_keys, limit)
    items = calls + unwinds
    items.sort(key=lambda i: (i["since"], i["run_id"], i["suffix"] or ""))
    return {
        "counts": {kind: sum(1 for i in items if i["kind"] == kind) for kind in INBOX_KINDS},
        "runs": {kind: len({i["run_id"] for i in items if i["kind"] == kind}) for kind in INBOX_KINDS},
        "total": len(items),
        "items": items,
        "now": now,
        "limit": limit,
        "more": more_calls or more_unwinds,
    }


def _waiting_calls(
    journal: ViewsJournal, secret_keys: tuple[str, ...], limit: int
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
    journal: ViewsJournal, tools: Mapping[str, Tool] | None, secret_keys: tuple[str, ...], limit: int
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
            for gate in gates:
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
                    )
                )
    return items, more


def waiting_runs(journal: ViewsJournal) -> set[str]:
    """The runs with a suspended call (a run's status reads ``suspended`` while one waits)."""
    return {
        r.run_id for r in journal.waiting_records(limit=INBOX_LIMIT * 4) if r.status is RecordStatus.SUSPENDED
    }
