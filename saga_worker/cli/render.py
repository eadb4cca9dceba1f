"""How the commands print: rich tables for people, JSON for programs."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..compensation.report import CompensationReport, CompensationStatus
from ..core.display import neutral

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


def safe(value: Any, *, lines: bool = False) -> str:
    """A value from the journal for a table cell or a markup string: its control and bidi characters
    shown as escapes (display.neutral) and its square brackets as text, not rich markup."""
    return escape(neutral(value, lines=lines))


def dump(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def when(ts: float | None) -> str:
    """A journal time as UTC, saying so (``Z``): the console, the API and the logs show UTC too."""
    return "" if ts is None else time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts))


def ago(seconds: float) -> str:
    """A duration as a person reads it: ``42 s``, ``3 min``, ``2 h``, ``5 d``."""
    s = max(0.0, seconds)
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    if s < 36 * 3600:
        return f"{s / 3600:.0f} h"
    return f"{s / 86400:.0f} d"


def report_table(report: CompensationReport | dict[str, Any], title: str | None = None) -> Table:
    data = report.model_dump(mode="json") if isinstance(report, CompensationReport) else report
    kind = "plan (dry run)" if data["dry_run"] else "unwind"
    by = f" by {safe(data['condemned_by'])}" if data.get("condemned_by") else ""
    why = f" ({safe(data['reason'])})" if data.get("reason") else ""
    condemned = f"yes{by}{why}" if data["condemned"] else "no"
    table = Table(title=title or f"{kind} of run {safe(data['run_id'])} — condemned: {condemned}")
    errors = any(e.get("error") for e in data["entries"])
    # A group column only where the run recorded one (a group of more than one step).
    numbers = [e.get("group", 0) for e in data["entries"]]
    groups = len(set(numbers)) < len(numbers)
    for col in (
        "#",
        *(("group",) if groups else ()),
        "step",
        "tool",
        "status",
        "attempts",
        "idempotency key",
    ) + (("error",) if errors else ()):
        table.add_column(col, overflow="fold", no_wrap=col in ("status", "tool"))
    for i, e in enumerate(data["entries"], 1):
        style = STATUS_STYLE.get(e["status"], "")
        status = f"[{style}]{e['status']}[/]" if style else safe(e["status"])
        if e.get("needs_approval") and e["status"] == CompensationStatus.WOULD_COMPENSATE.value:
            status += " (needs approval)"
        row = [
            str(i),
            *([safe(e.get("group", 0))] if groups else []),
            safe(e["suffix"]),
            safe(e["tool_name"]),
            status,
            safe(e.get("attempts", 0)),
            safe(e["idempotency_key"]),
        ]
        table.add_row(*row, *([safe(e.get("error") or "", lines=True)] if errors else []))
    return table


def steps_table(run_id: str, steps: Sequence[dict[str, Any]], title: str | None = None) -> Table:
    table = Table(title=title or f"journal of run {safe(run_id)}")
    # A group column only where the run recorded one (a group of more than one step).
    groups = any(s.get("group_size", 0) > 1 for s in steps)
    for col in (
        "seq",
        *(("group",) if groups else ()),
        "step",
        "tool",
        "call",
        "compensation",
        "comp. attempts",
        "note",
    ):
        table.add_column(col, overflow="fold")
    for s in steps:
        comp = s["compensation"]
        state = safe(comp["status"]) if comp else "—"
        style = {"compensated": "green", "failed": "red", "claimed": "cyan"}.get(state, "dim")
        note = (comp or {}).get("error") or s["error"] or ""
        table.add_row(
            safe(s["seq"]),
            *([safe(s.get("group") or "—")] if groups else []),
            safe(s["suffix"]),
            safe(s["tool_name"]),
            safe(s["status"]),
            f"[{style}]{state}[/]",
            safe(comp["attempts"]) if comp else "0",
            safe(note, lines=True),
        )
    return table


UNWIND_STYLE = {
    "complete": "green",
    "attention": "bold red",
    "incomplete": "magenta",  # stuck (the inbox's lane): not the yellow of a run waiting for a person
    "pending": "cyan",
    "awaiting": "bold yellow",
}


def runs_table(found: Sequence[Mapping[str, Any]]) -> Table:
    """Runs (``views.run_summary`` rows) as a table for a terminal."""
    table = Table(title=f"runs ({len(found)})")
    for col in ("run", "status", "condemned", "unwind", "re-drives", "updated", "note"):
        table.add_column(col, overflow="fold")
    for r in found:
        unwind_state = safe(r["unwind_state"])
        style = UNWIND_STYLE.get(unwind_state, "")
        status = safe(r["status"])
        table.add_row(
            safe(r["run_id"]),
            f"[yellow]{status}[/]" if r["status"] == "suspended" else status,
            "yes" if r["condemned"] else "no",
            f"[{style}]{unwind_state}[/]" if style else unwind_state,
            str(r["unwind_attempts"]),
            when(r["updated_at"]),
            f"pruned {when(r['pruned_at'])}"
            if r.get("pruned_at") is not None
            else safe(r["unwind_note"] or "", lines=True),
        )
    return table


def runs_lines(found: Sequence[Mapping[str, Any]]) -> list[str]:
    """Runs one a line, tab-separated (run, status, condemned, unwind, re-drives, updated, note), for a
    pipe: no column is wrapped or cut, so an id or a key is never split across lines."""

    def cell(value: Any) -> str:
        return neutral(value).replace("\t", " ").replace("\n", " ")

    return [
        "\t".join(
            (
                cell(r["run_id"]),
                cell(r["status"]),
                "yes" if r["condemned"] else "no",
                cell(r["unwind_state"]),
                str(r["unwind_attempts"]),
                when(r["updated_at"]),
                f"pruned {when(r['pruned_at'])}"
                if r.get("pruned_at") is not None
                else cell(r["unwind_note"] or ""),
            )
        )
        for r in found
    ]
