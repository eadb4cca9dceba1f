"""What the CLI and the console show, read from the journal once, here, for both.

``runs_page`` is the runs listing (filters, keyset cursor), ``run_view`` a run's page: its tool
calls in execution order, their compensation claims as they are now (owner, lease), its
distributed unwinds with each step's entry, what waits for a person (suspended calls, gated
compensations with no decision yet), its audit trail, and whether anything is still moving. The
text of inputs, outputs, errors and reasons is cut to a preview and stripped of URL passwords
(``display``). A run's steps and unwinds are read in ``unwinds``, what waits for a person (on a
run's page and across runs, the inbox) in ``inbox``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.checks import check_run_id
from ..core.redact import SECRET_KEYS, redact_secrets, redact_text, redact_value
from ..errors import InvalidInputError
from ..journal.records import (
    AuditRecord,
    JournalSize,
    RecordStatus,
    RunInfo,
    RunQuery,
    RunStatus,
    UnwindState,
    contains_words,
)
from ..journal.roles import OperatorJournal
from ..recording.tools import Tool
from .audit import audit_dict
from .display import PREVIEW_CHARS, cut, iso
from .inbox import awaiting_gates, pending_approvals, waiting_runs
from .stuck import REDRIVABLE
from .unwinds import journal_steps, list_unwinds

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


def runs_page(journal: OperatorJournal, query: RunQuery) -> RunsPage:
    """One page, and the cursor of the next (read one row more than asked, to know there is one)."""
    if isinstance(query, ListingQuery) and query.suspended:
        found = _suspended_runs(journal, query)
    else:
        fields = {k: v for k, v in query.__dict__.items() if k != "suspended"}
        found = journal.page_runs(RunQuery(**{**fields, "limit": query.limit + 1}))
    more = len(found) > query.limit
    found = found[: query.limit]
    return RunsPage(found, encode_cursor(found[-1]) if more and found else None)


def _suspended_runs(journal: OperatorJournal, query: RunQuery) -> list[RunInfo]:
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


def size_summary(size: JournalSize) -> dict[str, Any]:
    """The journal's size for a person: its runs, pruned stubs, and the least recently updated run."""
    return {
        "runs": size.runs,
        "pruned": size.pruned,
        "oldest_run_id": size.oldest_run_id,
        "oldest_at": size.oldest_at,
        "oldest_at_iso": iso(size.oldest_at),
    }


def run_summary(run: RunInfo, suspended: bool | str | None = False) -> dict[str, Any]:
    """A run's row. ``suspended``: a call of it waits for a person (True, or ``"suspended"``), and the
    run, still ``running`` in the journal, reads ``suspended``; ``"interrupted"``: its executor died
    mid-call, and it reads ``interrupted`` (``inbox.run_readings``). ``journal_status`` keeps what the
    journal says."""
    reading = SUSPENDED if suspended is True else (suspended or None)
    shown = reading if reading and run.status is RunStatus.RUNNING and not run.condemned else None
    return {
        "run_id": run.run_id,
        "status": shown or run.status.value,
        "journal_status": run.status.value,
        "condemned": run.condemned,
        "condemned_at": run.condemned_at,
        "unwind_state": run.unwind_state.value,
        "unwind_attempts": run.unwind_attempts,
        "unwind_next_at": run.unwind_next_at,
        "unwind_note": None if run.unwind_note is None else redact_text(run.unwind_note),
        "error": None if run.error is None else redact_text(run.error),
        "source_run_id": run.source_run_id,
        "created_at": run.created_at,
        "created_at_iso": iso(run.created_at),
        "updated_at": run.updated_at,
        "updated_at_iso": iso(run.updated_at),
        "condemned_at_iso": iso(run.condemned_at),
        "pruned_at": run.pruned_at,  # retention removed its journal; the row is a stub
        "pruned_at_iso": iso(run.pruned_at),
    }


# -- one run -------------------------------------------------------------------------------------


def call_values(
    journal: OperatorJournal, run_id: str, suffix: str, secret_keys: tuple[str, ...] = SECRET_KEYS
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
    journal: OperatorJournal, run_id: str, secret_keys: tuple[str, ...] = SECRET_KEYS
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
    journal: OperatorJournal,
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
        "prompt_preview": cut(redact_text(run.prompt)),
        "prompt_whole": len(run.prompt) >= PREVIEW_CHARS,
        "in_progress": moving,
        "can_redrive": run.condemned and run.unwind_state in REDRIVABLE,
    }
