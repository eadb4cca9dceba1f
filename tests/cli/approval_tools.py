"""Tools with approvals for the CLI tests (``SAGA_TOOLS=tests.cli.approval_tools:TOOLS``): ``refund``
needs a person's approval before it executes, ``reserve``'s compensation needs one before it runs.
Every effect goes to ``LEDGER``, shared by the test and the command it invokes in the same process."""

from __future__ import annotations

from typing import Any

from saga_worker import CallOptions, Tool, ToolCall, scripted
from tests.ledger import MemoryLedger

LEDGER = MemoryLedger()


def _execute(name: str) -> Any:
    def run(input: Any, opts: CallOptions) -> Any:
        LEDGER.effect(opts.idempotency_key, f"execute:{name}")
        return {"id": f"{name}-{opts.tool_call_id}"}

    return run


def _compensate(name: str) -> Any:
    def undo(input: Any, output: Any, opts: CallOptions) -> None:
        LEDGER.effect(opts.idempotency_key, f"compensate:{name}")

    return undo


TOOLS = {
    "charge": Tool(_execute("charge"), _compensate("charge")),
    "reserve": Tool(_execute("reserve"), _compensate("reserve"), compensate_needs_approval=True),
    "refund": Tool(_execute("refund"), _compensate("refund"), needs_approval=True),
}


def gated_order() -> Any:
    """charge, then reserve (whose compensation is gated)."""
    return scripted(ToolCall("charge", {"amount": 900}), ToolCall("reserve", {"sku": "A1"}), final="placed")


def refund_order() -> Any:
    """charge, then refund (which waits for a person before it executes)."""
    return scripted(ToolCall("charge", {"amount": 10}), ToolCall("refund", {"amount": 500}), final="refunded")
