"""The shop every framework's agent test drives: charge, reserve, notify, with a ledger for effects.

The framework tool functions call :class:`Shop`, which applies each effect once per idempotency key
in the ledger (as a provider deduplicates) and notes every raw call, so a second execution shows.
The compensate and recover hooks (``shop_hooks``) are what an app would hand saga-worker: the same
mapping the agent runs with and a Celery worker loads.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest

from saga_worker import CallOptions, Journal, RecoverResult, Tool, compensate_run
from saga_worker.integrations import call_options, hooks
from tests.ledger import Ledger

ORDER: list[tuple[str, dict[str, Any]]] = [
    ("charge", {"amount": 10}),
    ("reserve", {"sku": "A1", "qty": 2}),
    ("notify", {"to": "c@example.com"}),
]


class Crash(BaseException):
    """The process dying: not an error any framework or saga() handles, so the run is left as it was."""


def require_framework(module: str) -> Any:
    """The framework package, or a skip locally; under CI=true a missing extra is a failure."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{module} is not installed ({exc}); make test installs the agent extras")
        # Called at a test module's top (before it imports the framework): the whole module skips.
        pytest.skip(f"{module} is not installed: pip install -e '.[dev]'", allow_module_level=True)


class Shop:
    """What the agent's tools do. Each takes the key from the call saga-worker is executing."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def charge(self, amount: int) -> dict[str, Any]:
        """Charge the customer."""
        key = call_options().idempotency_key
        self.ledger.effect(key, "execute:charge")
        return {"charge_id": f"ch-{key}", "amount": amount}

    def reserve(self, sku: str, qty: int) -> dict[str, Any]:
        """Reserve stock."""
        key = call_options().idempotency_key
        self.ledger.effect(key, "execute:reserve")
        return {"reservation": f"rs-{key}", "sku": sku, "qty": qty}

    def notify(self, to: str) -> str:
        """Tell the customer."""
        key = call_options().idempotency_key
        self.ledger.effect(key, "execute:notify")
        return f"sent to {to}"


def shop_hooks(ledger: Ledger, **overrides: Tool) -> dict[str, Tool]:
    """Compensate hooks for the three tools (each undoes once per key), and a recover probe."""

    def undo(name: str) -> Any:
        def compensate(input: Any, output: Any, opts: CallOptions) -> None:
            ledger.effect(opts.idempotency_key, f"compensate:{name}")

        return compensate

    def recover(name: str) -> Any:
        def probe(input: Any, opts: CallOptions) -> RecoverResult:
            done = any(c.key == opts.idempotency_key for c in ledger.effects())
            return RecoverResult(done=done, output={"recovered": name} if done else None)

        return probe

    tools = {name: hooks(compensate=undo(name), recover=recover(name)) for name, _ in ORDER}
    tools.update(overrides)
    return tools


def executed(ledger: Ledger) -> dict[str, int]:
    """Raw executions per key: a replayed call does not show here."""
    return dict(ledger.call_counts("execute"))


def compensated(ledger: Ledger) -> list[str]:
    """Compensation effects in the order they happened."""
    return [c.key for c in ledger.effects() if c.what.startswith("compensate")]


# Two model responses: charge alone, then reserve and notify asked together (one group).
TWO_TURNS: list[list[tuple[str, dict[str, Any]]]] = [[ORDER[0]], [ORDER[1], ORDER[2]]]


def unwound_by_turn(journal: Journal, ledger: Ledger, run_id: str) -> list[tuple[int, str]]:
    """A parallel unwind of the TWO_TURNS run: (group, tool) per entry, a group's steps sorted (their
    recording order is whichever the framework claimed first); each step undone once."""
    report = compensate_run(run_id, journal=journal, tools=shop_hooks(ledger), parallel=True)
    assert report.complete, report
    assert sorted(ledger.call_counts("compensate").values()) == [1, 1, 1]
    rows = [(e.group, e.tool_name) for e in report.entries]
    return sorted(rows[:2]) + rows[2:]
