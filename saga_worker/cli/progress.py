"""Waiting for an unwind on a worker: each step's outcome printed as the journal records it, then the
report from the result backend."""

from __future__ import annotations

import subprocess
import time
from typing import Any

from ..journal.roles import OperatorJournal
from ..settings import SagaSettings
from .common import configured_journal, fail
from .render import STATUS_STYLE, out, safe


def wait_with_progress(
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
    with configured_journal(settings) as journal:
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
                    fail(not_done_message(journal, run_id, async_result.id, settings, timeout))
                if not quiet:
                    seen = _print_new_entries(journal, async_result.id, seen)
                if not done:
                    time.sleep(0.1)
        finally:
            if status is not None:
                status.stop()
    value = async_result.get(timeout=max(1.0, deadline - time.monotonic()), propagate=False)
    if async_result.failed():
        fail(f"unwind of run {run_id!r} failed on the worker: {type(value).__name__}: {value}")
    return dict(value)


def not_done_message(
    journal: OperatorJournal, run_id: str, task_id: str, settings: SagaSettings, timeout: float
) -> str:
    """What a person must know when the report did not come: whether a worker has started the unwind,
    and, if none has, that the request is still queued and will condemn the run whenever a worker
    takes it, and how to withdraw it until then."""
    if journal.get_unwind(task_id) is not None:
        return (
            f"no report for run {run_id!r} after {timeout:.0f}s, but a worker has started its unwind (task "
            f"{task_id}) and will finish it: saga-worker report {run_id}"
        )
    return (
        f"no report for run {run_id!r} after {timeout:.0f}s: no worker has started the unwind. The request "
        f"(task {task_id}) stays queued on queue {settings.queue!r}, and the first worker consuming it will "
        f"condemn run {run_id!r} and unwind it. Is a worker running with -Q {settings.queue} (saga-worker "
        f"worker)? To withdraw the request before a worker starts it: saga-worker revoke {task_id}"
    )


def _print_new_entries(journal: OperatorJournal, unwind_id: str, seen: int) -> int:
    entries = _unwind_entries(journal, unwind_id)
    for entry in entries[seen:]:
        style = STATUS_STYLE.get(entry["status"], "")
        status = safe(entry["status"])
        out.print(f"  step {safe(entry['suffix'])} ({safe(entry['tool_name'])}): [{style}]{status}[/]")
    return max(seen, len(entries))


def _unwind_entries(journal: OperatorJournal, unwind_id: str) -> list[dict[str, Any]]:
    entries = journal.list_unwind_entries(unwind_id)
    return [entries[p] for p in sorted(entries)]
