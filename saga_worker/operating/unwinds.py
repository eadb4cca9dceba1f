"""A run's steps and its distributed unwinds as the run page, the API and the CLI show them: each
tool record with its compensation claim as it is now (owner, lease), and each unwind's worklist
with the entry stored for every step (or why there is none yet).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ..compensation.engine import UNWOUND
from ..compensation.groups import group_numbers
from ..compensation.report import CompensationStatus, halted_at, until_halt_in_groups
from ..core.keys import compensate_key, execute_key
from ..core.redact import SECRET_KEYS, redact_text
from ..journal.records import (
    AuditRecord,
    ClaimStatus,
    CompensationClaim,
    RecordStatus,
    ToolRecord,
    UnwindInfo,
)
from ..journal.roles import OperatorJournal
from .display import iso, preview, span, whole

_ENDED = frozenset({RecordStatus.SUCCEEDED, RecordStatus.FAILED, RecordStatus.DENIED, RecordStatus.MIRRORED})


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
        "step": record.step,  # the planner decision that made the call
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
        **span(record.created_at, record.updated_at if record.status in _ENDED else None),
        "execute_key": execute_key(
            record.origin_run_id, record.mode, record.tool_name, record.tool_call_id, record.input
        ),
        "compensation_key": compensate_key(record.origin_run_id, record.suffix),
        "compensation": _claim_dict(claim, now),
    }


def journal_steps(
    journal: OperatorJournal, run_id: str, secret_keys: tuple[str, ...] = SECRET_KEYS
) -> list[dict[str, Any]]:
    """The run's tool records in execution order, each with its compensation claim as it is now."""
    records = journal.list_records(run_id)
    claims = journal.get_claims([(r.origin_run_id, r.suffix) for r in records])
    now = journal.now()
    groups = _groups_as_reported(records)
    return [
        {
            **step_dict(r, claims.get((r.origin_run_id, r.suffix)), now, secret_keys),
            **groups.get((r.origin_run_id, r.suffix), {"group": None, "group_size": 0}),
        }
        for r in records
    ]


def _groups_as_reported(records: list[ToolRecord]) -> dict[tuple[str, str], dict[str, int]]:
    """Each unwound step's group as an unwind's report numbers it (``group``: its place in execution
    order among the groups of the steps an unwind undoes) and how many steps the group has; a call
    no unwind undoes (suspended, denied, mirrored) is in none."""
    worklist = [r for r in records if r.status in UNWOUND]
    numbers = group_numbers(worklist)
    sizes = Counter(numbers.values())
    return {where: {"group": n, "group_size": sizes[n]} for where, n in numbers.items()}


def unwind_dict(
    journal: OperatorJournal,
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

    steps = until_halt_in_groups(
        info.position_groups(), reached, not_attempted, lambda step: (step["entry"] or {}).get("status")
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
        **span(info.created_at, end.at if end is not None else None),
        "outcome": outcome,
        "steps": steps,
        "done": done,
    }


def list_unwinds(
    journal: OperatorJournal,
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
