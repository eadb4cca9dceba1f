"""The tools test workers load (``SAGA_TOOLS=tests.integration.worker_tools:tools``).

The sample order's tools from tests/ledger.py, whose compensate hooks note every call and apply
their effect once per idempotency key in a ledger the test reads. A test steers one run's hooks
with files in ``SAGA_TEST_CONTROL`` named ``{run_id}.{action}-{tool}``:

- ``fail``: the hook raises (every time, while the file exists); the file's text, read with Python
  escapes (``\\x00``, ``\\ud800``), ends the exception's message;
- ``slow``: the hook sleeps the seconds written in the file first;
- ``kill``: the process running the hook SIGKILLs itself (once: the file is consumed);
- ``killalways``: the same, every time, while the file exists;
- ``hang``: the hook writes ``{run_id}.hanging-{tool}`` (its pid) and blocks, for the test to kill
  the whole worker (once);
- ``hold``: the hook writes ``{run_id}.holding-{tool}`` and waits until the test deletes the ``hold``
  file (at most a minute), for a test to look at a hook while it runs.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from saga_worker import CallOptions, Tool
from saga_worker.settings import get_settings
from tests.ledger import Ledger, open_ledger, order_tools


def control_dir() -> Path:
    return Path(os.environ["SAGA_TEST_CONTROL"])


def _take(path: Path) -> bool:
    """Consume a once-only control file; exactly one process wins the rename."""
    try:
        path.rename(path.with_name(path.name + f".taken-{os.getpid()}"))
    except FileNotFoundError:
        return False
    return True


def before_compensate(ledger: Ledger, name: str, opts: CallOptions, control: Path | None = None) -> None:
    ledger.call(opts.idempotency_key, f"start:{name}")
    base = (control or control_dir()) / f"{opts.run_id}."
    slow = Path(f"{base}slow-{name}")
    if slow.exists():
        time.sleep(float(slow.read_text() or "1"))
    fail = Path(f"{base}fail-{name}")
    if fail.exists():
        words = fail.read_text().encode("ascii").decode("unicode_escape")
        raise RuntimeError(f"{name}: the provider refused the compensation{words}")
    if _take(Path(f"{base}kill-{name}")) or Path(f"{base}killalways-{name}").exists():
        os.kill(os.getpid(), signal.SIGKILL)
    hold = Path(f"{base}hold-{name}")
    if hold.exists():
        Path(f"{base}holding-{name}").write_text(str(os.getpid()))
        deadline = time.monotonic() + 60
        while hold.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    if _take(Path(f"{base}hang-{name}")):
        Path(f"{base}hanging-{name}").write_text(str(os.getpid()))
        time.sleep(600)


def approval_tools(ledger: Ledger, hook: Any = None) -> dict[str, Tool]:
    """Tools that wait for a person (docs/reference/approvals.md): ``refund`` before it executes, ``restock``
    before its compensation runs. Effects go to ``ledger`` as the order's tools' do."""

    def make(name: str, **rules: Any) -> Tool:
        def execute(input: Any, opts: CallOptions) -> Any:
            ledger.effect(opts.idempotency_key, f"execute:{name}")
            return {"id": f"{name}-{opts.tool_call_id}", "input": input}

        def compensate(input: Any, output: Any, opts: CallOptions) -> None:
            if hook is not None:
                hook(name, input, output, opts)
            ledger.effect(opts.idempotency_key, f"compensate:{name}")

        return Tool(execute, compensate, **rules)

    return {
        "refund": make("refund", needs_approval=True),
        "restock": make("restock", compensate_needs_approval=True),
    }


def tools() -> dict[str, Tool]:
    ledger = open_ledger(get_settings().resolved_journal_url(), scope=os.environ["SAGA_TEST_SCOPE"])

    def hook(name: str, input: Any, output: Any, opts: CallOptions) -> None:
        before_compensate(ledger, name, opts)

    return {**order_tools(ledger, before_compensate=hook), **approval_tools(ledger, hook)}
