"""A three-step order (charge, reserve, notify) whose compensate hooks a ``Provider`` counts, for the
tests that drive the Celery tasks' continuation logic in process (test_chain.py,
test_last_step_ends_the_unwind.py)."""

from __future__ import annotations

import json
from typing import Any, cast

from saga_worker import CallOptions, Journal, Tool, ToolCall, run_durable
from saga_worker.compensation.report import CompensationReport
from saga_worker.recording.planning import scripted

TTL = 5.0


class Provider:
    """Counts compensate calls per key; a tool named in ``fail`` raises."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.fail: set[str] = set()

    def tools(self) -> dict[str, Tool]:
        def make(name: str) -> Tool:
            def compensate(input: Any, output: Any, opts: CallOptions) -> None:
                self.calls.append(opts.idempotency_key)
                if name in self.fail:
                    raise RuntimeError(f"{name} refund refused")

            return Tool(lambda input, opts: {"ok": name}, compensate)

        return {name: make(name) for name in ("charge", "reserve", "notify")}


def order(journal: Journal, provider: Provider, run_id: str) -> None:
    run_durable(
        run_id,
        journal=journal,
        tools=provider.tools(),
        planner=scripted(
            ToolCall("charge", {"a": 1}), ToolCall("reserve", {"b": 2}), ToolCall("notify", {"c": 3})
        ),
    )


def same_but_run(report: CompensationReport, old: str, new: str) -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(json.dumps(report.model_dump(mode="json")).replace(old, new)))
