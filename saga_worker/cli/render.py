"""How the commands print: rich tables for people, JSON for programs."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ..compensation.report import CompensationReport, CompensationStatus
from ..journal.records import RunInfo

out = Console(highlight=False)

STATUS_STYLE = {
    CompensationStatus.COMPENSATED.value: "green",
    CompensationStatus.ALREADY_COMPENSATED.value: "green",
    CompensationStatus.WOULD_COMPENSATE.value: "cyan",
    CompensationStatus.SKIPPED_NO_HOOK.value: "yellow",
    CompensationStatus.SKIPPED_NOT_EXECUTED.value: "yellow",
    CompensationStatus.UNCERTAIN.value: "magenta",
    CompensationStatus.BUSY.value: "red",
    CompensationStatus.FAILED.value: "bold red",
    CompensationStatus.NOT_ATTEMPTED.value: "dim",
    CompensationStatus.AWAITING_APPROVAL.value: "bold yellow",
    CompensationStatus.SKIPPED_DENIED.value: "yellow",
}


def dump(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def when(ts: float | None) -> str:
    return "" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def report_table(report: CompensationReport | dict[str, Any], title: str | None = None) -> Table:
    data = report.model_dump(mode="json") if isinstance(report, CompensationReport) else report
    kind = "plan (dry run)" if data["dry_run"] else "unwind"
    by = f" by {data['condemned_by']}" if data.get("condemned_by") else ""
    why = f" ({data['reason']})" if data.get("reason") else ""
    condemned = f"yes{by}{why}" if data["condemned"] else "no"
    table = Table(title=title or f"{kind} of run {data['run_id']} — condemned: {condemned}")
    errors = any(e.get("error") for e in data["entries"])
    for col in ("#", "step", "tool", "status", "attempts", "idempotency key") + (
        ("error",) if errors else ()
    ):
        table.add_column(col, overflow="fold", no_wrap=col in ("status", "tool"))
    for i, e in enumerate(data["entries"], 1):
        style = STATUS_STYLE.get(e["status"], "")
        status = f"[{style}]{e['status']}[/]" if style else e["status"]
        if e.get("needs_approval") and e["status"] == CompensationStatus.WOULD_COMPENSATE.value:
            status += " (needs approval)"
        row = [
            str(i),
            e["suffix"],
            e["tool_name"],
            status,
            str(e.get("attempts", 0)),
            e["idempotency_key"],
        ]
        table.add_row(*row, *([e.get("error") or ""] if errors else []))
    return table


def steps_table(run_id: str, steps: Sequence[dict[str, Any]], title: str | None = None) -> Table:
    table = Table(title=title or f"journal of run {run_id}")
    for col in ("seq", "step", "tool", "call", "compensation", "comp. attempts", "note"):
        table.add_column(col, overflow="fold")
    for s in steps:
        comp = s["compensation"]
        state = comp["status"] if comp else "—"
        style = {"compensated": "green", "failed": "red", "claimed": "cyan"}.get(state, "dim")
        note = (comp or {}).get("error") or s["error"] or ""
        table.add_row(
            str(s["seq"]),
            s["suffix"],
            s["tool_name"],
            s["status"],
            f"[{style}]{state}[/]",
            str(comp["attempts"]) if comp else "0",
            note,
        )
    return table


def runs_table(found: Sequence[RunInfo]) -> Table:
    table = Table(title=f"runs ({len(found)})")
    for col in ("run", "status", "condemned", "unwind", "re-drives", "updated", "note"):
        table.add_column(col, overflow="fold")
    for r in found:
        unwind_state = r.unwind_state.value
        style = {
            "complete": "green",
            "attention": "bold red",
            "incomplete": "yellow",
            "pending": "cyan",
            "awaiting": "bold yellow",
        }.get(unwind_state, "")
        table.add_row(
            r.run_id,
            r.status.value,
            "yes" if r.condemned else "no",
            f"[{style}]{unwind_state}[/]" if style else unwind_state,
            str(r.unwind_attempts),
            when(r.updated_at),
            r.unwind_note or "",
        )
    return table
