"""``saga-worker``: run the demo, workers and beat; unwind a run; read the journal (DESIGN.md §5).

Every listing and report prints as a table for people and as JSON with ``--json`` for programs.
Errors print one line and exit non-zero.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.table import Table

from .compensation.report import CompensationReport, CompensationStatus
from .errors import SagaError
from .journal import Journal, open_journal
from .keys import check_run_id
from .settings import SagaSettings, get_settings
from .views import journal_steps, parse_run_query, run_summary, runs_page

CELERY_APP = "saga_worker.celery:app"  # the library's own app: no top-level package needed
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
}


def fail(message: str) -> NoReturn:
    # One line, never wrapped, whatever the terminal's width: scripts grep it.
    click.echo(click.style("error:", fg="red", bold=True) + " " + " ".join(message.split()), err=True)
    sys.exit(1)


class _Group(click.Group):
    """Turns any error into one clear line and a non-zero exit (click's own usage errors stay as they are)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except SagaError as exc:
            fail(str(exc))
        except Exception as exc:  # a broker or database that cannot be reached, a bad URL
            fail(f"{type(exc).__name__}: {exc}")


def _journal(settings: SagaSettings) -> Journal:
    return open_journal(settings.resolved_journal_url())


def _dump(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def _when(ts: float | None) -> str:
    return "" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def report_table(report: CompensationReport | dict[str, Any], title: str | None = None) -> Table:
    data = report.model_dump(mode="json") if isinstance(report, CompensationReport) else report
    kind = "plan (dry run)" if data["dry_run"] else "unwind"
    table = Table(
        title=title or f"{kind} of run {data['run_id']} — condemned: {'yes' if data['condemned'] else 'no'}"
    )
    errors = any(e.get("error") for e in data["entries"])
    for col in ("#", "step", "tool", "status", "attempts", "idempotency key") + (
        ("error",) if errors else ()
    ):
        table.add_column(col, overflow="fold", no_wrap=col in ("status", "tool"))
    for i, e in enumerate(data["entries"], 1):
        style = STATUS_STYLE.get(e["status"], "")
        row = [
            str(i),
            e["suffix"],
            e["tool_name"],
            f"[{style}]{e['status']}[/]" if style else e["status"],
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


@click.group(cls=_Group)
@click.version_option(package_name="saga-worker")
def main() -> None:
    """saga-worker: condemn a run first, then compensate its steps in reverse, and report every step."""


# -- reading the journal ---------------------------------------------------------------------------


@main.command()
@click.option("--limit", default=50, show_default=True, help="How many runs, most recently updated first.")
@click.option("--condemned", is_flag=True, help="Only condemned runs.")
@click.option("--status", default=None, help="Only runs with this status (running, finished, failed, ...).")
@click.option("--unwind", default=None, help="Only runs in this unwind state (incomplete, attention, ...).")
@click.option("--search", default=None, help="Only runs whose id starts with this.")
@click.option("--cursor", default=None, help="The next page: the cursor the previous page printed.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def runs(
    limit: int,
    condemned: bool,
    status: str | None,
    unwind: str | None,
    search: str | None,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List runs with their status, tombstone and unwind state (``attention``: a person must look)."""
    query = parse_run_query(
        status=status,
        condemned=True if condemned else None,
        unwind=unwind,
        search=search,
        cursor=cursor,
        limit=limit,
    )
    with _journal(get_settings()) as journal:
        page = runs_page(journal, query)
    found = page.runs
    if as_json:
        _dump([run_summary(r) for r in found])
        return
    table = Table(title=f"runs ({len(found)})")
    for col in ("run", "status", "condemned", "unwind", "re-drives", "updated", "note"):
        table.add_column(col, overflow="fold")
    for r in found:
        unwind_state = r.unwind_state.value
        style = {"complete": "green", "attention": "bold red", "incomplete": "yellow", "pending": "cyan"}.get(
            unwind_state, ""
        )
        table.add_row(
            r.run_id,
            r.status.value,
            "yes" if r.condemned else "no",
            f"[{style}]{unwind_state}[/]" if style else unwind_state,
            str(r.unwind_attempts),
            _when(r.updated_at),
            r.unwind_note or "",
        )
    out.print(table)
    if page.next_cursor:
        out.print(f"more: saga-worker runs --cursor {page.next_cursor}")


@main.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def report(run_id: str, as_json: bool) -> None:
    """Show a run from the journal: its steps and their compensation state."""
    with _journal(get_settings()) as journal:
        run = journal.get_run(run_id)
        if run is None:
            fail(f"run {run_id!r} is not in the journal")
        steps = journal_steps(journal, run_id)
    if as_json:
        _dump({"run": run_summary(run), "steps": steps})
        return
    out.print(
        f"run [bold]{run_id}[/]: {run.status.value}, condemned: {'yes' if run.condemned else 'no'}, "
        f"unwind: {run.unwind_state.value}" + (f" ({run.unwind_note})" if run.unwind_note else "")
    )
    out.print(steps_table(run_id, steps))


# -- unwinding -------------------------------------------------------------------------------------


@main.command()
@click.argument("run_id")
@click.option("--dry-run", is_flag=True, help="Plan only: nothing is written, no hook is called.")
@click.option(
    "--wait/--no-wait", default=True, show_default=True, help="Wait for the report (else print the task id)."
)
@click.option("--local", is_flag=True, help="Unwind in this process instead of on a worker.")
@click.option("--timeout", default=300.0, show_default=True, help="Seconds to wait for the report.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def compensate(run_id: str, dry_run: bool, wait: bool, local: bool, timeout: float, as_json: bool) -> None:
    """Condemn RUN_ID and undo its steps in reverse order (on a worker unless --local)."""
    check_run_id(run_id)  # before anything is enqueued or written
    settings = get_settings()
    if local:
        from . import executor
        from .compensation.engine import compensate_run as unwind_here

        ctx = executor.WorkerContext(settings)
        try:
            result = unwind_here(run_id, journal=ctx.journal, tools=ctx.tools, dry_run=dry_run, lock=ctx.lock)
        finally:
            ctx.close()
        _show_report(result.model_dump(mode="json"), as_json)
        _exit_for(result.model_dump(mode="json"))
        return
    async_result = _celery().compensate_run.delay(run_id, dry_run=dry_run)
    if not wait:
        _dump({"task_id": async_result.id, "run_id": run_id}) if as_json else out.print(
            f"unwind of run [bold]{run_id}[/] enqueued as task {async_result.id}"
        )
        return
    data = _wait_with_progress(async_result, run_id, settings, timeout, quiet=as_json)
    _show_report(data, as_json)
    _exit_for(data)


def _show_report(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _dump(data)
    else:
        out.print(report_table(data))


def _exit_for(data: dict[str, Any]) -> None:
    # A halted unwind is a result, not an error: the report says why. Exit 2 lets scripts notice.
    if any(e["status"] in ("failed", "busy") for e in data["entries"]):
        sys.exit(2)


def _wait_with_progress(
    async_result: Any,
    run_id: str,
    settings: SagaSettings,
    timeout: float,
    quiet: bool,
    worker: subprocess.Popen[bytes] | None = None,
    worker_log: str = "",
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    seen = 0
    with _journal(settings) as journal:
        status = None if quiet else out.status(f"unwinding run {run_id} (task {async_result.id})")
        if status is not None:
            status.start()
        try:
            done = False
            while not done:
                done = async_result.ready()
                if not done and worker is not None and worker.poll() is not None:
                    fail(
                        f"the worker exited with code {worker.returncode} before the report came; see {worker_log}"
                    )
                if not done and time.monotonic() > deadline:
                    fail(
                        f"no report for run {run_id!r} after {timeout:.0f}s (task {async_result.id}); "
                        "is a worker running? (saga-worker worker)"
                    )
                if not quiet:
                    entries = _unwind_entries(journal, async_result.id)
                    for entry in entries[seen:]:
                        style = STATUS_STYLE.get(entry["status"], "")
                        out.print(
                            f"  step {entry['suffix']} ({entry['tool_name']}): [{style}]{entry['status']}[/]"
                        )
                    seen = max(seen, len(entries))
                if not done:
                    time.sleep(0.1)
        finally:
            if status is not None:
                status.stop()
    value = async_result.get(timeout=max(1.0, deadline - time.monotonic()), propagate=False)
    if async_result.failed():
        fail(f"unwind of run {run_id!r} failed on the worker: {type(value).__name__}: {value}")
    return dict(value)


def _unwind_entries(journal: Journal, unwind_id: str) -> list[dict[str, Any]]:
    try:
        entries = journal.list_unwind_entries(unwind_id)
    except NotImplementedError:
        return []
    return [entries[p] for p in sorted(entries)]


@main.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def redrive(run_id: str, as_json: bool) -> None:
    """Hand a run flagged for attention (the sweeper gave up) back to the workers once."""
    from . import actions

    settings = get_settings()
    with _journal(settings) as journal:
        task_id = actions.redrive(
            run_id,
            journal=journal,
            enqueue=actions.celery_enqueue(),
            actor=_shell_actor(),
            claim_ttl=settings.claim_ttl,
        )
    _dump({"run_id": run_id, "task_id": task_id}) if as_json else out.print(
        f"run [bold]{run_id}[/] re-driven as task {task_id}"
    )


def _shell_actor() -> str:
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except Exception:
        return "cli"


# -- the console -----------------------------------------------------------------------------------


@main.command()
@click.option("--host", default=None, help="Address to bind (default SAGA_CONSOLE_HOST, 127.0.0.1).")
@click.option("--port", default=None, type=int, help="Port (default SAGA_CONSOLE_PORT, 8350).")
def serve(host: str | None, port: int | None) -> None:
    """Serve the operator's console (pages, JSON API, /metrics); needs SAGA_CONSOLE_TOKENS."""
    try:
        import uvicorn

        from .console.app import create_app
    except ImportError as exc:
        fail(f"the console needs its extra: pip install 'saga-worker[console]' ({exc})")
    settings = get_settings()
    app = create_app(settings)  # refuses without tokens, before anything binds
    uvicorn.run(
        app,
        host=host or settings.console_host,
        port=port or settings.console_port,
        log_level="info",
        proxy_headers=False,
        server_header=False,
    )


@main.command()
@click.argument("name")
@click.option(
    "--role",
    type=click.Choice(["viewer", "operator"]),
    default="viewer",
    show_default=True,
    help="What it may do.",
)
def token(name: str, role: str) -> None:
    """Make a console token: prints the token (once) and its SAGA_CONSOLE_TOKENS entry (a digest)."""
    from .console.auth import Role, new_token

    secret, entry = new_token(name, Role(role))
    click.echo(f"token (give it to {name}; it is not stored anywhere): {secret}")
    click.echo(f"SAGA_CONSOLE_TOKENS entry: {entry}")


# -- processes -------------------------------------------------------------------------------------


def _demo_results(run_id: str, data: dict[str, Any]) -> None:
    from . import demo as sample

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


def _celery() -> Any:
    """saga_worker.celery, imported on demand (the commands that only read the journal need no Celery)."""
    return importlib.import_module("saga_worker.celery")


def _celery_argv(command: str, extra: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", CELERY_APP, command, *extra]


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option(
    "--beat/--no-beat",
    "with_beat",
    default=None,
    help="Run the sweeper's beat inside the worker (default: on for the embedded setup).",
)
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def worker(with_beat: bool | None, celery_args: tuple[str, ...]) -> None:
    """Start a Celery worker (extra arguments go to `celery worker`)."""
    settings = get_settings()
    extra = list(celery_args)
    if not any(a.startswith(("-l", "--loglevel")) for a in extra):
        extra += ["--loglevel", "info"]
    if (
        (settings.embedded if with_beat is None else with_beat)
        and "-B" not in extra
        and "--beat" not in extra
    ):
        extra.append("-B")
    _metrics_folder(settings)
    os.execv(sys.executable, _celery_argv("worker", extra))


def _metrics_folder(settings: SagaSettings) -> None:
    """With SAGA_METRICS_PORT, the pool's children count in files of a folder the main process reads
    (prometheus_client's multiprocess mode). It must be set before anything imports the client, and
    start empty: files left by an earlier worker would add its counts to this one's."""
    if settings.metrics_port is None:
        return
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not folder:
        import tempfile

        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="saga-metrics-")
        return
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):
        if name.endswith(".db"):
            os.unlink(os.path.join(folder, name))


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def beat(celery_args: tuple[str, ...]) -> None:
    """Start Celery beat for the sweeper (saga.retry_uncertain); RedBeat keeps it to one when Redis is set."""
    extra = list(celery_args)
    if not any(a.startswith(("-l", "--loglevel")) for a in extra):
        extra += ["--loglevel", "info"]
    os.execv(sys.executable, _celery_argv("beat", extra))


@main.group()
def db() -> None:
    """The journal's schema."""


@db.command()
def upgrade() -> None:
    """Migrate the journal at SAGA_JOURNAL_URL to the newest schema (Alembic)."""
    url = get_settings().resolved_journal_url()
    from .journal import migrate

    open_journal(url, migrate=True).close()
    out.print(f"journal schema at revision {migrate.head_revision()}")


# -- the demo --------------------------------------------------------------------------------------


@contextmanager
def embedded_worker(
    settings: SagaSettings, *, log_path: str | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A real `celery -A saga_worker.celery:app worker -B` in its own process group, stopped (and reaped) on exit."""
    env = dict(os.environ, SAGA_HOME=str(settings.home.resolve()))
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        _celery_argv(
            "worker", ["-B", "--loglevel", "warning", "--concurrency", "1", "-n", f"demo-{os.getpid()}@%h"]
        ),
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        # The work is done and acked; an embedded beat takes ~6 s to wind down, so do not wait for it
        # long (a beat killed mid-write of its schedule file recreates the file on its next start).
        stop_process_group(proc, grace=2.0)
        if log_path:
            log.close()  # type: ignore[union-attr]


def stop_process_group(proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
    """Warm-stop a worker (SIGTERM to its main process), then kill its whole group if it lingers."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


@main.command()
@click.option("--run-id", default=None, help="Run id of the sample order (default: a fresh one).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON at the end.")
def demo(run_id: str | None, as_json: bool) -> None:
    """Run the sample order (charge, reserve stock, send email), then unwind it on a real embedded worker."""
    from . import demo as sample
    from .runs import stream_durable

    settings = get_settings()
    run_id = run_id or f"order-{uuid.uuid4().hex[:8]}"
    out.rule(f"[bold]1. the order run {run_id}[/]")
    out.print(f"journal: {settings.resolved_journal_url()}  broker: {settings.resolved_broker_url()}")
    with _journal(settings) as journal:
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

    out.rule("[bold]2. unwinding it on an embedded Celery worker[/]")
    celery = _celery()
    celery.prepare_stores(celery.current_app())
    log_path = str(settings.home.resolve() / "demo-worker.log")
    with embedded_worker(settings, log_path=log_path) as proc:
        out.print(f"worker started (pid {proc.pid}, log {log_path}); compensate_run.delay({run_id!r}).get()")
        async_result = celery.compensate_run.delay(run_id)
        data = _wait_with_progress(
            async_result, run_id, settings, 60.0, quiet=False, worker=proc, worker_log=log_path
        )
        _demo_results(run_id, data)
        out.print("[dim]stopping the worker…[/]")
    if as_json:
        _dump(data)


if __name__ == "__main__":  # pragma: no cover
    main()
