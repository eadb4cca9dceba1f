"""Tools for the parallel unwind's tests: hooks that write down every call with its key and how many
ran at once, and a run that records three groups."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from saga_worker import CallOptions, CompensationReport, Journal, Tool, ToolFailedError, saga

# Three hooks that can only all return if they run at the same time: a sequential unwind breaks the
# barrier (its first hook waits alone), and the step reads failed.
TOGETHER = 3


class Hooks:
    """Tools whose compensate hooks write down every call (with its key) and how many ran at once."""

    def __init__(self, together: int = 1) -> None:
        self.undone: list[tuple[str, str]] = []
        self.fail: set[str] = set()
        self.in_flight = 0
        self.most_at_once = 0
        self._lock = threading.Lock()
        self.barrier = threading.Barrier(together, timeout=20) if together > 1 else None
        self.meet: set[str] = set()  # the tools whose hooks wait at the barrier

    def tool(self, name: str, *, compensate: bool = True, fails_to_execute: bool = False, **kw: Any) -> Tool:
        def execute(input: Any, opts: CallOptions) -> Any:
            if fails_to_execute:
                raise RuntimeError(f"{name} broke")
            return {"id": f"{name}-1"}

        def undo(input: Any, output: Any, opts: CallOptions) -> None:
            with self._lock:
                self.in_flight += 1
                self.most_at_once = max(self.most_at_once, self.in_flight)
            try:
                if name in self.meet and self.barrier is not None:
                    self.barrier.wait()
                if name in self.fail:
                    raise RuntimeError(f"{name} refund refused")
                with self._lock:
                    self.undone.append((name, opts.idempotency_key))
            finally:
                with self._lock:
                    self.in_flight -= 1

        return Tool(execute, undo if compensate else None, **kw)


def tools_of(hooks: Hooks, names: list[str], **special: Tool) -> dict[str, Tool]:
    return {**{n: hooks.tool(n) for n in names}, **special}


def record_fan_out(journal: Journal, run_id: str, tools: dict[str, Tool], middle: list[str]) -> None:
    """book, then ``middle`` in one parallel() block, then notify: three groups."""
    with saga(run_id, journal=journal, tools=tools) as run:
        run.call("book", {"n": 1})
        with run.parallel():
            for name in middle:
                # A failed call is still in the group (its effect is uncertain).
                with contextlib.suppress(ToolFailedError):
                    run.call(name, {"n": 2})
        run.call("notify", {"n": 3})


def rows(report: CompensationReport) -> list[tuple[str, int, str]]:
    return [(e.tool_name, e.group, e.status.value) for e in report.entries]
