"""``@tool``: a ``Tool`` from a plain function (docs/reference/integration.md).

The function is the ``execute`` hook (``execute(input, opts)``, plain or ``async def``); every
other ``Tool`` option is a keyword of the decorator, and the first line of the function's docstring
is the tool's description unless one is given.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, overload

from .tools import Hook, Tool


@overload
def tool(execute: Hook, /) -> Tool: ...


@overload
def tool(
    execute: None = None, /, *, compensate: Hook | None = None, recover: Hook | None = None, **options: Any
) -> Callable[[Hook], Tool]: ...


def tool(
    execute: Hook | None = None,
    /,
    *,
    compensate: Hook | None = None,
    recover: Hook | None = None,
    **options: Any,
) -> Tool | Callable[[Hook], Tool]:
    """``@tool`` or ``@tool(compensate=..., recover=..., idempotency=..., idempotent=..., ...)``."""

    def make(fn: Hook) -> Tool:
        opts = dict(options)
        if "description" not in opts:
            doc = (inspect.getdoc(fn) or "").strip()
            opts["description"] = doc.splitlines()[0] if doc else ""
        return Tool(fn, compensate, recover, **opts)

    if execute is not None:
        return make(execute)
    return make


__all__ = ["tool"]
