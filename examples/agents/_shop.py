"""What the three examples share: a shop whose tools have effects, its undo hooks, and printing.

The "provider" is a dict keyed by idempotency key, as a real payment API deduplicates: the tools
take the key from :func:`saga_worker.integrations.call_options`, and every raw execution and
compensation is counted, so the output shows that nothing ran twice.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from saga_worker import CallOptions, CompensationReport, Journal, Tool, open_journal
from saga_worker.integrations import call_options, hooks

ORDER: list[tuple[str, dict[str, Any]]] = [
    ("charge", {"amount": 10}),
    ("reserve", {"sku": "A1", "qty": 2}),
    ("notify", {"to": "c@example.com"}),
]
executions: Counter[str] = Counter()
compensations: Counter[str] = Counter()


class Crash(BaseException):
    """The process dying mid-run: not an error any framework handles, so the run is left as it was."""


def charge(amount: int) -> dict[str, Any]:
    """Charge the customer."""
    executions[f"charge {call_options().idempotency_key}"] += 1
    return {"charge_id": f"ch-{call_options().idempotency_key}", "amount": amount}


def reserve(sku: str, qty: int) -> dict[str, Any]:
    """Reserve stock."""
    executions[f"reserve {call_options().idempotency_key}"] += 1
    return {"reservation": f"rs-{call_options().idempotency_key}", "sku": sku, "qty": qty}


def notify(to: str) -> str:
    """Tell the customer."""
    executions[f"notify {call_options().idempotency_key}"] += 1
    return f"sent to {to}"


def _undo(name: str) -> Any:
    def compensate(input: Any, output: Any, opts: CallOptions) -> None:
        compensations[f"{name} {opts.idempotency_key}"] += 1

    return compensate


# The saga side of each tool: how to undo it. The same mapping a Celery worker loads (SAGA_TOOLS).
HOOKS: dict[str, Tool] = {name: hooks(compensate=_undo(name)) for name, _ in ORDER}


def temporary_journal() -> Journal:
    return open_journal(f"sqlite:///{Path(tempfile.mkdtemp()) / 'journal.db'}")


def show_journal(journal: Journal, run_id: str) -> None:
    for record in journal.list_records(run_id):
        print(f"  {record.suffix:<8} {record.tool_name:<8} {record.status.value:<10} {record.input}")


def show_counts(title: str, counts: Counter[str]) -> None:
    print(f"{title}:", ", ".join(f"{key} x{n}" for key, n in sorted(counts.items())) or "none")


def show_report(report: CompensationReport) -> None:
    print(f"unwind of {report.run_id} (condemned: {report.condemned}, complete: {report.complete}):")
    for entry in report.entries:
        print(
            f"  {entry.suffix:<8} {entry.tool_name:<8} {entry.status.value:<20} key {entry.idempotency_key}"
        )
