"""Each test that runs an agent framework starts with no event loop left over from the test before it
(tests/agents/conftest.py and the worker test import the fixture, which is autouse where imported).

The frameworks' sync entry points treat the thread's default event loop differently. The OpenAI
Agents SDK's ``Runner.run_sync`` keeps that loop open on purpose (its sessions stash loop-bound
primitives between calls) and calls ``loop.shutdown_asyncgens()`` on it after every run.
pydantic-ai's ``Agent.run_sync`` reuses the thread's current loop when it is open. So after an SDK
``run_sync``, pydantic-ai first-iterates its ``Agent.iter`` async generator on a loop whose
asyncgens were already shut down: asyncio warns ("scheduled after loop.shutdown_asyncgens() call",
a ``ResourceWarning``, an error under ``filterwarnings = error``), and that generator would never be
finalized by the loop. In an app that mixes both frameworks on one thread the same happens; here
it would make a test's outcome depend on which test ran before it.

pydantic-ai's ``run_sync`` also leaves the loop it made open and current; the next ``asyncio.run``
unsets it, and the GC later finalizes it unclosed: its ``ResourceWarning`` (an error here) goes to
pytest's unraisablehook, which formats a traceback, which on 3.11 calls ``ast.parse``. When that GC
pass runs inside another ``ast.parse`` (pytest rewriting a module imported late, a framework parsing
an annotation), CPython up to 3.11.7 fails the outer one with "SystemError: AST constructor
recursion depth mismatch" (gh-106905: the AST converter's depth counter was interpreter-global;
fixed in 3.11.8). So the loop a test leaves behind is shut down and closed at its teardown, and the
thread gets no current loop: nothing is left for the GC to finalize unclosed.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def no_event_loop_left_behind() -> Iterator[None]:
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # get_event_loop() with no loop set, on 3.12+
        try:
            loop = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:  # none set (asyncio.run() unsets its own): nothing left behind
            loop = None
    if loop is not None and not loop.is_closed():
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    asyncio.set_event_loop(None)
