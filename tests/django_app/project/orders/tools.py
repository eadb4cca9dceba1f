"""The project's tools, in a module of their own (SAGA_TOOLS): the demo's, and two that wait for a
person: ``refund`` before it executes, ``reserve``'s compensation before it runs."""

from typing import Any

from saga_worker import CallOptions, Tool
from saga_worker.contrib.demo import TOOLS as DEMO

UNDONE: list[str] = []  # what each compensation undid, in this process (the admin's tests read it)


def _execute(name: str) -> Any:
    def run(input: Any, opts: CallOptions) -> Any:
        return {"id": f"{name}-{opts.tool_call_id}"}

    return run


def _compensate(name: str) -> Any:
    def undo(input: Any, output: Any, opts: CallOptions) -> None:
        UNDONE.append(name)

    return undo


TOOLS = {
    **DEMO,
    "pay": Tool(_execute("pay"), _compensate("pay")),
    "reserve": Tool(_execute("reserve"), _compensate("reserve"), compensate_needs_approval=True),
    "refund": Tool(_execute("refund"), _compensate("refund"), needs_approval=True),
}
