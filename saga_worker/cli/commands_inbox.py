"""``inbox``: everything that waits for a person, across runs, oldest first (the console's inbox)."""

from __future__ import annotations

from typing import Any

import click

from ..executor.context import load_tools
from ..operating.inbox import INBOX_KINDS, INBOX_LIMIT, INBOX_MAX, inbox
from ..settings import get_settings
from .common import configured_journal
from .render import ago, dump, when

# What to type next, per kind (the console offers the same as buttons).
NEXT = {
    "suspended": "saga-worker approve|deny {run_id} {target} --reason …",
    "gated": "saga-worker approve-compensation|deny-compensation {run_id} {target} --reason …",
    "attention": "saga-worker redrive {run_id}",
    "uncertain": "saga-worker report {run_id}; resume the run, or saga-worker compensate {run_id}",
}


def stuck_line(item: dict[str, Any], now: float) -> str:
    """Why a stuck unwind stands still, its attempts and error, and what happens next on its own."""
    if item["queued_at"] is not None and item["why"] == "queued":
        return f"queued {ago(now - item['queued_at'])} ago as task {item['queued_task_id']}, not started"
    parts = [item["why"]]
    if item["attempts"]:
        parts.append(f"after {item['attempts']} attempt{'s' if item['attempts'] != 1 else ''}")
    text = " ".join(parts)
    if item["error"]:
        text += f": {item['error']}"
    if item["next_sweep_at"] is not None:
        text += f"; the sweeper re-drives it at {when(item['next_sweep_at'])} (re-driven {item['redrives']} times so far)"
    if item["queued_at"] is not None:
        text += f"; a request queued {ago(now - item['queued_at'])} ago is not started"
    return text


@click.command("inbox")
@click.option(
    "--limit",
    default=INBOX_LIMIT,
    show_default=True,
    type=click.IntRange(1, INBOX_MAX),
    help="At most this many of each kind.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def inbox_command(limit: int, as_json: bool) -> None:
    """What waits for a person, across runs, oldest first: suspended calls, gated compensations,
    unwinds flagged for attention, calls whose outcome was never recorded, and stuck unwinds (halted,
    interrupted, or queued and not started)."""
    settings = get_settings()
    tools = {}
    if settings.tools:  # which compensations are gated is the tools' to say
        try:
            tools = load_tools(settings.tools)
        except Exception:  # noqa: BLE001 - without them a gated run is still listed, by its unwind state
            tools = {}
    with configured_journal(settings) as journal:
        found = inbox(journal, tools, secret_keys=settings.secret_keys(), limit=limit)
    if as_json:
        dump(found)
        return
    counts = ", ".join(f"{found['counts'][k]} {k}" for k in INBOX_KINDS)
    click.echo(f"waiting for a person: {found['total']} ({counts}), oldest first")
    if found["more"]:
        click.echo(f"more wait than are listed: only the oldest {limit} of each kind (--limit to list more)")
    for item in found["items"]:
        step = " ".join(x for x in (item["suffix"], item["tool_name"]) if x)
        click.echo(f"{when(item['since'])}  {item['kind']:<10} {item['run_id']}  {step}".rstrip())
        if item.get("note"):
            click.echo(f"    {item['note']}")
        target = item["target"] or item["suffix"] or ""
        click.echo("    next: " + NEXT[item["kind"]].format(run_id=item["run_id"], target=target))
    stuck = found["stuck"]
    click.echo(f"stuck: {stuck['count']} (unwinds neither complete nor waiting for a decision), oldest first")
    if stuck["more"]:
        click.echo(
            f"more are stuck than are listed: only {limit} of each unwind state (--limit to list more)"
        )
    for item in stuck["items"]:
        step = " ".join(x for x in (item["suffix"], item["tool_name"]) if x)
        click.echo(f"{when(item['since'])}  {item['why']:<11} {item['run_id']}  {step}".rstrip())
        click.echo(f"    {stuck_line(item, found['now'])}")
        if item["actions"]:
            click.echo(f"    next: saga-worker redrive {item['run_id']}")
