"""Tools for the parallel unwind's tests: hooks that write down every call with its key and how many
ran at once, a run that records three groups, and the Celery executor's chain driven as workers
drive it (each wave's steps on threads of their own)."""

from __future__ import annotations

import contextlib
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from saga_worker import CallOptions, CompensationReport, Journal, Tool, ToolFailedError, executor, saga

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


CLAIM_TTL = 30.0


def drive(journal: Journal, tools: dict[str, Tool], nxt: executor.Next) -> list[executor.Next]:
    """Run an unwind's chain as workers would: each wave's steps at once, each step's continuation
    followed (every one, duplicates included); what each step task went on with, in order."""
    seen: list[executor.Next] = []
    pending = [nxt]
    with ThreadPoolExecutor(max_workers=8) as pool:
        while pending:
            current = pending.pop(0)
            steps = current.steps if isinstance(current, executor.Fan) else (current,)
            todo = [s for s in steps if isinstance(s, executor.Step)]
            futures = [
                pool.submit(
                    executor.run_step, journal, tools, s.run_id, s.unwind_id, s.suffix, claim_ttl=CLAIM_TTL
                )
                for s in todo
            ]
            for future in futures:
                went_on = future.result()
                if went_on is not None:
                    seen.append(went_on)
                    if isinstance(went_on, executor.Step | executor.Fan):
                        pending.append(went_on)
    return seen


def unwind_on_executor(
    journal: Journal, tools: dict[str, Tool], run_id: str, *, parallel_max: int = 8, dry_run: bool = False
) -> tuple[CompensationReport, list[executor.Next], executor.Next]:
    unwind_id = f"u-{uuid.uuid4().hex[:8]}"
    first = executor.start_unwind(
        journal, run_id, unwind_id, dry_run=dry_run, claim_ttl=CLAIM_TTL, parallel_max=parallel_max
    )
    seen = drive(journal, tools, first)
    return executor.finalize_unwind(journal, run_id, unwind_id), seen, first
