"""The tools the fault suite's runs call: every hook reports to the ledger (the external provider).

``pay`` executes (an effect keyed by its execute key), compensates (an effect keyed by its
compensation key) and recovers (asks the ledger whether the execute key's effect exists), so every
step's truth is knowable. Its input steers it: ``sleep`` / ``comp_sleep`` make a hook slow (so a
fault can land inside it), ``comp_hold`` (a file path) keeps a compensation hook inside until the test
creates that file (a hold that does not depend on how fast a loaded machine starts the next process),
and ``comp_fail`` makes the first N compensation calls of a key fail.
Workers load it with ``SAGA_TOOLS=tests.faults.toolkit:TOOLS`` and ``FAULT_LEDGER_URL``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from saga_worker import CallOptions, RecoverResult, Tool
from saga_worker.core import faults

from .ledger import Ledger

_ledger: Ledger | None = None


class ProviderError(Exception):
    """The provider refused a compensation (a transient failure the unwind retries)."""


def ledger() -> Ledger:
    global _ledger
    if _ledger is None:
        _ledger = Ledger(os.environ["FAULT_LEDGER_URL"])
    return _ledger


def step_of(opts: CallOptions) -> str:
    return f"{opts.run_id}:{opts.tool_call_id}"


HOLD_LIMIT_S = 120.0


def hold_until_released(path: str) -> None:
    """Stay inside the hook until ``path`` exists (never past HOLD_LIMIT_S, so a failed test ends)."""
    if not path:
        return
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not Path(path).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def make_tools(get_ledger: Callable[[], Ledger]) -> dict[str, Tool]:
    """The ``pay`` tool reporting to the ledger ``get_ledger()`` returns."""

    def execute(input: dict[str, Any], opts: CallOptions) -> dict[str, Any]:
        led = get_ledger()
        call = led.begin_call("execute", opts.idempotency_key, step_of(opts))
        time.sleep(float(input.get("sleep", 0)))
        faults.point("mid_execute", opts.idempotency_key)
        applied = led.apply("execute", opts.idempotency_key, step_of(opts))
        led.end_call(call, "applied" if applied else "duplicate")
        return {"paid": input.get("n", 0)}

    def compensate(input: dict[str, Any], output: Any, opts: CallOptions) -> None:
        led = get_ledger()
        call = led.begin_call("compensate", opts.idempotency_key, step_of(opts))
        if led.count_calls(opts.idempotency_key) <= int(input.get("comp_fail", 0)):
            led.end_call(call, "raised")
            raise ProviderError(f"provider refused {opts.idempotency_key} (injected)")
        time.sleep(float(input.get("comp_sleep", 0)))
        hold_until_released(input.get("comp_hold", ""))
        faults.point("mid_hook", opts.idempotency_key)
        applied = led.apply("compensate", opts.idempotency_key, step_of(opts))
        led.end_call(call, "applied" if applied else "duplicate")

    def recover(input: dict[str, Any], opts: CallOptions) -> RecoverResult:
        done = get_ledger().has_effect(opts.idempotency_key)
        return RecoverResult(done=done, output={"paid": input.get("n", 0)} if done else None)

    return {"pay": Tool(execute, compensate, recover)}


TOOLS = make_tools(ledger)
