"""A person's word (docs/reference/approvals.md): ``approve``/``deny`` a suspended call, ``approve-compensation``/
``deny-compensation`` an approval-gated step, and ``audit``, the run's trail of who did what.

The actor the trail names is ``SAGA_ACTOR``, else the OS user: the shell's identity, not a flag anyone
could fill in with another name. Exit codes: 0 when the decision stands (also when it was already
taken the same way: deciding twice is a no-op), 1 when it cannot apply (unknown run, call or step; a
condemned run; decided the other way), with one line saying why.
"""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from ..compensation.actors import default_actor
from ..journal.records import CompensationGate, ToolRecord
from ..operating import actions
from ..operating.audit import read_audit
from ..operating.views import audit_row
from ..settings import get_settings
from .commands_bulk import approve_compensation_act, bulk_filters, filter_options, run_bulk_command
from .common import configured_journal, fail
from .render import dump, out, safe, when

_REASON = click.option("--reason", default="", help="Why (kept in the run's audit trail).")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _decide(decision: str, run_id: str, target: str, reason: str, as_json: bool) -> None:
    actor = default_actor()
    with configured_journal(get_settings()) as journal:
        outcome = actions.decide(
            decision, run_id, target, journal=journal, actor=actor, reason=reason, via="cli"
        )
        if isinstance(outcome, ToolRecord):
            # Who decided: this person, or whoever decided the same way before (a repeat is a no-op).
            decided = [
                row.actor
                for row in read_audit(journal, run_id)
                if row.target == outcome.tool_call_id and row.action.value in ("approved", "denied")
            ]
            actor = decided[0] if decided else actor
    data = _outcome_dict(decision, run_id, target, actor, outcome)
    if as_json:
        dump(data)
        return
    out.print(
        f"run [bold]{safe(run_id)}[/]: {safe(data['what'])} [bold]{safe(target)}[/] {safe(data['state'])} "
        f"(by {safe(data['by'])})"
    )
    if data.get("next"):
        out.print(safe(data["next"]))


def _outcome_dict(decision: str, run_id: str, target: str, actor: str, outcome: Any) -> dict[str, Any]:
    if isinstance(outcome, ToolRecord):
        nxt = {
            "approved": "resume the run to execute it (resume_run)",
            "denied": "resume the run: the planner gets the denial as this call's error",
        }.get(outcome.status.value, "")
        return {
            "run_id": run_id,
            "decision": decision,
            "what": "call",
            "target": target,
            "state": outcome.status.value,
            "by": actor,
            "next": nxt,
        }
    assert isinstance(outcome, CompensationGate)
    return {
        "run_id": run_id,
        "decision": decision,
        "what": "compensation of step",
        "target": target,
        "state": outcome.decision.value,
        "by": outcome.actor,
        "reason": outcome.reason,
        "next": "the sweeper resumes the unwind, or: saga-worker compensate " + run_id,
    }


@click.command()
@click.argument("run_id")
@click.argument("call_id")
@_REASON
@_JSON
def approve(run_id: str, call_id: str, reason: str, as_json: bool) -> None:
    """Approve the suspended call CALL_ID of RUN_ID: the run's next resume executes it, once."""
    _decide("approve", run_id, call_id, reason, as_json)


@click.command()
@click.argument("run_id")
@click.argument("call_id")
@_REASON
@_JSON
def deny(run_id: str, call_id: str, reason: str, as_json: bool) -> None:
    """Deny the suspended call CALL_ID of RUN_ID: it is recorded denied and never executes."""
    _decide("deny", run_id, call_id, reason, as_json)


@click.command("approve-compensation")
@click.argument("run_id", required=False)
@click.argument("suffix", required=False)
@_REASON
@_JSON
@filter_options
def approve_compensation(
    run_id: str | None,
    suffix: str | None,
    reason: str,
    as_json: bool,
    status: str | None,
    tool: str | None,
    older_than: str | None,
    run_prefix: str | None,
    yes: bool,
) -> None:
    """Allow the gated compensation of step SUFFIX of RUN_ID (its unwind reads awaiting-approval).

    With filters instead, every gated compensation awaiting a decision in the runs they select (with
    --tool, only that tool's): a dry run unless --yes; needs SAGA_TOOLS (the tools say which steps
    are gated). Run it again to resume: steps decided before are skipped."""
    filters = bulk_filters(status, tool, older_than, run_prefix)
    if filters is not None:
        if run_id is not None or suffix is not None:
            raise click.UsageError("approve-compensation: name one step, or give filters for many, not both")
        act = approve_compensation_act(reason)
        run_bulk_command(
            "approve-compensation", filters, yes=yes, as_json=as_json, make_act=act, needs_tools=True
        )
        return
    if run_id is None or suffix is None:
        raise click.UsageError(
            "approve-compensation: name RUN_ID and SUFFIX, or give filters (--status, --tool, ...)"
        )
    _decide("approve-compensation", run_id, suffix, reason, as_json)


@click.command("deny-compensation")
@click.argument("run_id")
@click.argument("suffix")
@_REASON
@_JSON
def deny_compensation(run_id: str, suffix: str, reason: str, as_json: bool) -> None:
    """Refuse the gated compensation of step SUFFIX of RUN_ID: it reads skipped-denied, the effect stays."""
    _decide("deny-compensation", run_id, suffix, reason, as_json)


@click.command()
@click.argument("run_id")
@_JSON
def audit(run_id: str, as_json: bool) -> None:
    """Print RUN_ID's audit trail, oldest first: who condemned it and why, every approval and denial,
    and each unwind's outcome by status (dry runs are not in it)."""
    with configured_journal(get_settings()) as journal:
        if journal.get_run(run_id) is None:
            fail(f"run {run_id!r} is not in the journal")
        rows = [audit_row(row) for row in read_audit(journal, run_id)]
    if as_json:
        dump(rows)
        return
    table = Table(title=f"audit trail of run {safe(run_id)} ({len(rows)})")
    for col in ("when", "who", "via", "what", "step / call", "reason", "detail"):
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(
            when(row["at"]),
            safe(row["actor"]),
            safe(row["via"]),
            safe(row["action"]),
            safe(row["target"] or ""),
            safe(row["reason"] or "", lines=True),
            safe(row["summary"]),
        )
    out.print(table)
