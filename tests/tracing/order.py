"""The order the tracing tests record and unwind: charge, reserve, notify (notify has no compensate
hook); a tool named in ``fail`` has a compensate hook that raises. Inputs carry a card number and a
password, which no span may show unless values are opted in."""

from __future__ import annotations

import sys
import time
from typing import Any

from saga_worker import CallOptions, Journal, Tool, ToolCall, open_journal, run_durable, scripted

INPUTS: dict[str, dict[str, Any]] = {
    "charge": {"amount": 42, "card": "4242424242424242", "password": "hunter2"},
    "reserve": {"sku": "sku-7"},
    "notify": {"to": "ada@example.com"},
}


# Seconds each tool's hooks take when ``slow`` (the picture's trace): a waterfall with visible bars.
SLOW = {"charge": 0.06, "reserve": 0.035, "notify": 0.02}


def order_tools(fail: tuple[str, ...] = (), *, slow: bool = False) -> dict[str, Tool]:
    def make(name: str, undo: bool) -> Tool:
        def execute(input: Any, opts: CallOptions) -> Any:
            time.sleep(SLOW[name] if slow else 0)
            return {"id": f"{name}-{opts.tool_call_id}", "receipt": "r-secret-99"}

        def compensate(input: Any, output: Any, opts: CallOptions) -> None:
            time.sleep(SLOW[name] / 2 if slow else 0)
            if name in fail:
                raise RuntimeError(f"{name}: the provider refused the compensation")

        return Tool(execute, compensate if undo else None)

    return {"charge": make("charge", True), "reserve": make("reserve", True), "notify": make("notify", False)}


def record_order(journal: Journal, run_id: str, *, slow: bool = False) -> None:
    calls = [ToolCall(name, INPUTS[name]) for name in ("charge", "reserve", "notify")]
    result = run_durable(run_id, journal=journal, tools=order_tools(slow=slow), planner=scripted(*calls))
    assert result.status == "finished", result


def _logging_tools() -> dict[str, Tool]:
    import logging

    log = logging.getLogger("shop.refunds")

    def compensate(input: Any, output: Any, opts: CallOptions) -> None:
        log.warning("refunding %s", opts.idempotency_key)

    return {name: Tool(lambda i, o: {"ok": True}, compensate) for name in ("charge", "reserve", "notify")}


# SAGA_TOOLS=tests.tracing.order:LOGGING_TOOLS: every compensate hook logs a warning naming its key.
LOGGING_TOOLS = _logging_tools()


if (
    __name__ == "__main__"
):  # python -m tests.tracing.order JOURNAL_URL RUN_ID SPANS_DIR: a run recorded elsewhere
    from .spans import export_to_dir

    url, run_id, folder = sys.argv[1:4]
    provider = export_to_dir(folder, "the-recording-process")
    journal = open_journal(url, migrate=True)
    record_order(journal, run_id, slow=sys.argv[4:5] == ["slow"])
    journal.close()
    provider.shutdown()
