"""``demo``: the sample order run on the embedded default, then its unwind on a real embedded worker."""

from __future__ import annotations

import json
import uuid
from typing import Any

import click
from rich.table import Table

from ..core.redact import redact_url
from ..operating.unwinds import journal_steps
from ..settings import SagaSettings, get_settings
from .common import configured_journal
from .processes import celery, embedded_worker
from .progress import wait_with_progress
from .render import dump, out, report_table, steps_table

DEMO_TOOLS = "saga_worker.demo:TOOLS"
DEMO_REASON = "saga-worker demo: the sample order reversed"


@click.command()
@click.option("--run-id", default=None, help="Run id of the sample order (default: a fresh one).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON at the end.")
def demo(run_id: str | None, as_json: bool) -> None:
    """Run the sample order (charge, reserve stock, send email), then unwind it on a real embedded worker."""
    settings = get_settings()
    run_id = run_id or f"order-{uuid.uuid4().hex[:8]}"
    out.rule(f"[bold]1. the order run {run_id}[/]")
    journal_url, broker_url = settings.resolved_journal_url(), settings.resolved_broker_url()
    out.print(f"journal: {redact_url(journal_url)}  broker: {redact_url(broker_url)}")
    _place_order(settings, run_id)

    out.rule("[bold]2. unwinding it on an embedded Celery worker[/]")
    from ..celery import compensate_run
    from ..celery.sending import celery_enqueue
    from ..operating import actions

    app = celery()
    app.prepare_stores(app.current_app())
    # Sent as every unwind request is (checked first: a bad SAGA_ACTOR is refused before any worker
    # starts); the message waits in the embedded broker for the worker started next.
    task_id = actions.enqueue_unwind(
        run_id, enqueue=celery_enqueue(compensate_run), actor=None, reason=DEMO_REASON, via="cli"
    )
    async_result = app.compensate_run.AsyncResult(task_id)
    log_path = str(settings.home.resolve() / "demo-worker.log")
    # The one place sample tools are used: the demo names them for its own worker.
    with embedded_worker(settings, tools=DEMO_TOOLS, log_path=log_path) as proc:
        out.print(
            f"saga.compensate_run sent as task {task_id}; worker started (pid {proc.pid}, log {log_path})"
        )
        data = wait_with_progress(
            async_result, run_id, settings, 60.0, quiet=False, worker=proc, worker_log=log_path
        )
        _show_results(run_id, data)
        out.print("[dim]stopping the worker…[/]")
    if as_json:
        dump(data)


def _place_order(settings: SagaSettings, run_id: str) -> None:
    from ..contrib import demo as sample
    from ..recording.runs import stream_durable

    with configured_journal(settings, create=True) as journal:
        for event in stream_durable(
            run_id,
            journal=journal,
            tools=sample.TOOLS,
            planner=sample.order_planner(),
            prompt="place order A-1001",
        ):
            if event.kind == "tool":
                out.print(
                    f"  {event.tool}({json.dumps(event.input)}) → {event.outcome}: {json.dumps(event.output)}"
                )
            elif event.kind == "end" and event.result is not None:
                out.print(f"  run {event.result.status}: {event.result.text or event.result.error}")
        out.print(steps_table(run_id, journal_steps(journal, run_id), title=f"journal of run {run_id}"))


def _show_results(run_id: str, data: dict[str, Any]) -> None:
    from ..contrib import demo as sample

    out.rule("[bold]3. the report[/]")
    out.print(report_table(data))
    ops = sample.FakeProvider().operations()
    table = Table(title="what the provider saw (one row per idempotency key)")
    for col in ("idempotency key", "operation", "detail"):
        table.add_column(col)
    for key, kind, detail in ops:
        if key.startswith(run_id + ":"):
            table.add_row(key, kind, json.dumps(detail, sort_keys=True))
    out.print(table)
